"""Analytic FLOP counts against hand counts (a multiply-add is 2 FLOPs; only matmuls count)."""

import pytest

from trm_spmd.model import TRMConfig, eval_flops_per_example_step, network_call_flops, train_flops_per_example_step
from trm_spmd.model.flops import heads_flops

# Baseline: L = 16 + 81 = 97 positions, D = 512, token-mix width 512, channel width 1536.
TOKEN_MIX_512 = 2 * 512 * 97 * 1024 + 2 * 512 * 512 * 97          # gate_up [1024, 97] + down [97, 512]
CHANNEL_512 = 2 * 97 * 512 * 3072 + 2 * 97 * 1536 * 512           # gate_up [3072, 512] + down [512, 1536]
HEADS_512 = 2 * 81 * 512 * 11 + 2 * 512 * 2                       # lm_head on 81 cells + q_head on 1
BASELINE_CALL = 2 * (TOKEN_MIX_512 + CHANNEL_512)                  # 1,220,542,464

# Attention: qkv [1536, 512], o [512, 512], QK^T and AV over 97 x 97 x 512.
ATTENTION_512 = 2 * 97 * 512 * 1536 + 2 * 97 * 512 * 512 + 2 * 2 * 97 * 97 * 512
ATTENTION_CALL = 2 * (ATTENTION_512 + CHANNEL_512)                 # 1,360,793,600

# Large: D = 1024, 4 layers, 16 prefix tokens of 1024; token-mix width 512, channel round(2730.7) -> 2816.
TOKEN_MIX_1024 = 2 * 1024 * 97 * 1024 + 2 * 1024 * 512 * 97
CHANNEL_1024 = 2 * 97 * 1024 * 5632 + 2 * 97 * 2816 * 1024
LARGE_CALL = 4 * (TOKEN_MIX_1024 + CHANNEL_1024)
HEADS_1024 = 2 * 81 * 1024 * 11 + 2 * 1024 * 2


def test_baseline_network_call():
    cfg = TRMConfig()
    assert network_call_flops(cfg) == BASELINE_CALL == 1_220_542_464
    assert heads_flops(cfg) == HEADS_512


def test_baseline_act_step_matches_the_cost_model():
    cfg = TRMConfig()
    # 21 calls forward, backward (2x) through the grad cycle's 7: 35 call-equivalents.
    assert train_flops_per_example_step(cfg) == 35 * BASELINE_CALL + 3 * HEADS_512
    assert train_flops_per_example_step(cfg) / 1e9 == pytest.approx(42.72, abs=0.01)
    assert eval_flops_per_example_step(cfg) == 21 * BASELINE_CALL + HEADS_512


def test_attention_rope_network_call():
    cfg = TRMConfig(mlp_t=False, pos_encodings='rope')
    assert network_call_flops(cfg) == ATTENTION_CALL == 1_360_793_600
    assert train_flops_per_example_step(cfg) == 35 * ATTENTION_CALL + 3 * HEADS_512


def test_large_model():
    cfg = TRMConfig(hidden_size=1024, L_layers=4, puzzle_emb_ndim=1024, num_heads=16)
    assert network_call_flops(cfg) == LARGE_CALL
    assert train_flops_per_example_step(cfg) == 35 * LARGE_CALL + 3 * HEADS_1024


def test_cycle_overrides_and_q_continue_forward():
    cfg = TRMConfig()
    # T=2, n=4: 2 * 5 = 10 calls forward, 5 back-propagated.
    assert train_flops_per_example_step(cfg, H_cycles=2, L_cycles=4) == 20 * BASELINE_CALL + 3 * HEADS_512
    assert eval_flops_per_example_step(cfg, H_cycles=2, L_cycles=4) == 10 * BASELINE_CALL + HEADS_512
    q_continue = TRMConfig(no_ACT_continue=False)
    assert train_flops_per_example_step(q_continue) == 56 * BASELINE_CALL + 4 * HEADS_512


def test_no_puzzle_embedding_shortens_the_sequence():
    cfg = TRMConfig(puzzle_emb_ndim=0)
    token_mix = 2 * 512 * 81 * 512 + 2 * 512 * 256 * 81             # width round(216) -> 256
    channel = 2 * 81 * 512 * 3072 + 2 * 81 * 1536 * 512
    assert network_call_flops(cfg) == 2 * (token_mix + channel)


# URM on ARC-AGI-1 (configs/urm.py:arc1): 4 layers, 1 puzzle-embedding token + 900 cells = 901
# positions, vocabulary 12; per layer attention + ConvSwiGLU (the channel SwiGLU plus a depthwise
# kernel-2 convolution: 2 multiply-adds per inner channel and position).
URM_T = 901
URM_LAYER = (2 * URM_T * 512 * 1536 + 2 * URM_T * 512 * 512 + 2 * 2 * URM_T * URM_T * 512   # attention
             + 2 * URM_T * 512 * 3072 + 2 * URM_T * 1536 * 512 + 2 * 2 * URM_T * 1536)      # ConvSwiGLU
URM_HEADS = 2 * 900 * 512 * 12 + 2 * 512 * 2
URM_ARC = dict(family='urm', mlp_t=False, pos_encodings='rope', L_layers=4, H_cycles=2, L_cycles=6,
               puzzle_emb_len=1, seq_len=900, vocab_size=12)


def test_urm_loop_and_act_step():
    cfg = TRMConfig(**URM_ARC)
    assert network_call_flops(cfg) == 4 * URM_LAYER
    # 2 x 6 = 12 loops forward, backward (2x) through the last 6: 24 loop-equivalents.
    assert train_flops_per_example_step(cfg) == 24 * 4 * URM_LAYER + 3 * URM_HEADS
    assert eval_flops_per_example_step(cfg) == 12 * 4 * URM_LAYER + URM_HEADS
    assert eval_flops_per_example_step(cfg, H_cycles=1, L_cycles=3) == 3 * 4 * URM_LAYER + URM_HEADS
    # The convolution is a rounding error of a loop: 2 of every (6 * 512 + 2) channel FLOPs.
    conv = 4 * 2 * 2 * URM_T * 1536
    assert conv / network_call_flops(cfg) < 0.001
