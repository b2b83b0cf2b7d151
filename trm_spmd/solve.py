"""Solve Sudoku puzzles with a trained TRM, on the CPU.

  python -m trm_spmd.solve --checkpoint=runs/quickstart --puzzle=4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4......
  python -m trm_spmd.solve --checkpoint=runs/quickstart --file=puzzles.txt

--checkpoint is a run directory (its newest checkpoint; EMA weights when the run kept
them) or one checkpoint step directory. The model runs all halt_max_steps ACT steps, as the
evaluation does, or --act_steps of them (more than training used: test-time recursion);
with --stop_when_confident each puzzle stops at the first step whose halting logit says
"done" (q_halt > 0), as in training.
"""

import json
import os
import sys

import numpy as np
import torch
from absl import flags, logging
from ml_collections import ConfigDict

from trm_spmd import errors, fs
from trm_spmd.checkpoint import Checkpointer
from trm_spmd.data.sudoku import parse_grid, to_tokens, unit_conflict
from trm_spmd.errors import UserError
from trm_spmd.model.act import act_step, initial_carry
from trm_spmd.model.config import TRMConfig
from trm_spmd.model.losses import predictions
from trm_spmd.model.trm import TRM
from trm_spmd.runtime.native import fast_dtype

FLAGS = flags.FLAGS
flags.DEFINE_string('checkpoint', None, 'run directory or checkpoint step directory')
flags.DEFINE_string('puzzle', None, '81 characters, row by row, "." or "0" for a blank')
flags.DEFINE_string('file', None, 'a file of puzzles, one per line')
flags.DEFINE_bool('stop_when_confident', False, 'stop each puzzle at its first q_halt > 0')
flags.DEFINE_integer('act_steps', 0, 'ACT steps per puzzle (0: the halt_max_steps the model was trained with)')


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


def load_model(path):
    run, checkpoints, step = _run_dir_and_checkpoints(path)
    config = ConfigDict(json.loads(fs.read_text(fs.join(run, 'config.json'))))
    checkpointer = Checkpointer(run, keep=1, keep_best=0, async_save=False, is_main_host=False)
    try:
        state, _ = checkpointer.restore(step, directory=checkpoints)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f'no checkpoint in {checkpoints} ({e}); train first, or pass a step directory') from None
    finally:
        checkpointer.close()
    shapes = {k: np.asarray(v).shape for k, v in state['model'].items()}
    cfg = TRMConfig.from_config(config, vocab_size=shapes['embed_tokens.weight'][0],
                                num_puzzle_identifiers=shapes['puzzle_emb'][0] if 'puzzle_emb' in shapes else 1,
                                ).with_auto_dtype(fast_dtype(torch.device('cpu')))
    model = TRM(cfg)
    weights = {k: torch.from_numpy(np.asarray(v)) for k, v in state['model'].items()}
    weights.update({k: torch.from_numpy(np.asarray(v)) for k, v in state.get('ema', {}).items()})
    model.load_state_dict({k: v.to(model.state_dict()[k].dtype) for k, v in weights.items()})
    model.eval()
    return model


@torch.no_grad()
def solve(model, puzzles, stop_when_confident=False, act_steps=0):
    """puzzles uint8 [N, 81] digits -> per puzzle (digits [81], ACT steps used, halt probability)."""
    max_steps = act_steps or model.config.halt_max_steps
    tokens = torch.from_numpy(to_tokens(puzzles).astype(np.int32))
    batch = {'inputs': tokens, 'labels': torch.zeros_like(tokens),
             'puzzle_identifiers': torch.zeros(len(puzzles), dtype=torch.int32)}
    carry = initial_carry(model, len(puzzles), 'cpu')
    answer = torch.zeros_like(tokens)
    used = torch.zeros(len(puzzles), dtype=torch.int32)
    confidence = torch.zeros(len(puzzles))
    done = torch.zeros(len(puzzles), dtype=torch.bool)
    for step in range(1, max_steps + 1):
        carry, outputs = act_step(model, carry, batch, training=False, max_steps=max_steps)
        q_halt = outputs['q_halt_logits']
        confident = (q_halt > 0) if stop_when_confident else torch.zeros_like(done)
        stop = ~done & (confident | (step == max_steps))
        answer[stop] = predictions(outputs['logits'])[stop].to(answer.dtype)
        used[stop] = step
        confidence[stop] = torch.sigmoid(q_halt[stop])
        done |= stop
    digits = np.clip(answer.numpy() - 1, 0, 9).astype(np.uint8)
    return [(digits[i], int(used[i]), float(confidence[i])) for i in range(len(puzzles))]


