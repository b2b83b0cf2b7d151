"""Adam-family optimizers in plain torch, safe to trace: AdamATan2 (the reference's) and AdamW.

The step counter is a float32 tensor on the parameter's device and the bias corrections are
tensor ops, so a traced step never bakes in a changing Python number. `lr` may be a float
or a 0-d tensor (set `group['lr']` each step).
"""

import torch
from torch.optim import Optimizer


class _Adam(Optimizer):
    """Shared state, weight decay and moment updates; subclasses define `_update`, the step itself."""

    def __init__(self, params, defaults):
        # capturable=True makes Optimizer.load_state_dict move 'step' onto the parameter's
        # device instead of leaving it where the checkpoint had it.
        super().__init__(params, {**defaults, 'capturable': True})
        self.init_state()

    @torch.no_grad()
    def init_state(self):
        """Creates all state up front, so the first traced step has the same inputs as the rest."""
        for group in self.param_groups:
            for p in group['params']:
                if not self.state[p]:
                    self.state[p] = {
                        'step': torch.zeros((), dtype=torch.float32, device=p.device),
                        'exp_avg': torch.zeros_like(p, memory_format=torch.preserve_format),
                        'exp_avg_sq': torch.zeros_like(p, memory_format=torch.preserve_format),
                    }

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.init_state()
        for group in self.param_groups:
            lr, weight_decay = group['lr'], group['weight_decay']
            beta1, beta2 = group['betas']
            for p in group['params']:
                if p.grad is None:
                    continue
                state = self.state[p]
                state['step'] += 1
                t = state['step']
                grad = p.grad
                # Decoupled weight decay, applied before the moment update as both references do.
                p.mul_(1 - lr * weight_decay)
                state['exp_avg'].lerp_(grad, 1 - beta1)
                state['exp_avg_sq'].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                self._update(p, state['exp_avg'], state['exp_avg_sq'], 1 - beta1 ** t, 1 - beta2 ** t, group)
        return loss


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
