"""Data pipeline speed on this machine: training loader, solver, generator.

    python benchmarks/data_throughput.py            # all three, baseline-shaped dataset
    python benchmarks/data_throughput.py --smoke    # a few seconds, small generated dataset
    python benchmarks/data_throughput.py --data=DIR --setups=768/1,6144/8 --sections=loader

Loader: examples per second per host of TrainBatches, plain and with on-the-fly
augmentation, called directly and through the Prefetcher (the consumer does no work, so
this is the producer's ceiling; numpy releases the GIL in its copies, so the prefetched
rate can use a second core). Without --data it builds, in a temporary directory, the
baseline's shape from ../shared/sudoku_data (1000 puzzles x 1001 variants), or a small
generated dataset when that folder is absent or with --smoke.
Solver: every puzzle of forum_hardest_1106 (375) solved with a uniqueness check, against
the known solutions. Generator: unique-solution puzzles per minute at 40-50 blanks.
Everything else runs in one Python thread.
"""

import os
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

from trm_spmd.data import Prefetcher, TrainBatches, load_split
from trm_spmd.tasks.sudoku import TASK as SUDOKU, generate, solver
from trm_spmd.tasks.sudoku import grid as sudoku
from trm_spmd.tasks.sudoku.build import build_from_files, build_generated

SHARED_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '..', 'shared',
                           'sudoku_data')

flags.DEFINE_bool('smoke', False, 'tiny sizes and short timings: checks the script runs')
flags.DEFINE_string('data', '', 'existing dataset directory to read (default: build one)')
flags.DEFINE_list('setups', ['768/1', '768/8', '6144/8'],
                  'GLOBAL_BATCH/HOSTS to time; each host makes GLOBAL_BATCH/HOSTS rows of every batch')
flags.DEFINE_list('sections', ['loader', 'solver', 'generator'], 'what to measure')
flags.DEFINE_float('seconds', 3.0, 'timing window per measurement')
FLAGS = flags.FLAGS


def _rate(next_batch, batch_size, seconds):
    next_batch()                                      # warm: page cache, permutation
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        next_batch()
        count += 1
    return count * batch_size / (time.perf_counter() - start)


def _dataset(workdir, smoke):
    if FLAGS.data:
        return FLAGS.data
    out = os.path.join(workdir, 'data')
    if smoke or not os.path.isdir(SHARED_DATA):
        build_generated(out, 100 if smoke else 1000, 50, (30, 45), seed=0, num_aug=10 if smoke else 100)
    else:
        name = os.path.join(SHARED_DATA, 'forum_hardest_1905_11plus')
        build_from_files(out, f'{name}.txt', f'{name}.solutions.txt', subsample=1000, num_aug=1000)
    return out


def loader(workdir, smoke, seconds):
    split = load_split(_dataset(workdir, smoke), 'train')
    print(f'\nTrainBatches on {split.path}: {split.num_examples} examples, {split.num_groups} groups')
    print(f'{"global batch":>13} {"hosts":>6} {"augment":>8} {"prefetch":>9} {"examples/s per host":>20}')
    for setup in FLAGS.setups:
        global_batch, hosts = (int(x) for x in setup.split('/'))
        rows = global_batch // hosts
        for augment in (False, True):
            batch_at = TrainBatches(split, global_batch, seed=0, process_index=hosts - 1,
                                    process_count=hosts, augment=SUDOKU.augmentation if augment else None).batch_at
            steps = iter(range(1 << 62))
            direct = _rate(lambda: batch_at(next(steps)), rows, seconds)
            with Prefetcher(batch_at, depth=2) as batches:
                prefetched = _rate(lambda: next(batches), rows, seconds)
            for mode, rate in (('no', direct), ('depth 2', prefetched)):
                print(f'{global_batch:>13} {hosts:>6} {"yes" if augment else "no":>8} {mode:>9} {rate:>20,.0f}')


def solver_speed(smoke):
    if not os.path.isdir(SHARED_DATA):
        print(f'\nsolver: skipped, {SHARED_DATA} is absent')
        return
    name = os.path.join(SHARED_DATA, 'forum_hardest_1106')
    puzzles = open(f'{name}.txt').read().split()
    solutions = open(f'{name}.solutions.txt').read().split()
    if smoke:
        puzzles, solutions = puzzles[:10], solutions[:10]
    times = []
    for puzzle, expected in zip(puzzles, solutions):
        start = time.perf_counter()
        found = solver.solutions(sudoku.parse_grid(puzzle), limit=2)
        times.append(time.perf_counter() - start)
        if len(found) != 1 or sudoku.format_grid(found[0]) != expected:
            sys.exit(f'solver: wrong answer for {puzzle}')
    times = np.array(times)
    print(f'\nsolver, forum_hardest_1106 ({len(times)} puzzles, uniqueness checked, all correct): '
          f'total {times.sum():.1f} s, mean {times.mean() * 1e3:.1f} ms, '
          f'median {np.median(times) * 1e3:.1f} ms, max {times.max() * 1e3:.0f} ms')


def generator_speed(seconds):
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        generate.generate(np.random.default_rng([0, count]), (40, 50))
        count += 1
    print(f'\ngenerator, 40-50 blanks: {count / (time.perf_counter() - start) * 60:,.0f} '
          f'unique-solution puzzles per minute ({count} in {seconds:.0f} s)')


def main(argv):
    del argv
    seconds = 0.3 if FLAGS.smoke else FLAGS.seconds
    with tempfile.TemporaryDirectory() as workdir:
        if 'loader' in FLAGS.sections:
            loader(workdir, FLAGS.smoke, seconds)
    if 'solver' in FLAGS.sections:
        solver_speed(FLAGS.smoke)
    if 'generator' in FLAGS.sections:
        generator_speed(seconds * 3)


if __name__ == '__main__':
    app.run(main)
