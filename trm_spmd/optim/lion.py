"""Lion (Chen et al. 2023): the sign of an interpolated momentum, with decoupled weight decay."""

import torch

from trm_spmd.optim.base import TraceableOptimizer


class Lion(TraceableOptimizer):
    """p = p * (1 - lr*wd) - lr * sign(b1*m + (1-b1)*g); then m = b2*m + (1-b2)*g.

    Every update has the same magnitude per coordinate, so Lion usually wants an lr 3-10x
    below AdamW's. `lr` may be a float or a 0-d tensor.
    """

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    def new_state(self, p):
        return {'exp_avg': torch.zeros_like(p, memory_format=torch.preserve_format)}

    def update(self, p, grad, state, group):
        beta1, beta2 = group['betas']
        lr = group['lr']
        direction = state['exp_avg'].lerp(grad, 1 - beta1).sign_()
        p.mul_(1 - lr * group['weight_decay'])
        p.sub_(direction * lr)
        state['exp_avg'].lerp_(grad, 1 - beta2)
