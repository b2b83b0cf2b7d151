"""Solve puzzles of the run's task (Sudoku, mazes, ARC) with a trained TRM or URM, on the CPU.

  python -m trm_spmd.solve --checkpoint=runs/quickstart --puzzle=4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4......
  python -m trm_spmd.solve --checkpoint=runs/quickstart --file=puzzles.txt
  python -m trm_spmd.solve --checkpoint=runs/maze_cpu --puzzle='#S  ...'   (a maze: N*N characters)
  python -m trm_spmd.solve --checkpoint=runs/arc1 --task_json=00576224.json   (ARC: two attempts a test input)
  python -m trm_spmd.solve --checkpoint=runs/posttrained --task_json=my_tasks/ --submission=submission.json
      (ARC: every task of a folder, and their attempts in the ARC Prize's submission format)
  python -m trm_spmd.solve --checkpoint=runs/multi_task --task=maze --file=mazes.txt   (one task of a multi-task run)

--checkpoint is a run directory (its newest checkpoint; EMA weights when the run kept
them) or one checkpoint step directory. Solving reads the run and changes nothing in it: a
live run may go on training beside it. The model runs all halt_max_steps ACT steps, as the
evaluation does, or --act_steps of them (more than training used: test-time recursion);
with --stop_when_confident each puzzle stops at the first step whose halting logit says
"done" (q_halt > 0), as in training.

Every puzzle is checked before the model sees it (the task's check_input): one that has no
answer (clashing givens, a goal the start cannot reach) is an error naming why; with
--file its line is reported and the others are still solved. --file holds one puzzle a
line, or is a CSV in the official source,question,answer,rating layout.
"""

import json
import os
import sys

import numpy as np
import torch
from absl import flags, logging
from ml_collections import ConfigDict

from trm_spmd import errors, fs, tasks
from trm_spmd.checkpoint import CheckpointReader
from trm_spmd.data import mixture
from trm_spmd.data.source import csv_rows
from trm_spmd.errors import UserError
from trm_spmd.model import families
from trm_spmd.model.act import act_step, initial_carry
from trm_spmd.model.config import TRMConfig
from trm_spmd.model.losses import predictions
from trm_spmd.runtime.native import fast_dtype
from trm_spmd.tasks.arc import attempts, grid as arc_grid, new_tasks
from trm_spmd.train.data import dataset_dir, member_configs

FLAGS = flags.FLAGS
flags.DEFINE_string('checkpoint', None, 'run directory or checkpoint step directory')
flags.DEFINE_string('puzzle', None, 'one puzzle, row by row: Sudoku 81 characters ("." or "0" blank); '
                    'a maze N*N characters of "#", " ", "S", "G"')
flags.DEFINE_string('file', None, 'a file of puzzles, one per line')
flags.DEFINE_bool('stop_when_confident', False, 'stop each puzzle at its first q_halt > 0')
flags.DEFINE_integer('act_steps', 0, 'ACT steps per puzzle (0: the halt_max_steps the model was trained with)')
flags.DEFINE_string('task_json', None, 'ARC: a task JSON file ({"train": [...], "test": [...]}) or an ARC Prize '
                    'challenges file (with --task_id)')
flags.DEFINE_string('submission', None, 'ARC: write the attempts at every task solved to this file, in the ARC '
                    'Prize\'s submission format')
flags.DEFINE_string('task_id', None, 'ARC: the task to solve in a challenges file (default: the file name)')
flags.DEFINE_string('task', None, 'a multi-task run (data.mixture): the task of the puzzles (required there)')


def _run_dir_and_checkpoints(path):
    """(run dir holding config.json, directory of checkpoint steps, step or None)."""
    path = path.rstrip('/')
    if fs.exists(fs.join(path, 'config.json')):
        return path, fs.join(path, 'checkpoints'), None
    parent, step = os.path.split(path)
    run = os.path.dirname(parent)
    if step.isdigit() and fs.exists(fs.join(run, 'config.json')):
        return run, parent, int(step)
    raise UserError(f'{path} is neither a run directory (with config.json) nor a checkpoint step '
                    f'directory inside one')


