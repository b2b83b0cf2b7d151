"""Post-training a trained run on new tasks (test-time adaptation): the run's network, a new
puzzle-embedding table for the new dataset.

A trained run's table has a row per augmented copy of the tasks it trained on; the new
tasks' copies are other puzzles, so their rows are new (init_puzzle_emb):
  mean    every row the mean of the trained rows (the public recipe, TrelisResearch's fork of
          TinyRecursiveModels, puzzle_emb_reinit_strategy "mean"): each new task starts from
          the average task, which the trained network already reads
  zero    every row zero, as a run from scratch starts
  random  each row drawn per dimension from a normal with the trained rows' mean and standard
          deviation (the fork's "normal"), seeded by the run's seed
Row 0, the blank identifier that padding rows carry, stays zero in every case. "Trained rows"
are rows 1.. of the source (row 0 is the blank).
"""

import numpy as np
import torch
from ml_collections import ConfigDict

from trm_spmd import fs, tasks
from trm_spmd.config.resume import saved_config
from trm_spmd.errors import UserError
from trm_spmd.train.data import generated_dataset_dir

RULES = ('mean', 'zero', 'random')
_RANDOM_STREAM = 0x7e57


def new_puzzle_table(trained, shape, rule, seed):
    """float32 [rows, dim] of `shape` for a new dataset from the source's table `trained`."""
    trained = np.asarray(trained, np.float32)
    if rule not in RULES:
        raise ValueError(f'init_puzzle_emb={rule!r} is not one of {RULES}')
    if trained.ndim != 2 or trained.shape[1] != shape[1]:
        raise UserError(f'init_from\'s puzzle embedding is {tuple(trained.shape)}, this model\'s rows are '
                        f'{shape[1]} wide: post-train with the model config the run was trained with')
    rows = trained[1:] if trained.shape[0] > 1 else trained
    table = np.zeros(shape, np.float32)
    if rule == 'mean':
        table[1:] = rows.mean(axis=0, dtype=np.float64)
    elif rule == 'random':
        rng = np.random.default_rng([seed, _RANDOM_STREAM])
        mean, std = rows.mean(axis=0, dtype=np.float64), np.maximum(rows.std(axis=0, dtype=np.float64), 1e-6)
        table[1:] = rng.standard_normal((shape[0] - 1, shape[1])) * std + mean
    return table


def replace_puzzle_table(model, trained, rule, seed):
    """Puts the new table of `rule` into model.puzzle_emb (its shape: this run's dataset)."""
    if model.puzzle_emb is None:
        raise UserError(f'init_puzzle_emb={rule} rebuilds the puzzle embedding, and this model has none '
                        f'(model.puzzle_emb_ndim=0): leave init_puzzle_emb=keep')
    table = new_puzzle_table(trained, tuple(model.puzzle_emb.shape), rule, seed)
    with torch.no_grad():
        model.puzzle_emb.copy_(torch.from_numpy(table).to(model.puzzle_emb.dtype))


def source_dataset(init_from):
    """The dataset directory the init_from run trained on, when its config.json names one that
    is here; else None (an official checkpoint, a run whose data is elsewhere)."""
    if init_from.startswith('official:'):
        return None
    run = init_from.rstrip('/')
    for _ in range(3):   # a run directory, its checkpoints/ or one step directory in it
        if fs.exists(fs.join(run, 'config.json')):
            break
        run = run.rsplit('/', 1)[0] if '/' in run else run
    config = saved_config(run)
    if not config:
        return None
    path = config.get('data', {}).get('path', '')
    if not path and config.get('data', {}).get('generate'):
        path = generated_dataset_dir(ConfigDict(config))   # generated: named from the run's own settings
    return path if path and fs.exists(fs.join(path, 'identifiers.json')) else None


def trained_tasks_warning(config, dataset_path):
    """The `warning:` line for new tasks the init_from run trained on (tasks/arc/new_tasks.py),
    or None (none, a task without named puzzles, or the source's dataset not found here)."""
    old = source_dataset(config.init_from)
    return tasks.get(config.data.task).trained_tasks_line(dataset_path, old) if old else None
