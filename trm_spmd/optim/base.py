"""The step loop shared by the optimizers here: closure, groups, parameters with a gradient.

Subclasses create their state up front (`init_state`), so the first traced step has the
same inputs as every later one, and define `update(p, grad, state, group)`.
"""

import torch
from torch.optim import Optimizer


class TraceableOptimizer(Optimizer):
    def __init__(self, params, defaults):
        # capturable=True: Optimizer.load_state_dict then moves tensor state onto the
        # parameter's device, and torch.compile (which adds it for a tensor lr) keeps the
        # first compiled step's guards valid for the rest.
        super().__init__(params, {**defaults, 'capturable': True})
        self.init_state()

    def new_state(self, p):
        return {}

    @torch.no_grad()
    def init_state(self):
        for group in self.param_groups:
            for p in group['params']:
                if not self.state[p]:
                    state = self.new_state(p)
                    if state:
                        self.state[p] = state

    def update(self, p, grad, state, group):
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.init_state()
        for group in self.param_groups:
            for p in group['params']:
                if p.grad is not None:
                    self.update(p, p.grad, self.state[p], group)
        return loss