def load_run(path):
    """(the run's config, its checkpoint state) of a run or checkpoint step directory, read
    without changing a byte of it (a live run's too): a run directory gives its newest
    checkpoint that passes every check, a damaged one met on the way is reported and skipped."""
    run, checkpoints, step = _run_dir_and_checkpoints(path)
    config = ConfigDict(json.loads(fs.read_text(fs.join(run, 'config.json'))))
    if step is not None:
        with CheckpointReader(run, directories=[checkpoints]) as reader:
            try:
                state, _ = reader.restore(step)
            except FileNotFoundError as e:
                raise UserError(f'{e}: pass a step directory that holds a complete checkpoint') from None
        return config, state
    with CheckpointReader(run) as reader:
        found = reader.restore_newest_good(report=lambda line: print(f'warning: {line}', file=sys.stderr))
    if found is None:
        raise UserError(f'no checkpoint in {checkpoints} yet: train first (a run writes its first at '
                        f'checkpoint.every_steps), or pass a step directory')
    return config, found.tree


def build_model(config, state, seq_len):
    """The trained model (EMA weights when the run kept them) for puzzles of seq_len tokens."""
    shapes = {k: np.asarray(v).shape for k, v in state['model'].items()}
    cfg = TRMConfig.from_config(config, vocab_size=shapes['embed_tokens.weight'][0], seq_len=seq_len,
                                num_puzzle_identifiers=shapes['puzzle_emb'][0] if 'puzzle_emb' in shapes else 1,
                                ).with_auto_dtype(fast_dtype(torch.device('cpu')))
    model = families.build_model(cfg)
    weights = {k: torch.from_numpy(np.asarray(v)) for k, v in state['model'].items()}
    weights.update({k: torch.from_numpy(np.asarray(v)) for k, v in state.get('ema', {}).items()})
    expected = model.state_dict()
    for k, v in weights.items():
        if k in expected and tuple(v.shape) != tuple(expected[k].shape):
            raise UserError(f'the puzzles have {seq_len} cells but the model was trained on other sizes '
                            f'({k} is {tuple(v.shape)}, not {tuple(expected[k].shape)}): give puzzles of its size')
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in weights.items()})
    model.eval()
    return model


def task_of(config, name=None, state=None):
    """(the Task of the puzzles, and in a multi-task run the mixture.TokenMap of that task `name`
    (which such a run needs), else None). The maps follow from the config, but for the identifiers
    of an ARC set, which only its dataset knows: the trained table's rows (`state`) tell them,
    since every other task has its blank identifier only."""
    names = tuple(config.get('data', {}).get('mixture', ()) or ()) or (config.get('data', {}).get('task', 'sudoku'),)
    if not name and len(names) > 1:
        raise UserError(f'this run trained on several tasks ({", ".join(names)}): say which the puzzles are with '
                        f'--task={" or --task=".join(names)}')
    name = name or names[0]
    if name not in names:
        raise UserError(f'--task={name}: the run trained on {", ".join(names)}; pass one of them')
    if len(names) == 1:
        return tasks.get(name), None
    sizes = [dict(tasks.get(n).sizes(config.data), num_puzzle_identifiers=1) for n in names]
    if state is not None and 'puzzle_emb' in state['model'] and 'arc' in names:
        rows = np.asarray(state['model']['puzzle_emb']).shape[0]
        sizes[names.index('arc')]['num_puzzle_identifiers'] = rows - (len(names) - 1)
    return tasks.get(name), next(m for m in mixture.token_maps(names, sizes) if m.name == name)


def solve_task(model, inputs, token_map, act_steps, identifiers=None):
    """solve() of one task's puzzles; in a multi-task run through its token space and back."""
    if token_map is None:
        return solve(model, inputs, FLAGS.stop_when_confident, act_steps, identifiers)
    inputs = np.asarray(inputs)
    if inputs.shape[1] != token_map.seq_len:
        raise UserError(f'the puzzles have {inputs.shape[1]} cells but the run trained {token_map.name} on '
                        f'{token_map.seq_len}: give puzzles of its size')
    ids = np.zeros(len(inputs), np.int32) if identifiers is None else identifiers
    moved = token_map.to_mixture({'inputs': inputs, 'labels': np.zeros_like(inputs), 'puzzle_identifiers': ids})
    results = solve(model, moved['inputs'], FLAGS.stop_when_confident, act_steps, moved['puzzle_identifiers'])
    return [(token_map.answers(answer[None])[0], steps, confidence) for answer, steps, confidence in results]


