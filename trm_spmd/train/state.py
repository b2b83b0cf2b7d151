"""Everything the next training step depends on, to and from a checkpoint.

The tree holds numpy arrays: model parameters and buffers, both optimizers' states, the EMA
shadow, and the ACT carry (every row's z_H/z_L, step count and current puzzle, so a resumed
run continues each puzzle where it was). `meta` holds the step and the data position.
Randomness needs no state: exploration draws and data order are functions of (seed, step).
"""

import os

import numpy as np
import torch

from trm_spmd import fs, hosts
from trm_spmd.checkpoint import restore_agreed, to_numpy_tree
from trm_spmd.errors import UserError

FORMAT = 1


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
                        f'{len(stateful)}: resume with the config the run was started with')
    for i in stateful:
        for key, value in tree[i].items():
            optimizer.state[params[int(i)]][key].copy_(torch.from_numpy(np.asarray(value)))


def training_state(step, model, optimizers, ema, loader, carry, runtime):
    main, puzzle = optimizers
    tree = {
        'model': model.state_dict(),
        'optim': {'main': _optimizer_state(main)},
        'carry': {k: runtime.to_host(v) for k, v in carry.items()},
    }
    if puzzle is not None:
        tree['optim']['puzzle'] = _optimizer_state(puzzle)
    if ema is not None:
        tree['ema'] = ema.state_dict()['shadow']
    meta = {'format': FORMAT, 'step': int(step), 'loader': loader.state_dict()}
    return to_numpy_tree(tree), meta


@torch.no_grad()
def _load_model(model, tree):
    own = model.state_dict()
    for key, value in tree.items():
        if key not in own:
            raise UserError(f'checkpoint holds {key!r}, which this model does not have: '
                            f'resume with the config the run was started with')
        value = np.asarray(value)
        if tuple(value.shape) != tuple(own[key].shape):
            raise UserError(f'checkpoint {key!r} has shape {tuple(value.shape)}, the model '
                            f'{tuple(own[key].shape)}: resume with the config the run was started with')
        own[key].copy_(torch.from_numpy(value).to(own[key].dtype))


def load_training(tree, meta, model, optimizers, ema, loader, carry, runtime):
    """Loads a restored (tree, meta) into the live objects; returns the restored carry."""
    _load_model(model, tree['model'])
    main, puzzle = optimizers
    _load_optimizer_state(main, tree['optim']['main'], 'main')
    if puzzle is not None:
        _load_optimizer_state(puzzle, tree['optim'].get('puzzle'), 'puzzle')
    if ema is not None and 'ema' in tree:
        ema.load_state_dict({'decay': ema.decay, 'shadow': {k: torch.from_numpy(np.asarray(v))
                                                             for k, v in tree['ema'].items()}})
    loader.load_state_dict(meta['loader'])
    start, stop = runtime.host_slice(np.asarray(tree['carry']['halted']).shape[0])
    host = {k: np.asarray(tree['carry'][k])[start:stop] for k in carry}
    placed = runtime.put_batch(host)
    return {k: placed[k].to(carry[k].dtype) for k in carry}


def resume_training(checkpointer, model, optimizers, ema, loader, carry, runtime, report=print):
    """(step, carry) of the newest checkpoint that every host can read and verify, loaded into
    the live objects; None when there is none (a fresh start). Damaged checkpoints met on the
    way are reported and moved aside (checkpoint.restore_agreed); every host gets the same step."""
    found = restore_agreed(checkpointer, hosts.exchanger(runtime), report=report)
    if found is None:
        return None
    return found.step, load_training(found.tree, found.meta, model, optimizers, ema, loader, carry, runtime)


def initialize_from(source, model, ema, checkpointer, cfg):
    """Weights (and EMA) from 'official:PATH', a trm_spmd workdir, or a checkpoint step dir."""
    if source.startswith('official:'):
        from trm_spmd.model.official import load_official
        path = source[len('official:'):]
        if not os.path.exists(path):
            raise UserError(f'official checkpoint not found: {path}')
        state = load_official(path, cfg)
        _load_model(model, {k: v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy()
                            for k, v in state.items()})
        if ema is not None:
            # An official checkpoint already holds the averaged weights.
            ema.load_state_dict({'decay': ema.decay, 'shadow': {n: p.detach().cpu()
                                                                 for n, p in model.named_main_parameters()}})
        return
    directory = fs.join(source, 'checkpoints') if fs.exists(fs.join(source, 'checkpoints')) else source
    try:
        tree, _ = checkpointer.restore(directory=directory)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f'no checkpoint to start from at {source} ({e}); pass a workdir, '
                        f'a checkpoints directory, or official:PATH') from None
    _load_model(model, tree['model'])
    if ema is not None:
        shadow = tree.get('ema') or {n: p.detach().cpu().numpy() for n, p in model.named_main_parameters()}
        ema.load_state_dict({'decay': ema.decay, 'shadow': {k: torch.from_numpy(np.asarray(v))
                                                             for k, v in shadow.items()}})
