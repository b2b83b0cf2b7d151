"""Entry point: the same command on every host.

  python -m trm_spmd.main --config=configs/tn_sweep.py:t3_n6 --workdir=DIR [--config.optim.lr=3e-4]
  python -m trm_spmd.main --config=configs/baseline.py:runlocal --workdir=DIR --dry_run
"""

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from trm_spmd import errors

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'Config file and argument: FILE.py[:ARG].', lock_config=True)
flags.DEFINE_string('workdir', None, 'Run directory (local path or gs://); rerunning with it resumes.')
flags.DEFINE_bool('dry_run', False, 'Print the resolved config, its hash, the mesh and batch split; do not train.')
flags.mark_flags_as_required(['config'])


def config_source():
    """What the run was launched with: the file:arg and the --config.* overrides."""
    holder = FLAGS['config']
    return {'config_file': holder.config_filename, 'overrides': dict(holder.override_values)}


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
    train_and_evaluate(config, FLAGS.workdir, source=config_source())


def _check_config_file(argv):
    """Loads --config once before absl does, so a bad file or argument is one line, not a traceback."""
    from trm_spmd.config import load_config
    for i, arg in enumerate(argv):
        if arg.startswith('--config='):
            load_config(arg.split('=', 1)[1])
        elif arg == '--config' and i + 1 < len(argv):
            load_config(argv[i + 1])


def run():
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    errors.run_main(lambda fn: (_check_config_file(sys.argv[1:]), app.run(fn)), main)


if __name__ == '__main__':
    run()
    sys.exit(0)