@torch.no_grad()
def solve(model, inputs, stop_when_confident=False, act_steps=0, identifiers=None):
    """inputs int [N, L] tokens (of puzzles `identifiers` [N], default the blank one) -> per
    puzzle (predicted tokens [L], ACT steps used, halt probability)."""
    max_steps = act_steps or model.config.halt_max_steps
    tokens = torch.from_numpy(np.asarray(inputs, np.int32))
    ids = np.zeros(len(tokens), np.int32) if identifiers is None else np.asarray(identifiers, np.int32)
    batch = {'inputs': tokens, 'labels': torch.zeros_like(tokens), 'puzzle_identifiers': torch.from_numpy(ids)}
    carry = initial_carry(model, len(tokens), 'cpu')
    answer = torch.zeros_like(tokens)
    used = torch.zeros(len(tokens), dtype=torch.int32)
    confidence = torch.zeros(len(tokens))
    done = torch.zeros(len(tokens), dtype=torch.bool)
    for step in range(1, max_steps + 1):
        carry, outputs = act_step(model, carry, batch, training=False, max_steps=max_steps)
        q_halt = outputs['q_halt_logits']
        confident = (q_halt > 0) if stop_when_confident else torch.zeros_like(done)
        stop = ~done & (confident | (step == max_steps))
        answer[stop] = predictions(outputs['logits'])[stop].to(answer.dtype)
        used[stop] = step
        confidence[stop] = torch.sigmoid(q_halt[stop])
        done |= stop
    answer = answer.numpy()
    return [(answer[i], int(used[i]), float(confidence[i])) for i in range(len(tokens))]


def report(task, inputs, prediction, steps, confidence, max_steps):
    _, judgement = task.verdict(inputs, prediction)
    return (f'{task.render(inputs, prediction)}\n'
            f'ACT steps: {steps} of {max_steps}   halting confidence: {confidence:.1%}   solution: {judgement}')


def _puzzle_texts():
    """[(where, text)] from --puzzle or --file (one puzzle a line, or an official CSV)."""
    if bool(FLAGS.puzzle) == bool(FLAGS.file):
        raise UserError('pass exactly one of --puzzle=PUZZLE or --file=PATH')
    if FLAGS.puzzle:
        return [('--puzzle', FLAGS.puzzle)]
    if not os.path.exists(FLAGS.file):
        raise UserError(f'{FLAGS.file}: file not found')
    with open(FLAGS.file, encoding='utf-8', errors='replace') as f:
        lines = f.read().splitlines()
    first = next((line for line in lines if line.strip()), '')
    if first.replace(' ', '').startswith('source,question') or first.startswith('question'):
        errors_found = {}
        texts = [(f'{FLAGS.file}:{row[0]}', row[1]) for row in csv_rows(FLAGS.file, lines, errors_found)]
        if errors_found:
            raise UserError(errors_found[min(errors_found)])
    else:
        # Lines are not stripped: a maze's open cells are spaces (each task's parse knows its own).
        texts = [(f'{FLAGS.file}:{n}', line) for n, line in enumerate(lines, 1) if line.strip()]
    if not texts:
        raise UserError(f'{FLAGS.file}: no puzzles in the file')
    return texts


def read_puzzles(task):
    """(token rows [L] of the good puzzles, 'WHERE: reason' of each bad one)."""
    good, bad = [], []
    for place, text in _puzzle_texts():
        try:
            tokens = task.parse(text)
        except ValueError as e:
            bad.append(f'{place}: puzzle {e}')
            continue
        problem, warning = task.check_input(tokens)
        if problem:
            bad.append(f'{place}: {problem}')
            continue
        if warning:
            print(f'warning: {place}: {warning}', file=sys.stderr)
        good.append(tokens)
    if good and len({len(t) for t in good}) > 1:
        raise UserError(f'{FLAGS.file}: the puzzles have different sizes ({sorted({len(t) for t in good})} cells): '
                        f'solve one size at a time')
    return good, bad


