"""A dataset of new ARC tasks, for post-training a trained run on them (test-time adaptation).

The tasks come from a folder of task JSONs (one task a file, {"train": [...], "test": [...]},
named after the file) or ARC Prize challenges files ({task id: task}, the folder's
*_solutions.json skipped), or from one such file. Their demonstration pairs, with the usual
augmented copies, are the training split; their test inputs are the test split, written
without outputs: a test output a file holds is never read into the dataset, so a run cannot
train or be scored on it by accident (solutions, when known, are handed to the evaluation
apart: eval.arc_solutions). test_puzzles.json holds each task with its test inputs only.

The tasks the pretrained run trained on (its dataset's identifiers.json) are counted
(trained_tasks_line): their trained rows are replaced by fresh ones in post-training.
"""

import json
import os

from trm_spmd.data.errors import DataError, PuzzleError
from trm_spmd.tasks.arc import build, grid

TEST_SET = 'new'
SOLUTIONS_SUFFIX = '_solutions.json'


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f'{path}: not readable JSON ({e}): expected an ARC task or a challenges file') from None


def _tasks_of_file(path):
    """{task id: task} of one file: a task (named after the file) or a challenges file."""
    data = _load(path)
    if isinstance(data, dict) and ('train' in data or 'test' in data):
        return {os.path.basename(path).removesuffix('.json'): data}
    if not isinstance(data, dict) or not data:
        raise DataError(f'{path}: is neither an ARC task ({{"train": [...], "test": [...]}}) nor a challenges file '
                        f'of tasks by id')
    return data


def read_tasks(path):
    """{task id: task JSON} of a folder (every *.json but *_solutions.json, sorted by name) or of
    one file. A task id found twice is refused."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path)
                       if n.endswith('.json') and not n.endswith(SOLUTIONS_SUFFIX))
        if not files:
            raise DataError(f'{path}: holds no task JSON files (*.json)')
    elif os.path.isfile(path):
        files = [path]
    else:
        raise DataError(f'--task_dir={path}: no such folder or file')
    tasks, where = {}, {}
    for file in files:
        for task_id, task in _tasks_of_file(file).items():
            if task_id in tasks:
                raise DataError(f'task {task_id} is in both {where[task_id]} and {file}: keep one')
            tasks[task_id], where[task_id] = task, file
    return tasks


def check_new_task(task_id, task, where):
    """The Puzzle of a new task: demonstrations with outputs, test inputs (outputs dropped; the
    test pairs' placeholder outputs are their inputs, never written: build(test_labels=False))."""
    label = f'{where}: task {task_id}'
    if not isinstance(task, dict):
        raise PuzzleError(f'{label}: is not an object with "train" and "test" pairs')
    parts, raw = {}, {}
    for part, sides in (('train', ('input', 'output')), ('test', ('input',))):
        pairs = task.get(part)
        if not isinstance(pairs, list) or not pairs:
            kind = 'demonstration' if part == 'train' else 'test'
            raise PuzzleError(f'{label}: has no {kind} pair ("{part}"); a new task needs at least one')
        parts[part], raw[part] = [], []
        for i, pair in enumerate(pairs, 1):
            name = f'{label} {part} pair {i}'
            if not isinstance(pair, dict) or any(side not in pair for side in sides):
                raise PuzzleError(f'{name}: is not an object with ' + ' and '.join(f'an "{s}" grid' for s in sides))
            grids = [grid.check_grid(pair[side], f'{name} {side}') for side in sides]
            parts[part].append((grids[0], grids[-1]))
            raw[part].append({side: pair[side] for side in sides})
    return build.Puzzle(task_id, parts, raw)


def build_new_tasks(output_dir, task_dir, num_aug=1000, seed=42, progress=True):
    """Writes the new-tasks dataset of the tasks at task_dir; returns a summary line."""
    build.check_args(output_dir, num_aug, 0)
    tasks = read_tasks(task_dir)
    puzzles = [check_new_task(task_id, task, task_dir) for task_id, task in tasks.items()]
    summary = build.build(output_dir, [build.Subset(TEST_SET, puzzles)], TEST_SET, num_aug, seed, progress,
                          test_labels=False)
    return summary + '; test outputs not written (the test split is what the model answers)'


def task_ids(dataset_dir):
    """The original task ids of a dataset's identifiers.json (augmented copies folded)."""
    with open(os.path.join(dataset_dir, 'identifiers.json')) as f:
        names = json.load(f)
    return {name.split(grid.SEPARATOR)[0] for name in names[1:]}


def trained_tasks_line(new_dataset, pretrained_dataset):
    """One `warning:` line when tasks of the new dataset were in the pretrained run's dataset
    (their rows are replaced by fresh ones), else None."""
    shared = sorted(task_ids(new_dataset) & task_ids(pretrained_dataset))
    if not shared:
        return None
    return (f'warning: {len(shared)} of the new tasks (e.g. {shared[0]}) were in the pretrained run\'s dataset '
            f'{pretrained_dataset}: their trained puzzle-embedding rows are replaced by fresh ones, and the '
            f'pretrained run may have seen their demonstrations (or, for its training tasks, their test outputs)')


def read_solutions(path):
    """{task id: [output grid per test pair]} of eval.arc_solutions: an ARC Prize solutions file
    ({task id: [grid, ...]}), a task JSON or challenges file whose test pairs have outputs, or a
    folder of such files (its *_solutions.json included). Tasks without every test output are
    left out (they stay unscored)."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith('.json'))
    elif os.path.isfile(path):
        files = [path]
    else:
        raise DataError(f'eval.arc_solutions={path}: no such folder or file')
    solutions = {}
    for file in files:
        data = _load(file)
        is_task = isinstance(data, dict) and ('train' in data or 'test' in data)
        if not is_task and isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
            solutions.update(data)   # an ARC Prize solutions file
            continue
        for task_id, task in _tasks_of_file(file).items():
            tests = task.get('test') if isinstance(task, dict) else None
            if isinstance(tests, list) and tests and all(isinstance(p, dict) and 'output' in p for p in tests):
                solutions[task_id] = [p['output'] for p in tests]
    return solutions
