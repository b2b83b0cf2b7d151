"""Lion (Chen et al. 2023): the sign of an interpolated momentum, with decoupled weight decay."""

import torch
from torch.optim import Optimizer


class Lion(Optimizer):
    """p = p * (1 - lr*wd) - lr * sign(b1*m + (1-b1)*g); then m = b2*m + (1-b2)*g.

    Every update has the same magnitude per coordinate, so Lion usually wants an lr 3-10x
    below AdamW's. `lr` may be a float or a 0-d tensor.
    """

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        # torch.compile adds 'capturable' to a group with a tensor lr; having it from the
        # start keeps the first compiled step's guards valid for the rest.
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay, capturable=True))
        self.init_state()

    @torch.no_grad()
    def init_state(self):
        """Creates the momentum up front, so the first traced step has the same inputs as the rest."""
        for group in self.param_groups:
            for p in group['params']:
                if not self.state[p]:
                    self.state[p] = {'exp_avg': torch.zeros_like(p, memory_format=torch.preserve_format)}

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
                exp_avg = self.state[p]['exp_avg']
                direction = exp_avg.lerp(p.grad, 1 - beta1).sign_()
                p.mul_(1 - lr * weight_decay)
                p.sub_(direction * lr)
                exp_avg.lerp_(p.grad, 1 - beta2)
        return loss
