"""Everything the next training step depends on, to and from a checkpoint.

The tree holds numpy arrays: model parameters and buffers, both optimizers' states, the EMA
shadow, and the ACT carry (every row's recurrent states, TRM's z_H/z_L or URM's hidden, its
step count and current puzzle, so a resumed run continues each puzzle where it was). `meta`
holds the step and the data position (and the loop adds whether an evaluation is pending and
the accuracy of the step's evaluation).
Randomness needs no state: exploration draws and data order are functions of (seed, step),
so the step is the whole position of a run.
"""

import dataclasses
import os

import numpy as np
import torch

from trm_spmd import fs
from trm_spmd.checkpoint import open_reader, to_numpy_tree
from trm_spmd.errors import UserError
from trm_spmd.model.trm import PUZZLE_EMB
from trm_spmd.train.posttrain import replace_puzzle_table

FORMAT = 1
_RESUME_HINT = 'resume with the config the run was started with'


def _optimizer_state(optimizer):
    params = [p for g in optimizer.param_groups for p in g['params']]
    return {str(i): dict(optimizer.state[p]) for i, p in enumerate(params) if p in optimizer.state}


@torch.no_grad()
def _load_optimizer_state(optimizer, tree, name):
    params = [p for g in optimizer.param_groups for p in g['params']]
    stateful = [str(i) for i, p in enumerate(params) if p in optimizer.state]
    tree = tree or {}   # an optimizer without state (SignSGD) saves an empty tree
    if sorted(tree) != sorted(stateful):
        raise UserError(f'checkpoint optimizer {name!r} holds state for {len(tree)} parameters, this run '
                        f'{len(stateful)}: {_RESUME_HINT}')
    for i in stateful:
        for key, value in tree[i].items():
            optimizer.state[params[int(i)]][key].copy_(torch.from_numpy(np.asarray(value)))


def checkpoint_tree(trainer, state, step, data_position, runtime):
    """(tree, meta) of a training run after `step` updates; state is its TrainState."""
    main, puzzle = trainer.optimizers
    model = trainer.model.state_dict()
    if trainer.row_sharded(runtime):   # its rows live on other hosts' devices too: gathered here
        model[PUZZLE_EMB] = runtime.to_host(trainer.model.puzzle_emb)
    tree = {
        'model': model,
        'optim': {'main': _optimizer_state(main)},
        'carry': {k: runtime.to_host(v) for k, v in state.carry.items()},
    }
    if puzzle is not None:
        tree['optim']['puzzle'] = _optimizer_state(puzzle)
    if trainer.ema is not None:
        tree['ema'] = trainer.ema.state_dict()['shadow']
    meta = {'format': FORMAT, 'step': int(step), 'loader': data_position}
    return to_numpy_tree(tree), meta


@torch.no_grad()
def _load_model(model, tree, what='checkpoint', fix=_RESUME_HINT):
    own = model.state_dict()
    for key, value in tree.items():
        if key not in own:
            raise UserError(f'{what} holds {key!r}, which this model does not have: {fix}')
        value = np.asarray(value)
        if tuple(value.shape) != tuple(own[key].shape):
            raise UserError(f'{what} {key!r} has shape {tuple(value.shape)}, this model '
                            f'{tuple(own[key].shape)}: {fix}')
        own[key].copy_(torch.from_numpy(value).to(own[key].dtype))


def _load_ema(ema, shadow):
    ema.load_state_dict({'decay': ema.decay, 'shadow': {k: torch.as_tensor(np.asarray(v)) for k, v in shadow.items()}})


