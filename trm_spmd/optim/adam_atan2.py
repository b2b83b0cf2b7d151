"""Adam-family optimizers in plain torch, safe to trace: AdamATan2 (the reference's) and AdamW.

The step counter is a float32 tensor on the parameter's device and the bias corrections are
tensor ops, so a traced step never bakes in a changing Python number. `lr` may be a float
or a 0-d tensor (set `group['lr']` each step).
"""

import torch

from trm_spmd.optim.base import TraceableOptimizer


class _Adam(TraceableOptimizer):
    """Shared state, weight decay and moment updates; subclasses define `_update`, the step itself."""

    def new_state(self, p):
        # The step counter is a tensor: a traced step never bakes in a changing Python number.
        return {'step': torch.zeros((), dtype=torch.float32, device=p.device),
                'exp_avg': torch.zeros_like(p, memory_format=torch.preserve_format),
                'exp_avg_sq': torch.zeros_like(p, memory_format=torch.preserve_format)}

    def update(self, p, grad, state, group):
        beta1, beta2 = group['betas']
        state['step'] += 1
        t = state['step']
        # Decoupled weight decay, applied before the moment update as both references do.
        p.mul_(1 - group['lr'] * group['weight_decay'])
        state['exp_avg'].lerp_(grad, 1 - beta1)
        state['exp_avg_sq'].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        self._update(p, state['exp_avg'], state['exp_avg_sq'], 1 - beta1 ** t, 1 - beta2 ** t, group)


class AdamATan2(_Adam):
    """p -= lr / (1 - b1^t) * atan2(m, sqrt(v) / sqrt(1 - b2^t)); no eps (atan2 is bounded)."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    def _update(self, p, exp_avg, exp_avg_sq, bias1, bias2, group):
        direction = torch.atan2(exp_avg, exp_avg_sq.sqrt() / bias2.sqrt())
        p.sub_(direction * (group['lr'] / bias1))


class AdamW(_Adam):
    """torch.optim.AdamW's math: p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay, eps=eps))

    def _update(self, p, exp_avg, exp_avg_sq, bias1, bias2, group):
        denom = exp_avg_sq.sqrt() / bias2.sqrt() + group['eps']
        p.sub_(exp_avg / denom * (group['lr'] / bias1))