def solve_arc(config, state, max_steps, token_map):
    """Two attempts at each test input of --task_json, by every augmented copy's vote."""
    if not FLAGS.task_json:
        raise UserError('an ARC run solves a task: pass --task_json=PATH (a task file, or an ARC Prize '
                        'challenges file with --task_id=ID)')
    if os.path.isdir(FLAGS.task_json):
        if FLAGS.task_id:
            raise UserError(f'--task_id picks a task of a challenges file; {FLAGS.task_json} is a folder: every task '
                            f'in it is solved')
        found = new_tasks.read_tasks(FLAGS.task_json)
        tasks_to_solve = [(task_id, attempts.check_task(task_id, task, FLAGS.task_json))
                          for task_id, task in found.items()]
    else:
        tasks_to_solve = [attempts.read_task(FLAGS.task_json, FLAGS.task_id or '')]
    if token_map is not None:   # the ARC dataset of a multi-task run
        config = next(c for c in member_configs(config) if c.data.task == token_map.name)
    identifiers = fs.join(dataset_dir(config), 'identifiers.json')
    if not fs.exists(identifiers):
        raise UserError(f'{identifiers} not found: solving needs the identifiers of the dataset the run trained on')
    names = json.loads(fs.read_text(identifiers))
    model = build_model(config, state, token_map.mixture_seq_len if token_map else arc_grid.GRID * arc_grid.GRID)

    def answer(inputs, ids):
        results = solve_task(model, inputs, token_map, max_steps, ids)
        return np.stack([r[0] for r in results]), np.array([r[2] for r in results])

    submission, known, right, unseen = {}, 0, 0, []
    for task_id, task in tasks_to_solve:
        copies = len(attempts.copies_of(task_id, names))
        if not copies:
            unseen.append(task_id)
        results = attempts.attempt(answer, task_id, task, names)
        if len(tasks_to_solve) > 1:
            print(f'task {task_id}')
        print(attempts.report(task, results, max(copies, 1)))
        submission[task_id] = attempts.submission_entry(results)
        k, r = attempts.right_attempts(task, results)
        known, right = known + k, right + r
    if len(unseen) == 1:
        print(f'warning: task {unseen[0]} is not in the data the run trained on: it has no puzzle embedding and is '
              f'answered with the blank one, which TRM does not generalise from (post-train on it: '
              f'configs/arc.py:posttrain)', file=sys.stderr)
    elif unseen:
        print(f'warning: {len(unseen)} tasks (e.g. {unseen[0]}) are not in the data the run trained on: they have '
              f'no puzzle embedding and are answered with the blank one, which TRM does not generalise from '
              f'(post-train on them: configs/arc.py:posttrain)', file=sys.stderr)
    if len(tasks_to_solve) > 1 and known:
        print(f'{right} of {known} test inputs with solutions answered right by attempt 1 or 2')
    if FLAGS.submission:
        fs.write_text(FLAGS.submission, json.dumps(submission))
        print(f'submission of {len(submission)} task{"s" * (len(submission) != 1)}: {FLAGS.submission}')


def main(argv):
    del argv
    if not FLAGS.checkpoint:
        raise UserError('--checkpoint=RUN_DIR is required')
    if FLAGS.act_steps < 0:
        raise UserError(f'--act_steps={FLAGS.act_steps} must be >= 1 (or 0: as trained)')
    config, state = load_run(FLAGS.checkpoint)
    task, token_map = task_of(config, FLAGS.task, state)
    if task.name == 'arc':
        return solve_arc(config, state, FLAGS.act_steps or config.act.halt_max_steps, token_map)
    puzzles, bad = read_puzzles(task)
    if not puzzles:
        raise UserError(bad[0] if len(bad) == 1 else f'no puzzle can be solved: {"; ".join(bad[:3])}')
    for message in bad:
        print(f'error: {message}', file=sys.stderr)
    model = build_model(config, state, token_map.mixture_seq_len if token_map else len(puzzles[0]))
    max_steps = FLAGS.act_steps or model.config.halt_max_steps
    results = solve_task(model, np.stack(puzzles), token_map, max_steps)
    correct = 0
    for inputs, (prediction, steps, confidence) in zip(puzzles, results):
        print(report(task, inputs, prediction, steps, confidence, max_steps), end='\n\n')
        correct += task.verdict(inputs, prediction)[0]
    if len(puzzles) > 1:
        print(f'{correct} of {len(puzzles)} puzzles solved ({correct / len(puzzles):.1%})')
    if bad:
        sys.exit(2)


def run():
    logging.set_verbosity(logging.WARNING)   # orbax reports every file it reads at INFO
    errors.run_main(main)


if __name__ == '__main__':
    run()
    sys.exit(0)
