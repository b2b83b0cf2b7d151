"""Tasks for the CPU post-training experiment: ARC tasks a small model can fit, some to pretrain
on and some new, so that post-training on the new ones can be scored against the un-adapted model.

  python benchmarks/posttrain_experiment.py --out=data/posttrain_experiment_tasks

Every task swaps two colours: each cell of colour a becomes b, of colour b becomes a, every
other cell stays. Which two colours is the task, and nothing in a test input says which: a
model can only answer from the task's puzzle-embedding row, learnt from its demonstrations.
Grids are 3x3 to 6x6 of colour 0 and three or four others, the two swapped ones always among
them, so every demonstration and test input shows the swap. The build's augmentation (a
symmetry and a permutation of colours 1-9) turns a task into other swaps, so the pretrained
network has met many pairs of colours; a new task is a new puzzle-embedding row to find.

Written under --out:
  pretrain/swaps_training_challenges.json and _solutions.json     (--pretrain_tasks tasks)
  pretrain/swaps_evaluation_challenges.json and _solutions.json   (--pretrain_eval_tasks tasks)
      the ARC Prize layout of `build arc --input_prefix=OUT/pretrain/swaps
      --subsets=training,evaluation --test_set=evaluation` (evaluation: the pretrained tasks'
      test inputs, a check of the pretraining itself)
  new/<task id>.json   (--new_tasks tasks, test outputs included for scoring:
      `build arc --task_dir` never reads them, `eval.arc_solutions` does)
Each task's id is unique across the three sets; a new task's pair of colours may be one that a
pretraining task swaps (there are 45 pairs): its grids and its row are still new.
"""

import json
import os
import sys

import numpy as np
from absl import app, flags

TRAIN_PAIRS = 3
MIN_SIDE, MAX_SIDE = 3, 6


def swap_task(rng):
    """One task: {'train': [...], 'test': [one pair]}, colours a and b swapped."""
    a, b = rng.choice(10, size=2, replace=False)
    pairs = []
    for _ in range(TRAIN_PAIRS + 1):
        rows, cols = rng.integers(MIN_SIDE, MAX_SIDE + 1, size=2)
        others = [c for c in range(1, 10) if c not in (a, b)]
        colours = np.array([0, a, b, *rng.choice(others, size=rng.integers(1, 3), replace=False)])
        grid = rng.choice(np.unique(colours), size=(rows, cols))
        cells = rng.permutation(rows * cols)[:2]   # a and b both present, whatever the draw
        grid.flat[cells[0]], grid.flat[cells[1]] = a, b
        out = np.where(grid == a, b, np.where(grid == b, a, grid))
        pairs.append({'input': grid.tolist(), 'output': out.tolist()})
    return {'train': pairs[:TRAIN_PAIRS], 'test': pairs[TRAIN_PAIRS:]}


def write_json(path, data):
    with open(path, 'w') as f:
        json.dump(data, f)


def write_tasks(out, pretrain_tasks, pretrain_eval_tasks, new_tasks, seed):
    """Writes the three sets under `out` (must not exist); returns a summary line."""
    if os.path.exists(out):
        raise SystemExit(f'error: {out} exists: give a new --out (its tasks are never overwritten)')
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(out, 'pretrain'))
    os.makedirs(os.path.join(out, 'new'))
    counter = iter(range(10 ** 6))
    for subset, count in (('training', pretrain_tasks), ('evaluation', pretrain_eval_tasks)):
        tasks = {f'swap{next(counter):04d}': swap_task(rng) for _ in range(count)}
        challenges = {i: {'train': t['train'], 'test': [{'input': p['input']} for p in t['test']]}
                      for i, t in tasks.items()}
        solutions = {i: [p['output'] for p in t['test']] for i, t in tasks.items()}
        write_json(os.path.join(out, 'pretrain', f'swaps_{subset}_challenges.json'), challenges)
        write_json(os.path.join(out, 'pretrain', f'swaps_{subset}_solutions.json'), solutions)
    for _ in range(new_tasks):
        task_id = f'swap{next(counter):04d}'
        write_json(os.path.join(out, 'new', f'{task_id}.json'), swap_task(rng))
    return (f'wrote {out}: {pretrain_tasks} + {pretrain_eval_tasks} pretraining tasks (pretrain/swaps_*), '
            f'{new_tasks} new tasks (new/*.json)')


def main(argv):
    del argv
    f = flags.FLAGS
    print(write_tasks(f.out, f.pretrain_tasks, f.pretrain_eval_tasks, f.new_tasks, f.seed))


if __name__ == '__main__':
    flags.DEFINE_string('out', None, 'folder to create for the tasks')
    flags.DEFINE_integer('pretrain_tasks', 48, 'pretraining tasks (all their pairs train)')
    flags.DEFINE_integer('pretrain_eval_tasks', 8, 'pretraining tasks whose test inputs score the pretrained run')
    flags.DEFINE_integer('new_tasks', 8, 'new tasks, for post-training')
    flags.DEFINE_integer('seed', 0, 'seed of every draw')
    flags.mark_flag_as_required('out')
    app.run(main, argv=sys.argv)
