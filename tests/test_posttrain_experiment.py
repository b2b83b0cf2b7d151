"""The CPU post-training experiment's tasks (benchmarks/posttrain_experiment.py): every task swaps
two colours that every grid shows, the sets are disjoint, and both builds read them."""

import json
import os

import numpy as np

from benchmarks.posttrain_experiment import write_tasks
from trm_spmd.tasks.arc import build, new_tasks


def _swapped_pair(task):
    """The two colours a task swaps, checked on every pair (demonstrations and test)."""
    pairs = task['train'] + task['test']
    changed = {tuple(sorted((int(i), int(o)))) for p in pairs
               for i, o in zip(np.ravel(p['input']), np.ravel(p['output'])) if i != o}
    assert len(changed) == 1, changed
    a, b = changed.pop()
    for p in pairs:
        grid, out = np.array(p['input']), np.array(p['output'])
        assert {a, b} <= set(grid.ravel().tolist())
        np.testing.assert_array_equal(out, np.where(grid == a, b, np.where(grid == b, a, grid)))
    return a, b


def test_tasks_are_colour_swaps_and_the_sets_are_disjoint(tmp_path):
    out = str(tmp_path / 'tasks')
    write_tasks(out, pretrain_tasks=6, pretrain_eval_tasks=2, new_tasks=3, seed=1)
    subsets = build.read_files(os.path.join(out, 'pretrain', 'swaps'), ['training', 'evaluation'], 'evaluation')
    pretrain_ids = {p.id for s in subsets for p in s.puzzles}
    assert len(pretrain_ids) == 8
    new = new_tasks.read_tasks(os.path.join(out, 'new'))
    assert len(new) == 3 and not pretrain_ids & set(new)
    solutions = new_tasks.read_solutions(os.path.join(out, 'new'))
    for task_id, task in new.items():
        _swapped_pair(task)
        assert solutions[task_id] == [p['output'] for p in task['test']]
    for s in subsets:
        for p in s.puzzles:
            _swapped_pair(p.raw)
    with open(os.path.join(out, 'pretrain', 'swaps_training_challenges.json')) as f:
        assert all('output' not in p for t in json.load(f).values() for p in t['test'])
