"""The TRM network: one shared stack of post-norm blocks updating two states, z_H (the
answer) and z_L (the latent), plus what every family shares (network.py).

Names follow the reference's inner model (models/recursive_reasoning/trm.py): the blocks
are `L_level.layers.N`, the reset states `H_init` and `L_init`.
"""

import torch
from torch import nn

from trm_spmd.model.config import TRMConfig
from trm_spmd.model.layers import trunc_normal_
from trm_spmd.model.network import PUZZLE_EMB, Block, RecursiveNetwork, trainable_param_count

__all__ = ['PUZZLE_EMB', 'Block', 'ReasoningModule', 'TRM', 'trainable_param_count']


class ReasoningModule(nn.Module):
    """f(h, injection): the blocks applied in order to h + injection."""

    def __init__(self, cfg: TRMConfig, plan=None):
        super().__init__()
        self.layers = nn.ModuleList(Block(cfg, plan) for _ in range(cfg.L_layers))

    def forward(self, h, injection, rope=None, mask=None):
        h = h + injection
        for layer in self.layers:
            h = layer(h, rope, mask)
        return h


class TRM(RecursiveNetwork):
    """H_cycles x {L_cycles updates of z_L from (z_L, z_H + x), one of z_H from (z_H, z_L)}."""

    def __init__(self, cfg: TRMConfig):
        super().__init__(cfg)
        hidden = cfg.hidden_size
        self.L_level = ReasoningModule(cfg, self.attention_plan)
        # Reset states of z_H / z_L: random once, saved with the model, never trained.
        self.register_buffer('H_init', trunc_normal_(torch.empty(hidden, dtype=self.dtype), std=1.0))
        self.register_buffer('L_init', trunc_normal_(torch.empty(hidden, dtype=self.dtype), std=1.0))

    def initial_states(self):
        return {'z_H': self.H_init, 'z_L': self.L_init}

    def net(self, h, injection):
        """One network call f(h, injection)."""
        return self.L_level(h, injection, self._rope(), self.attention_mask)

    def _cycle(self, z_H, z_L, x, L_cycles, net):
        for _ in range(L_cycles):
            z_L = net(z_L, z_H + x)
        z_H = net(z_H, z_L)
        return z_H, z_L

    def forward_cycles(self, z_H, z_L, input_embeddings, H_cycles=None, L_cycles=None):
        """H_cycles x {L_cycles x z_L update, one z_H update}; only the last cycle builds a graph."""
        H, L = self._cycles(H_cycles, L_cycles)
        with torch.no_grad():
            for _ in range(H - 1):
                z_H, z_L = self._cycle(z_H, z_L, input_embeddings, L, self.net)
        return self._cycle(z_H, z_L, input_embeddings, L, self.gradient_call(self.net))

    def recur(self, states, input_embeddings, H_cycles=None, L_cycles=None):
        z_H, z_L = self.forward_cycles(states['z_H'], states['z_L'], input_embeddings, H_cycles, L_cycles)
        return {'z_H': z_H, 'z_L': z_L}