def grid_text(digits):
    rows = []
    for r in range(9):
        cells = ['.' if d == 0 else str(d) for d in digits[r * 9:(r + 1) * 9]]
        rows.append(' '.join(cells[0:3]) + ' | ' + ' '.join(cells[3:6]) + ' | ' + ' '.join(cells[6:9]))
        if r in (2, 5):
            rows.append('------+-------+------')
    return rows


def verdict(puzzle, digits):
    if (digits == 0).any():
        return 'not a complete grid'
    given = puzzle > 0
    if (digits[given] != puzzle[given]).any():
        return 'invalid: changes a given digit'
    conflict = unit_conflict(digits)
    return f'invalid: {conflict}' if conflict else 'valid'


def report(puzzle, digits, steps, confidence, max_steps):
    left, right = grid_text(puzzle), grid_text(digits)
    lines = [f'{"puzzle":<23}   {"model":<23}']
    lines += [f'{a:<23}   {b}' for a, b in zip(left, right)]
    lines.append(f'ACT steps: {steps} of {max_steps}   halting confidence: {confidence:.1%}   '
                 f'solution: {verdict(puzzle, digits)}')
    return '\n'.join(lines)


def read_puzzles():
    if bool(FLAGS.puzzle) == bool(FLAGS.file):
        raise UserError('pass exactly one of --puzzle=81CHARS or --file=PATH')
    texts = [FLAGS.puzzle] if FLAGS.puzzle else None
    if texts is None:
        if not os.path.exists(FLAGS.file):
            raise UserError(f'{FLAGS.file}: file not found')
        with open(FLAGS.file) as f:
            texts = [line for line in f.read().splitlines() if line.strip()]
        if not texts:
            raise UserError(f'{FLAGS.file}: no puzzles in the file')
    puzzles = []
    for number, text in enumerate(texts, 1):
        try:
            puzzles.append(parse_grid(text))
        except ValueError as e:
            where = f'{FLAGS.file}:{number}' if FLAGS.file else '--puzzle'
            raise UserError(f'{where}: puzzle {e}') from None
    return np.stack(puzzles)


def main(argv):
    del argv
    if not FLAGS.checkpoint:
        raise UserError('--checkpoint=RUN_DIR is required')
    if FLAGS.act_steps < 0:
        raise UserError(f'--act_steps={FLAGS.act_steps} must be >= 1 (or 0: as trained)')
    puzzles = read_puzzles()
    model = load_model(FLAGS.checkpoint)
    max_steps = FLAGS.act_steps or model.config.halt_max_steps
    results = solve(model, puzzles, FLAGS.stop_when_confident, max_steps)
    valid = 0
    for puzzle, (digits, steps, confidence) in zip(puzzles, results):
        print(report(puzzle, digits, steps, confidence, max_steps), end='\n\n')
        valid += verdict(puzzle, digits) == 'valid'
    if len(puzzles) > 1:
        print(f'{valid} of {len(puzzles)} puzzles solved ({valid / len(puzzles):.1%})')


def run():
    logging.set_verbosity(logging.WARNING)   # orbax reports every file it reads at INFO
    errors.run_main(main)


if __name__ == '__main__':
    run()
    sys.exit(0)
