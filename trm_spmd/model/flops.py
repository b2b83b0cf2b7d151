"""Analytic FLOPs per example, for MFU and step-time projections.

Counted: matrix multiplies, a multiply-add being 2 FLOPs: the token-mix MLP or the
attention projections plus its score (QK^T) and value (AV) products, the channel SwiGLU,
and the lm/q heads; for URM also its depthwise convolution (2 multiply-adds per inner
channel and position, a 0.1% share of a call at hidden 512). Not counted: norms,
activations, residual adds, RoPE, softmax, embedding lookups, the loss, the optimizer (Muon's
Newton-Schulz products included), and the recomputation done by gradient checkpointing (so
MFU measures useful model work). Backward counts as 2x forward. An attention mask
(model.attention_mask) removes no work from dense attention, whose kernel computes every
score before dropping the masked ones: scores count in full.

A network call is one pass through every layer: TRM's f(h, injection), URM's loop.
TRM runs H_cycles * (L_cycles + 1) calls per ACT step and back-propagates through the last
cycle's L_cycles + 1; URM runs H_cycles * L_cycles and back-propagates through the last
L_cycles (TRMConfig.calls_per_cycle).
"""

from trm_spmd.model.config import TRMConfig
from trm_spmd.model.layers import DepthwiseConv, swiglu_width


def network_call_flops(cfg: TRMConfig) -> int:
    """One call of the shared network (every layer once), per example."""
    t, d = cfg.total_len, cfg.hidden_size
    inner = swiglu_width(d, cfg.expansion)
    channel = 2 * t * d * (2 * inner) + 2 * t * inner * d
    if cfg.family == 'urm':
        channel += 2 * DepthwiseConv.KERNEL * t * inner
    if cfg.mlp_t:
        inner_t = swiglu_width(t, cfg.expansion)
        mix = 2 * d * t * (2 * inner_t) + 2 * d * inner_t * t
    else:
        projections = 2 * t * d * (3 * d) + 2 * t * d * d
        scores_and_values = 2 * (2 * t * t * d)
        mix = projections + scores_and_values
    return cfg.L_layers * (mix + channel)


def heads_flops(cfg: TRMConfig) -> int:
    """lm_head on the seq_len cells plus q_head on position 0, per example."""
    return 2 * cfg.seq_len * cfg.hidden_size * cfg.vocab_size + 2 * cfg.hidden_size * 2


def _cycles(cfg, H_cycles, L_cycles):
    H = cfg.H_cycles if H_cycles is None else H_cycles
    L = cfg.L_cycles if L_cycles is None else L_cycles
    return H, L


def eval_flops_per_example_step(cfg: TRMConfig, H_cycles=None, L_cycles=None) -> int:
    """One ACT step forward: H_cycles cycles of network calls plus the heads."""
    H, L = _cycles(cfg, H_cycles, L_cycles)
    return H * cfg.calls_per_cycle(L) * network_call_flops(cfg) + heads_flops(cfg)


def train_flops_per_example_step(cfg: TRMConfig, H_cycles=None, L_cycles=None) -> int:
    """One training ACT step: the forward, plus backward (2x) through the last cycle's calls
    and the heads; with no_ACT_continue=False also the extra no-grad forward that computes
    the Q-continue target.
    """
    H, L = _cycles(cfg, H_cycles, L_cycles)
    call, per_cycle = network_call_flops(cfg), cfg.calls_per_cycle(L)
    flops = H * per_cycle * call + 2 * per_cycle * call + 3 * heads_flops(cfg)
    if not cfg.no_ACT_continue and cfg.halt_max_steps > 1:
        flops += eval_flops_per_example_step(cfg, H, L)
    return flops
