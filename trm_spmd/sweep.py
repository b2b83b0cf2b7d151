"""Runs every entry of a sweep on this machine, one after another, then its tables and plots.

  python -m trm_spmd.sweep --sweep=configs/cpu_study.py --study_root=runs/cpu_study --report=runs/cpu_study/report

Each entry trains in its own process (`python -m trm_spmd.main --config=ENTRY
--workdir=STUDY_ROOT/<name>/<variant>`, the layout launch/tpu.py uses on a pod); a run
whose run.json says done is skipped, so the same command resumes a study that was stopped.
A failed run is reported and the sweep goes on. Ctrl-C stops the run in progress as it
stops any run (a checkpoint, then exit) and then the sweep. --report writes the study's
comparison table (compare.md, compare.csv) and plots into a directory at the end.
"""

import json
import signal
import subprocess
import sys
import time

from absl import flags, logging

from trm_spmd import errors, fs
from trm_spmd.config import expand_sweep, load_config
from trm_spmd.progress import format_duration

FLAGS = flags.FLAGS


def define_flags():
    """The command's flags, defined when it runs: importing this module defines none (its
    functions are used elsewhere, and absl's flags are global to the process)."""
    flags.DEFINE_string('sweep', None, 'FILE.py[:SWEEP]: the sweep function of a config file (default `sweep`)')
    flags.DEFINE_string('study_root', None, 'directory (or gs://) holding one workdir per run')
    flags.DEFINE_string('report', '', 'write compare.md/.csv and the plots here when the sweep ends')
    flags.DEFINE_list('only', [], 'run only these entries (their FILE.py:ARG as the sweep lists them)')
    flags.mark_flags_as_required(['sweep', 'study_root'])


def workdir_of(study_root, spec):
    """STUDY_ROOT/<config name>/<variant, else the ARG, else 'default'>."""
    config = load_config(spec)
    leaf = str(config.variant or spec.partition(':')[2] or 'default').replace('/', '_')
    return fs.join(study_root, str(config.name), leaf)


def status_of(workdir):
    path = fs.join(workdir, 'run.json')
    return json.loads(fs.read_text(path)).get('status') if fs.exists(path) else None


def run_entry(command):
    """The exit code of `command`, one run in its own process. Ctrl-C at the terminal reaches
    the run itself (the whole foreground process group gets it), which saves and stops: the
    sweep ignores it meanwhile, so that it neither kills the run before its checkpoint nor
    goes on to the next. The run gets Ctrl-C's default handling back."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.call(command, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv):
    del argv
    runs = [(spec, workdir_of(FLAGS.study_root, spec)) for spec in expand_sweep(FLAGS.sweep)
            if not FLAGS.only or spec in FLAGS.only]
    failed = []
    for i, (spec, workdir) in enumerate(runs, 1):
        if status_of(workdir) == 'done':
            print(f'[{i}/{len(runs)}] {spec}: done already ({workdir})', flush=True)
            continue
        print(f'[{i}/{len(runs)}] {spec} -> {workdir}', flush=True)
        start = time.time()
        code = run_entry([sys.executable, '-m', 'trm_spmd.main', f'--config={spec}', f'--workdir={workdir}'])
        if code == errors.EXIT_STOPPED:
            raise errors.Stopped(f'[{i}/{len(runs)}] {spec}: stopped by Ctrl-C; the same command resumes the sweep, '
                                 f'this run from its newest checkpoint')
        print(f'[{i}/{len(runs)}] {spec}: {"done" if code == 0 else f"FAILED (exit {code})"} in '
              f'{format_duration(time.time() - start)}', flush=True)
        if code:
            failed.append(spec)
    if FLAGS.report:
        for command in ('compare', 'plot'):
            subprocess.check_call([sys.executable, '-m', 'trm_spmd.analysis', command, FLAGS.study_root,
                                   f'--out={FLAGS.report}'])
    if failed:
        raise errors.UserError(f'{len(failed)} of {len(runs)} runs failed: {", ".join(failed)}; '
                               f'their logs are above, and rerunning the same command retries them')


def run():
    define_flags()
    logging.set_verbosity(logging.WARNING)
    errors.run_main(main)


if __name__ == '__main__':
    run()
