"""Optimizers (plain torch, traceable), the learning-rate schedule and the EMA. Imports nothing
of trm_spmd; train/ builds on it."""

from trm_spmd.optim.adam_atan2 import AdamATan2, AdamW
from trm_spmd.optim.ema import EMA
from trm_spmd.optim.lion import Lion
from trm_spmd.optim.muon import Muon
from trm_spmd.optim.schedule import learning_rate
from trm_spmd.optim.sign_sgd import SignSGD

__all__ = ['AdamATan2', 'AdamW', 'EMA', 'Lion', 'Muon', 'SignSGD', 'build_optimizers', 'learning_rate', 'set_lr']

OPTIMIZERS = ('adam_atan2', 'adamw', 'lion', 'muon')


def build_optimizers(model, config):
    """(main optimizer over model.main_parameters(), SignSGD over the puzzle embedding or None).

    config.optim: name, lr, beta1, beta2, weight_decay, eps (adamw, muon's Adam part),
    muon_momentum, muon_ns_steps, puzzle_emb_lr, puzzle_emb_weight_decay. Lion takes
    beta1/beta2 from the config too; Muon takes them for its Adam part (the non-2-D weights).
    """
    o = config.optim
    params, betas = model.main_parameters(), (o.beta1, o.beta2)
    if o.name == 'adam_atan2':
        main = AdamATan2(params, lr=o.lr, betas=betas, weight_decay=o.weight_decay)
    elif o.name == 'adamw':
        main = AdamW(params, lr=o.lr, betas=betas, weight_decay=o.weight_decay, eps=o.eps)
    elif o.name == 'lion':
        main = Lion(params, lr=o.lr, betas=betas, weight_decay=o.weight_decay)
    elif o.name == 'muon':
        main = Muon(params, lr=o.lr, weight_decay=o.weight_decay, momentum=o.muon_momentum,
                    ns_steps=o.muon_ns_steps, betas=betas, eps=o.eps)
    else:
        raise ValueError(f'optim.name={o.name!r} is not one of {OPTIMIZERS}')
    puzzle = model.puzzle_emb_parameters()
    puzzle_opt = SignSGD(puzzle, lr=o.puzzle_emb_lr, weight_decay=o.puzzle_emb_weight_decay) if puzzle else None
    return main, puzzle_opt


def set_lr(optimizer, lr):
    """Sets every group's lr (a float, or a 0-d tensor so a traced step does not retrace)."""
    for group in optimizer.param_groups:
        group['lr'] = lr
