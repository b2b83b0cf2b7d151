"""Exponential moving average of the trainable weights, with one persistent shadow copy.

The reference deep-copies the model at every eval; a traced eval then sees a new module
and recompiles. Here the averaged values are swapped into the live parameters for eval and
swapped back after: the same Parameter objects, the same graph.
Only the tensors given are averaged (the reference averages model.parameters(), where the
puzzle embedding is a buffer): TRM.named_main_parameters().
"""

import contextlib

import torch


class EMA:
    def __init__(self, named_parameters, decay):
        named = list(named_parameters)
        self.decay = decay
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.shadow = [p.detach().clone() for p in self.params]
        self.swapped = False

    @classmethod
    def for_model(cls, model, decay):
        return cls(model.named_main_parameters(), decay)

    @torch.no_grad()
    def update(self):
        """shadow = decay * shadow + (1 - decay) * param; decay may be a float or a 0-d tensor."""
        if self.swapped:
            raise RuntimeError('EMA.update() while the averaged weights are swapped in; call swap_back() first')
        for s, p in zip(self.shadow, self.params):
            s.mul_(self.decay).add_(p.detach() * (1 - self.decay))

    @torch.no_grad()
    def _swap(self):
        # Values are exchanged in place: the parameters stay the same tensors, so compiled
        # functions (torch.compile guards, XLA graphs) see no new inputs.
        for p, s in zip(self.params, self.shadow):
            live = p.detach().clone()
            p.copy_(s)
            s.copy_(live)
        self.swapped = not self.swapped

    def swap_into(self):
        """Puts the averaged weights into the model's parameters (the live ones are kept aside)."""
        if self.swapped:
            raise RuntimeError('EMA.swap_into() called twice; call swap_back() first')
        self._swap()

    def swap_back(self):
        if not self.swapped:
            raise RuntimeError('EMA.swap_back() without swap_into()')
        self._swap()

    @contextlib.contextmanager
    def averaged(self):
        """`with ema.averaged(): evaluate(model)` runs with the averaged weights."""
        self.swap_into()
        try:
            yield
        finally:
            self.swap_back()

    def _averaged_tensors(self):
        return [p.data for p in self.params] if self.swapped else self.shadow

    def state_dict(self):
        return {'decay': self.decay,
                'shadow': {n: t.detach().clone() for n, t in zip(self.names, self._averaged_tensors())}}

    @torch.no_grad()
    def load_state_dict(self, state):
        shadow = state['shadow']
        if set(shadow) != set(self.names):
            missing = sorted(set(self.names) - set(shadow)) or sorted(set(shadow) - set(self.names))
            raise ValueError(f'EMA state does not match the model: key {missing[0]!r} differs; '
                             f'was it saved with another model config?')
        for name, t in zip(self.names, self._averaged_tensors()):
            t.copy_(shadow[name])
        self.decay = state['decay']
