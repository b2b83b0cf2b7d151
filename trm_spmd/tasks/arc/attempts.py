"""Two attempts at one ARC task with a trained run, as the evaluation makes them.

A run learns one puzzle embedding per augmented copy of every task it trained on (the
evaluation tasks' demonstration pairs included), named in its dataset's identifiers.json.
Every copy of the task answers each test input, transformed as that copy is; the answers
are mapped back and vote (score.py). A task the run never saw has only the blank
embedding: it is answered once, with a warning that TRM does not generalise to it.
"""

import json

import numpy as np

from trm_spmd.data.errors import PuzzleError
from trm_spmd.errors import UserError
from trm_spmd.tasks.arc.grid import check_grid, forward, to_tokens
from trm_spmd.tasks.arc.score import ArcScorer, attempts_of


def read_task(path, task_id=''):
    """(task id, {'train': [...], 'test': [...]}) from a task JSON file, or from an ARC Prize
    challenges file holding many (then task_id picks one). Grids are checked."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise UserError(f'{path}: file not found') from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f'{path}: not JSON ({e})') from None
    if not isinstance(data, dict) or not data:
        raise UserError(f'{path}: an ARC task is a JSON object with "train" and "test" pairs')
    if 'train' in data or 'test' in data:   # one task
        name, task = task_id or path.rsplit('/', 1)[-1].removesuffix('.json'), data
    elif task_id in data:
        name, task = task_id, data[task_id]
    else:
        held = ', '.join(list(data)[:5]) + (f' and {len(data) - 5} more' if len(data) > 5 else '')
        if task_id:
            raise UserError(f'--task_id={task_id} is not in {path}; it holds: {held}')
        raise UserError(f'{path} holds {len(data)} task{"s" * (len(data) != 1)} ({held}): pick one with --task_id')
    return name, check_task(name, task, path)


def check_task(name, task, where):
    """The task (read from `where`), its grids checked; a UserError says what is wrong."""
    if not isinstance(task, dict) or not task.get('test'):
        raise UserError(f'{where}: task {name} has no "test" pairs, the inputs to answer: an ARC task is a JSON '
                        f'object with "train" and "test" pairs')
    try:
        for kind in ('train', 'test'):
            for i, pair in enumerate(task.get(kind, []), 1):
                for side in ('input', 'output') if kind == 'train' or 'output' in pair else ('input',):
                    check_grid(pair.get(side), f'task {name} {kind} pair {i} {side}')
    except PuzzleError as e:
        raise UserError(str(e)) from None
    return task


def copies_of(task_id, names):
    """Identifiers of every augmented copy of task_id in the run's identifiers.json."""
    return [i for i, name in enumerate(names) if name.split('|||')[0] == task_id]


def attempt(solve, task_id, task, names):
    """[(test input grid, [(answer grid, votes), ...] best first)] for every test input.
    solve(inputs [n, 900], identifiers [n]) -> (predictions [n, 900], halting probabilities [n])."""
    identifiers = copies_of(task_id, names) or [0]
    rows, ids = [], []
    for identifier in identifiers:
        transform = forward(names[identifier]) if identifier else (lambda grid: grid)
        for pair in task['test']:
            grid = transform(np.asarray(pair['input'], np.uint8))
            rows.append(to_tokens(grid, grid, 0, 0)[0])
            ids.append(identifier)
    predictions, confidences = solve(np.stack(rows), np.asarray(ids, np.int32))
    scorer = ArcScorer(list(names) if identifiers != [0] else [task_id], {})
    scorer.add_rows(np.asarray(ids), np.stack(rows), predictions, confidences)
    return [(np.asarray(pair['input'], np.uint8), scorer.ranked(task_id, pair['input'])) for pair in task['test']]


def _columns(grids, titles, gap=4):
    """Grids as digit rows next to each other under their titles."""
    blocks = [[''.join(str(int(c)) for c in row) for row in grid] if grid.size else ['(empty)'] for grid in grids]
    widths = [max([len(t)] + [len(line) for line in block]) for t, block in zip(titles, blocks)]
    height = max(len(block) for block in blocks)
    rows = [titles] + [[block[r] if r < len(block) else '' for block in blocks] for r in range(height)]
    return '\n'.join((' ' * gap).join(f'{cell:<{w}}' for cell, w in zip(row, widths)).rstrip() for row in rows)


def submission_entry(results):
    """The ARC Prize's entry of one task: [{'attempt_1': grid, 'attempt_2': grid}] per test input."""
    return [attempts_of([grid for grid, _ in ranked]) for _, ranked in results]


def right_attempts(task, results):
    """(test inputs whose solution the task holds, those answered right by attempt 1 or 2)."""
    known = right = 0
    for pair, (_, ranked) in zip(task['test'], results):
        if 'output' in pair:
            known += 1
            right += any(np.array_equal(grid, np.asarray(pair['output'], np.uint8)) for grid, _ in ranked[:2])
    return known, right


def report(task, results, copies):
    """The attempts of every test input as text, with the solution's verdict when the JSON has it."""
    out = []
    for i, (question, ranked) in enumerate(results):
        ranked = ranked[:2] or [(np.zeros((1, 1), np.uint8), 0)]
        ranked += ranked[:1] * (2 - len(ranked))
        out.append(f'test input {i + 1} ({question.shape[0]}x{question.shape[1]}): {copies} augmented '
                   f'cop{"y" if copies == 1 else "ies"} of the task voted')
        out.append(_columns([question] + [grid for grid, _ in ranked],
                            ['input'] + [f'attempt {k + 1} ({votes} votes)' for k, (_, votes) in enumerate(ranked)]))
        solution = task['test'][i].get('output')
        if solution is not None:
            right = [np.array_equal(grid, np.asarray(solution, np.uint8)) for grid, _ in ranked]
            out.append('solution: ' + ('attempt 1 is right' if right[0] else 'attempt 2 is right' if right[1]
                                       else 'neither attempt is right'))
        out.append('')
    return '\n'.join(out)
