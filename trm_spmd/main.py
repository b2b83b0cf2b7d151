"""Entry point: the same command on every host.

  python -m trm_spmd.main --config=configs/tn_sweep.py:t3_n6 --workdir=DIR [--config.optim.lr=3e-4]
  python -m trm_spmd.main --config=configs/baseline.py:runlocal --workdir=DIR --dry_run
"""

import sys

from absl import flags, logging

from trm_spmd import errors
from trm_spmd.config.flags import check_config_argv, config_source, define_config_flag

FLAGS = flags.FLAGS
define_config_flag()
flags.DEFINE_string('workdir', None, 'Run directory (local path or gs://); rerunning with it resumes.')
flags.DEFINE_bool('dry_run', False, 'Print the resolved config, its hash, the mesh and batch split; do not train.')
flags.DEFINE_bool('takeover_stale_lease', False,
                  'Take over the workdir from a run that stopped renewing its lease (never from a live one).')
flags.mark_flags_as_required(['config'])


def main(argv):
    del argv
    config = FLAGS.config
    if FLAGS.dry_run:
        from trm_spmd.dry_run import dry_run
        dry_run(config, config_source())
        return
    if not FLAGS.workdir:
        raise errors.UserError('--workdir is required to train (or pass --dry_run)')
    from trm_spmd.train.loop import train_and_evaluate
    train_and_evaluate(config, FLAGS.workdir, source=config_source(), takeover_stale_lease=FLAGS.takeover_stale_lease)


def run():
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    errors.run_main(main, check_config_argv)


if __name__ == '__main__':
    run()
    sys.exit(0)
