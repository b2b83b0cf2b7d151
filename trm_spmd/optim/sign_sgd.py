"""SignSGD with decoupled weight decay, for the puzzle-identifier embedding table.

The reference gathers the batch's unique ids and updates only those rows (dynamic shapes).
Here the gradient is the dense table gradient and rows the batch did not touch are left
alone by a mask: their gradient is exactly zero, so sign() moves nothing and the decay is
skipped. (A used row whose gradient sums to exactly zero skips its decay too; the
reference would decay it.)
"""

import torch

from trm_spmd.optim.base import TraceableOptimizer


class SignSGD(TraceableOptimizer):
    """Per touched row: p = p * (1 - lr*wd) - lr * sign(g). `lr` may be a float or a 0-d tensor."""

    def __init__(self, params, lr=1e-4, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay))

    def update(self, p, grad, state, group):
        lr = group['lr']
        touched = (grad != 0).reshape(grad.shape[0], -1).any(dim=1)
        touched = touched.view((-1,) + (1,) * (grad.dim() - 1)).to(p.dtype)
        p.mul_(1 - touched * (lr * group['weight_decay'])).sub_(torch.sign(grad) * lr)
