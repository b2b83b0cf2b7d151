"""Runs every benchmark, each in its own process, and lists what each wrote.

    python benchmarks/run_suite.py                                  # the baseline on this machine's devices
    python benchmarks/run_suite.py --config=configs/quickstart.py   # CPU-sized figures
    python benchmarks/run_suite.py --smoke --out=/tmp/bench         # ~1 min on a CPU: the scripts work

In order: step time (with a projection onto --slice at its measured MFU), the projection of
the config onto --slice at --project_batch (measured MFU when the step time has one, else
--mfu), evaluation throughput, data pipeline throughput (its printout is kept as a .txt),
and checkpoint overhead. --smoke runs the `:runlocal` baseline with fewer cycles for a step
or two: it checks that every script runs end to end, its timings mean nothing. The real
v4-64 projection of the baseline runs in --smoke as well (it needs no device).
Each benchmark's stderr goes to OUT/suite_<date>.log; the exit status is 1 if any failed.
"""

import datetime
import json
import os
import re
import subprocess
import sys
import time

from absl import app, flags

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS_DIR = os.path.join(HERE, 'results')
# --smoke: the runlocal baseline with 2x2 cycles, so each graph compiles in seconds on a CPU.
SMOKE_CONFIG = 'configs/baseline.py:runlocal'
SMOKE_OVERRIDES = ('--config.model.H_cycles=2', '--config.model.L_cycles=2')

flags.DEFINE_bool('smoke', False, 'tiny runs of every script (script health, not timing)')
flags.DEFINE_string('out', '', 'directory for every result file (default benchmarks/results)')
flags.DEFINE_string('config', 'configs/baseline.py', 'config FILE.py[:ARG] to benchmark (ignored with --smoke)')
flags.DEFINE_integer('global_batch', 0, 'global batch of the training steps (0: the config\'s)')
flags.DEFINE_integer('steps', 20, 'timed training steps')
flags.DEFINE_string('slice', 'v4-64', 'TPU slice to project onto')
flags.DEFINE_integer('project_batch', 6144, 'global batch of the projection')
flags.DEFINE_float('mfu', 0.5, 'MFU for the projection when the step time measured none (CPU)')
flags.DEFINE_list('only', [], 'run only these: step_time, projection, eval_throughput, data_throughput, '
                              'checkpoint_overhead')
flags.DEFINE_string('notes', '', 'free text stored with every result')
FLAGS = flags.FLAGS

NAMES = ('step_time', 'projection', 'eval_throughput', 'data_throughput', 'checkpoint_overhead')


def plan(out):
    """[(name, argv)] of the suite; the projection's --measured is filled in after the step time."""
    notes = [f'--notes={FLAGS.notes}'] if FLAGS.notes else []
    common = [f'--out={out}'] + notes
    projection = ['--config=configs/baseline.py' if FLAGS.smoke else f'--config={FLAGS.config}',
                  f'--slice={FLAGS.slice}', f'--global_batch={FLAGS.project_batch}', f'--mfu={FLAGS.mfu}'] + common
    if FLAGS.smoke:
        config = [f'--config={SMOKE_CONFIG}', *SMOKE_OVERRIDES]
        return [
            ('step_time', config + ['--steps=2', '--warmup=1', '--pipelined_steps=2', '--project',
                                    f'--slice={FLAGS.slice}'] + common),
            ('projection', projection),
            ('eval_throughput', config + ['--batches=1', '--warmup=1', '--repeats=1'] + common),
            ('data_throughput', ['--smoke']),
            ('checkpoint_overhead', config + ['--steps=1', '--warmup=1', '--saves=1'] + common),
        ]
    config = [f'--config={FLAGS.config}']
    batch = [f'--global_batch={FLAGS.global_batch}'] if FLAGS.global_batch else []
    return [
        ('step_time', config + batch + [f'--steps={FLAGS.steps}', '--project', f'--slice={FLAGS.slice}',
                                        f'--project_batch={FLAGS.project_batch}', f'--mfu={FLAGS.mfu}'] + common),
        ('projection', projection),
        ('eval_throughput', config + common),
        ('data_throughput', []),
        ('checkpoint_overhead', config + batch + common),
    ]


def run_one(name, argv, log, env):
    """Runs benchmarks/NAME.py; its stdout is shown and returned, its stderr appended to `log`."""
    print(f'\n=== {name}: {" ".join(argv)}', flush=True)
    log.write(f'\n=== {name}: {" ".join(argv)}\n')
    log.flush()
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, os.path.join(HERE, f'{name}.py'), *argv], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=log, text=True)
    lines = []
    for line in process.stdout:
        print(line, end='', flush=True)
        lines.append(line)
    return process.wait(), time.perf_counter() - start, ''.join(lines)


def measured_result(stdout):
    """The step time's result file when it holds a measured MFU (not on a CPU), else None."""
    match = re.search(r'^result: (.+\.json)$', stdout, re.M)
    if not match:
        return None
    with open(match.group(1)) as f:
        return match.group(1) if json.load(f)['results'].get('mfu') is not None else None


def main(argv):
    del argv
    out = os.path.abspath(FLAGS.out or RESULTS_DIR)
    os.makedirs(out, exist_ok=True)
    unknown = sorted(set(FLAGS.only) - set(NAMES))
    if unknown:
        sys.exit(f'error: --only {",".join(unknown)}: not a benchmark; choose from {", ".join(NAMES)}')
    env = dict(os.environ)
    if FLAGS.smoke:
        env.setdefault('CPU_NUM_DEVICES', '8')   # used only when XLA runs on the CPU
    date = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d')
    summary, measured = [], None
    with open(os.path.join(out, f'suite_{date}.log'), 'a') as log:
        for name, args in plan(out):
            if FLAGS.only and name not in FLAGS.only:
                continue
            if name == 'projection' and measured:
                args = args + [f'--measured={measured}']
            rc, seconds, stdout = run_one(name, args, log, env)
            if name == 'data_throughput' and rc == 0:
                path = os.path.join(out, f'data_throughput_{date}.txt')
                with open(path, 'w') as f:
                    f.write(stdout)
                stdout += f'result: {path}\n'
            if name == 'step_time' and rc == 0:
                measured = measured_result(stdout)
            files = re.findall(r'^result: (.+)$', stdout, re.M)
            summary.append((name, rc, seconds, files[-1] if files else '-'))
    print(f'\n=== suite{" (smoke: script health, not timing)" if FLAGS.smoke else ""}, results in {out}')
    for name, rc, seconds, path in summary:
        status = 'ok' if rc == 0 else f'FAILED (exit {rc}; stderr in suite_{date}.log)'
        print(f'{name:<20} {status:<10} {seconds:7.1f} s  {path}')
    if any(rc != 0 for _, rc, _, _ in summary):
        sys.exit(1)


if __name__ == '__main__':
    app.run(main)
