"""SignSGD with decoupled weight decay, for the puzzle-identifier embedding table.

The reference gathers the batch's unique ids and updates only those rows (dynamic shapes).
Here the gradient is the dense table gradient and rows the batch did not touch are left
alone by a mask: their gradient is exactly zero, so sign() moves nothing and the decay is
skipped. (A used row whose gradient sums to exactly zero skips its decay too; the
reference would decay it.)
"""

import torch
from torch.optim import Optimizer


class SignSGD(Optimizer):
    """Per touched row: p = p * (1 - lr*wd) - lr * sign(g). `lr` may be a float or a 0-d tensor."""

    def __init__(self, params, lr=1e-4, weight_decay=0.0):
        # torch.compile adds 'capturable' to a group with a tensor lr; having it from the
        # start keeps the first compiled step's guards valid for the rest.
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, capturable=True))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, weight_decay = group['lr'], group['weight_decay']
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad
                touched = (grad != 0).reshape(grad.shape[0], -1).any(dim=1)
                touched = touched.view((-1,) + (1,) * (grad.dim() - 1)).to(p.dtype)
                p.mul_(1 - touched * (lr * weight_decay)).sub_(torch.sign(grad) * lr)
        return loss
