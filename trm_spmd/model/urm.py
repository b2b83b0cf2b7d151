"""The URM network (Universal Reasoning Model, arXiv 2512.14693): one hidden state that
loops through a stack of attention + ConvSwiGLU blocks, the input embeddings added back
before every loop, plus what every family shares (network.py).

One ACT step runs H_cycles x L_cycles loops (the reference's H_cycles / L_cycles; its
`loops` is our act.halt_max_steps, its num_layers our L_layers). Truncated backpropagation
through loops: the first H_cycles - 1 outer cycles run without gradients, only the last
one's L_cycles loops build a graph. Names follow the reference's inner model
(models/urm/urm.py): the blocks are `layers.N`, the reset state `init_hidden`.
"""

import torch
from torch import nn

from trm_spmd.model.config import TRMConfig
from trm_spmd.model.layers import trunc_normal_
from trm_spmd.model.network import Block, RecursiveNetwork


class URM(RecursiveNetwork):
    def __init__(self, cfg: TRMConfig):
        if cfg.family != 'urm':
            raise ValueError(f"URM needs a config of family 'urm', not {cfg.family!r}")
        super().__init__(cfg)
        self.layers = nn.ModuleList(Block(cfg, self.attention_plan) for _ in range(cfg.L_layers))
        # The reset state: random once, saved with the model, never trained.
        self.register_buffer('init_hidden', trunc_normal_(torch.empty(cfg.hidden_size, dtype=self.dtype), std=1.0))

    def initial_states(self):
        return {'hidden': self.init_hidden}

    def loop(self, h, input_embeddings):
        """One network call: inject the input, then every block in order."""
        h = h + input_embeddings
        rope, mask = self._rope(), self.attention_mask
        for layer in self.layers:
            h = layer(h, rope, mask)
        return h

    @staticmethod
    def _loops(loop, h, input_embeddings, count):
        for _ in range(count):
            h = loop(h, input_embeddings)
        return h

    def forward_loops(self, hidden, input_embeddings, H_cycles=None, L_cycles=None):
        """H_cycles x L_cycles loops; only the last L_cycles build a graph."""
        H, L = self._cycles(H_cycles, L_cycles)
        with torch.no_grad():
            hidden = self._loops(self.loop, hidden, input_embeddings, (H - 1) * L)
        return self._loops(self.gradient_call(self.loop), hidden, input_embeddings, L)

    def recur(self, states, input_embeddings, H_cycles=None, L_cycles=None):
        return {'hidden': self.forward_loops(states['hidden'], input_embeddings, H_cycles, L_cycles)}