def restore_state(trainer, tree, state, runtime):
    """Loads a checkpoint tree into the trainer's live tensors; returns `state` (a fresh
    TrainState of the same shapes) with the checkpoint's carry and `step`."""
    _load_model(trainer.model, tree['model'])
    main, puzzle = trainer.optimizers
    _load_optimizer_state(main, tree['optim']['main'], 'main')
    if puzzle is not None:
        _load_optimizer_state(puzzle, tree['optim'].get('puzzle'), 'puzzle')
    if trainer.ema is not None and 'ema' in tree:
        _load_ema(trainer.ema, tree['ema'])
    start, stop = runtime.host_slice(np.asarray(tree['carry']['halted']).shape[0])
    placed = runtime.put_batch({k: np.asarray(tree['carry'][k])[start:stop] for k in state.carry})
    return state._replace(carry={k: placed[k].to(v.dtype) for k, v in state.carry.items()})


def _official_state(path, cfg, new_table):
    """An official checkpoint's state for TRM(cfg); with new_table, its own puzzle-embedding
    rows however many there are (post-training replaces them: posttrain.py)."""
    from trm_spmd.model.official import load_official
    if not os.path.exists(path):
        raise UserError(f'official checkpoint not found: {path}')
    if not new_table:
        return load_official(path, cfg)
    state = torch.load(path, map_location='cpu', weights_only=True)
    rows = [v.shape[0] for k, v in state.items() if k.endswith('puzzle_emb.weights')]
    return load_official(state, dataclasses.replace(cfg, num_puzzle_identifiers=rows[0]) if rows else cfg)


def _split_table(weights, new_table, what):
    """(weights less the puzzle embedding, its table) when a new table replaces it, else (weights, None)."""
    if not new_table:
        return weights, None
    weights = dict(weights)
    if PUZZLE_EMB not in weights:
        raise UserError(f'{what} has no puzzle embedding to build the new rows from: leave init_puzzle_emb=keep')
    table = weights.pop(PUZZLE_EMB)
    return weights, table


def initialize_from(source, trainer, puzzle_rows='keep', seed=0):
    """Weights (and EMA) from 'official:PATH', a trm_spmd run directory, a directory of its
    checkpoint steps, or one step directory. The source is read and never changed (it may be
    a live run): its newest checkpoint that passes every check, damaged ones reported and
    skipped. A source that cannot be used is one UserError saying what is wrong with it.
    puzzle_rows other than 'keep': the puzzle embedding is a new table for this run's dataset,
    its rows from the source's by that rule (posttrain.py); the rest is loaded as it is."""
    model, ema = trainer.model, trainer.ema
    new_table = puzzle_rows != 'keep'
    if source.startswith('official:'):
        state = _official_state(source[len('official:'):], trainer.cfg, new_table)
        state, table = _split_table({k: v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy()
                                     for k, v in state.items()}, new_table, source)
        _load_model(model, state)
        if new_table:
            replace_puzzle_table(model, table, puzzle_rows, seed)
        if ema is not None:
            # An official checkpoint already holds the averaged weights.
            _load_ema(ema, {n: p.detach().cpu() for n, p in model.named_main_parameters()})
        return
    what = f'init_from={source}'
    if not fs.exists(source):
        raise UserError(f'{what}: no such directory: pass a run directory, a checkpoint directory or official:PATH')
    reader, step = open_reader(source)
    with reader:
        if step is not None:
            try:
                tree, _ = reader.restore(step)
            except FileNotFoundError as e:
                raise UserError(f'{what}: {e}') from None
        else:
            found = reader.restore_newest_good()
            if found is None:
                raise UserError(f'{what}: no checkpoint there: pass a run directory with checkpoints, a checkpoint '
                                f'directory or official:PATH')
            tree = found.tree
    weights, table = _split_table(tree['model'], new_table, what)
    _load_model(model, weights, f'{what}: its checkpoint',
                'it was trained with another model: use the config it was trained with (its config.json)')
    if new_table:
        replace_puzzle_table(model, table, puzzle_rows, seed)
    if ema is not None:
        _load_ema(ema, tree.get('ema') or {n: p.detach().cpu().numpy() for n, p in model.named_main_parameters()})
