"""TRM network, ACT semantics and counter-based RNG."""

import math

import pytest
import torch
import torch.nn.functional as F

from trm_spmd.errors import UserError
from trm_spmd.model import (TRM, TRMConfig, act_step, counter_uniforms, initial_carry, loss_and_metrics,
                            trainable_param_count)
from trm_spmd.model.act import exploration_min_steps, exploration_prob_at
from trm_spmd.model.layers import rms_norm, swiglu_width, trunc_normal_

SEQ = 81
TINY = dict(hidden_size=32, num_heads=4, expansion=2.0, L_layers=1, H_cycles=2, L_cycles=2,
            puzzle_emb_ndim=32, puzzle_emb_len=2, halt_max_steps=4, forward_dtype='float32')


def tiny(**overrides):
    torch.manual_seed(0)
    return TRM(TRMConfig(**{**TINY, **overrides}))


def make_batch(b, seed, vocab=11):
    g = torch.Generator().manual_seed(seed)
    return {'inputs': torch.randint(1, vocab, (b, SEQ), generator=g, dtype=torch.int32),
            'labels': torch.randint(2, vocab, (b, SEQ), generator=g, dtype=torch.int32),
            'puzzle_identifiers': torch.zeros(b, dtype=torch.int32)}


def set_q_bias(model, halt, cont):
    with torch.no_grad():
        model.q_head.bias.copy_(torch.tensor([halt, cont]))


def count_calls(model):
    """[grad_enabled flag per network call] filled by a forward hook."""
    calls = []
    model.L_level.register_forward_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    return calls


# ---- sizes and init ------------------------------------------------------------

def test_param_count_baseline_mlp():
    model = TRM(TRMConfig())
    assert trainable_param_count(model) == 5_028_866
    assert model.puzzle_emb.numel() == 512
    assert model.config.total_len == 97
    assert abs(model.embed_tokens.weight.std().item() - 512 ** -0.5) < 0.003


def test_param_count_attention_rope():
    assert trainable_param_count(TRM(TRMConfig(mlp_t=False, pos_encodings='rope'))) == 6_828_034


def test_swiglu_width_rounds_up_to_256():
    assert swiglu_width(97, 4.0) == 512
    assert swiglu_width(512, 4.0) == 1536
    assert swiglu_width(1024, 4.0) == 2816
    assert swiglu_width(128, 2.0) == 256


def test_trunc_normal_has_corrected_std_and_bounds():
    torch.manual_seed(0)
    x = trunc_normal_(torch.empty(200_000), std=0.5)
    # An uncorrected cut at 2 sigma would give std 0.5 * 0.88.
    assert abs(x.std().item() - 0.5) < 0.005
    assert x.abs().max().item() <= 2 * 0.5 / 0.8796 + 1e-6


def test_init_of_heads_embeddings_and_states():
    model = tiny(forward_dtype='bfloat16')
    assert torch.equal(model.q_head.weight, torch.zeros(2, 32))
    assert torch.equal(model.q_head.bias, torch.full((2,), -5.0))
    assert torch.equal(model.puzzle_emb, torch.zeros(1, 32))
    assert model.embed_tokens.weight.dtype == torch.float32
    names = {n for n, _ in model.named_parameters()}
    assert 'H_init' not in names and 'H_init' in model.state_dict()
    assert model.H_init.dtype == torch.bfloat16
    assert [p for p in model.main_parameters() if p is model.puzzle_emb] == []
    assert model.puzzle_emb_parameters() == [model.puzzle_emb]


def test_config_rejects_bad_values():
    with pytest.raises(UserError, match='model.forward_dtype'):
        TRMConfig(forward_dtype='float16')
    with pytest.raises(UserError, match='model.puzzle_emb_len'):
        TRMConfig(puzzle_emb_ndim=1024, puzzle_emb_len=1)


def test_from_config_reads_model_act_and_loss():
    ml_collections = pytest.importorskip('ml_collections')
    c = ml_collections.ConfigDict({
        'model': dict(hidden_size=64, num_heads=4, expansion=2.0, H_cycles=2, L_cycles=3, L_layers=1, mlp_t=False,
                      pos_encodings='rope', rope_theta=500.0, attention_mask='window', attention_window=3,
                      puzzle_emb_ndim=0, puzzle_emb_len=16, rms_norm_eps=1e-6, forward_dtype='float32',
                      grad_checkpointing=True),
        'act': dict(halt_max_steps=8, exploration_prob=0.2, no_ACT_continue=False),
        'loss': dict(type='softmax', q_loss_weight=0.25)})
    cfg = TRMConfig.from_config(c, seq_len=81)
    assert (cfg.hidden_size, cfg.L_cycles, cfg.mlp_t, cfg.rope_theta) == (64, 3, False, 500.0)
    assert (cfg.attention_mask, cfg.attention_window) == ('window', 3)
    assert (cfg.halt_max_steps, cfg.no_ACT_continue, cfg.loss_type, cfg.q_loss_weight) == (8, False, 'softmax', 0.25)
    assert cfg.prefix_len == 0 and cfg.total_len == 81


# ---- layers against the reference's formulation ---------------------------------

def test_token_mix_equals_transposed_reference():
    model = tiny()
    block = model.L_level.layers[0]
    h = torch.randn(3, 83, 32)
    w1, w2 = block.mlp_t.gate_up_proj.weight, block.mlp_t.down_proj.weight
    t = h.transpose(1, 2)                       # [B, D, L] as the reference
    gate, up = F.linear(t, w1).chunk(2, dim=-1)
    t = t + F.linear(F.silu(gate) * up, w2)
    t = t * torch.rsqrt(t.square().mean(-1, keepdim=True) + 1e-5)
    mixed = t.transpose(1, 2)
    gate, up = F.linear(mixed, block.mlp.gate_up_proj.weight).chunk(2, dim=-1)
    out = mixed + F.linear(F.silu(gate) * up, block.mlp.down_proj.weight)
    expected = out * torch.rsqrt(out.square().mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(block(h), expected, rtol=1e-5, atol=1e-5)


def test_attention_with_rope_equals_explicit_formula():
    model = tiny(mlp_t=False, pos_encodings='rope', rope_theta=100.0)
    attn = model.L_level.layers[0].self_attn
    x = torch.randn(2, 83, 32)
    q, k, v = F.linear(x, attn.qkv_proj.weight).view(2, 83, 3, 4, 8).unbind(2)
    pos = torch.arange(83, dtype=torch.float64)[:, None]
    freq = 100.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    angle = (pos * freq)[:, None, :]            # rotates pairs (i, i + 4) of each head

    def rotate(t):
        a, b = t.double()[..., :4], t.double()[..., 4:]
        return torch.cat((a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()), -1).float()

    q, k = rotate(q), rotate(k)
    scores = torch.einsum('bqhd,bkhd->bhqk', q, k) / math.sqrt(8)
    out = torch.einsum('bhqk,bkhd->bqhd', scores.softmax(-1), v).reshape(2, 83, 32)
    expected = F.linear(out, attn.o_proj.weight)
    torch.testing.assert_close(attn(x, (model.rope_cos, model.rope_sin)), expected, rtol=1e-4, atol=1e-5)


def test_rms_norm_over_axis_in_float32():
    x = torch.randn(2, 5, 7).to(torch.bfloat16)
    y = rms_norm(x, 1e-5, dim=1)
    assert y.dtype == torch.bfloat16
    ref = x.float() / torch.sqrt(x.float().square().mean(1, keepdim=True) + 1e-5)
    torch.testing.assert_close(y.float(), ref, rtol=1e-2, atol=1e-2)


# ---- embeddings -------------------------------------------------------------------

def test_input_embeddings_prefix_layout():
    model = tiny(puzzle_emb_ndim=40, puzzle_emb_len=3, num_puzzle_identifiers=3)
    with torch.no_grad():
        model.puzzle_emb.copy_(torch.randn(3, 40))
    batch = make_batch(2, 0)
    ids = torch.tensor([2, 0], dtype=torch.int32)
    x = model.input_embeddings(batch['inputs'], ids)
    scale = math.sqrt(32)
    assert x.shape == (2, 3 + SEQ, 32)
    flat = x[:, :3].reshape(2, 96)
    torch.testing.assert_close(flat[:, :40], model.puzzle_emb[ids.long()] * scale)
    assert torch.equal(flat[:, 40:], torch.zeros(2, 56))
    torch.testing.assert_close(x[:, 3:], model.embed_tokens.weight[batch['inputs'].long()] * scale)


def test_single_identifier_table_is_broadcast_to_every_row():
    model = tiny()
    with torch.no_grad():
        model.puzzle_emb.copy_(torch.randn(1, 32))
    batch = make_batch(3, 0)
    x = model.input_embeddings(batch['inputs'], batch['puzzle_identifiers'])
    torch.testing.assert_close(x[:, 0], (model.puzzle_emb * math.sqrt(32)).expand(3, 32))
    assert torch.equal(x[:, 1], torch.zeros(3, 32))
    x.sum().backward()
    torch.testing.assert_close(model.puzzle_emb.grad, torch.full((1, 32), 3 * math.sqrt(32)))


def test_learned_positions_add_table_and_scale():
    model = tiny(pos_encodings='learned')
    batch = make_batch(2, 0)
    x = model.input_embeddings(batch['inputs'], batch['puzzle_identifiers'])
    tokens = F.pad(model.embed_tokens.weight[batch['inputs'].long()], (0, 0, 2, 0))
    expected = math.sqrt(32) * 0.707106781 * (tokens + model.embed_pos.weight)
    torch.testing.assert_close(x, expected)


def test_no_puzzle_embedding_runs_on_the_cells_alone():
    model = tiny(puzzle_emb_ndim=0)
    assert model.puzzle_emb is None and model.puzzle_emb_parameters() == []
    assert model.config.total_len == SEQ
    new, out = act_step(model, initial_carry(model, 2, 'cpu'), make_batch(2, 0), training=False)
    assert new['z_H'].shape == (2, SEQ, 32) and out['logits'].shape == (2, SEQ, 11)


# ---- recursion and gradients --------------------------------------------------------

@pytest.mark.parametrize('dtype', ['bfloat16', 'float32'])
def test_forward_dtypes(dtype):
    model = tiny(forward_dtype=dtype)
    carry = initial_carry(model, 2, 'cpu')
    new, out = act_step(model, carry, make_batch(2, 0), training=False)
    assert new['z_H'].dtype == getattr(torch, dtype) and new['z_L'].dtype == getattr(torch, dtype)
    assert out['logits'].dtype == torch.float32 and out['logits'].shape == (2, SEQ, 11)
    assert out['q_halt_logits'].dtype == torch.float32 and out['q_halt_logits'].shape == (2,)
    assert torch.isfinite(out['logits']).all()


def test_only_the_last_cycle_builds_a_graph():
    model = tiny(H_cycles=3, L_cycles=2)
    calls = count_calls(model)
    z = torch.randn(2, 83, 32, requires_grad=True)
    zl = torch.randn(2, 83, 32, requires_grad=True)
    x = model.input_embeddings(make_batch(2, 0)['inputs'], torch.zeros(2, dtype=torch.int32))
    z_H, _ = model.forward_cycles(z, zl, x)
    assert calls == [False] * 6 + [True] * 3
    z_H.sum().backward()
    # The no-grad cycles cut the graph: nothing flows back to the incoming state.
    assert z.grad is None and zl.grad is None


def test_no_grad_cycles_contribute_nothing_to_param_grads():
    model = tiny(H_cycles=2, L_cycles=2)
    z_H0, z_L0 = torch.randn(2, 83, 32), torch.randn(2, 83, 32)
    x = torch.randn(2, 83, 32)
    z_H, _ = model.forward_cycles(z_H0, z_L0, x)
    z_H.square().sum().backward()
    grads = [p.grad.clone() for p in model.main_parameters() if p.grad is not None]
    model.zero_grad()
    with torch.no_grad():
        s_H, s_L = model.forward_cycles(z_H0, z_L0, x, H_cycles=1)
    z_H1, _ = model.forward_cycles(s_H, s_L, x, H_cycles=1)
    z_H1.square().sum().backward()
    grads1 = [p.grad for p in model.main_parameters() if p.grad is not None]
    assert len(grads) == len(grads1) > 0
    for a, b in zip(grads, grads1):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('mlp_t', [True, False])
def test_float32_weight_grads_are_the_per_use_grads_unrounded(mlp_t):
    """use_float32_weight_grads: the same bfloat16 forward and activation gradients; each weight
    gradient sums the same bfloat16 products, in float32 instead of rounded per use."""
    import copy
    model = tiny(forward_dtype='bfloat16', mlp_t=mlp_t, L_cycles=3)
    exact = copy.deepcopy(model).use_float32_weight_grads()
    batch = make_batch(4, 1)
    grads = []
    for m in (model, exact):
        carry = initial_carry(m, 4, 'cpu')
        new, out = act_step(m, carry, batch, training=True, uniforms=counter_uniforms(0, 0, 4, 2))
        loss, _ = loss_and_metrics(new, out, m.config)
        loss.backward()
        grads.append({n: p.grad for n, p in m.named_parameters() if p.grad is not None})
        grads[-1]['_loss'] = loss.detach()
    rounded, unrounded = grads
    assert set(rounded) == set(unrounded) and torch.equal(rounded['_loss'], unrounded['_loss'])
    differ = 0
    for name in rounded:
        a, b = rounded[name], unrounded[name]
        assert a.dtype == b.dtype == torch.float32, name
        # Rounding each use's gradient to bfloat16 changes it by at most a few 2^-8 relative.
        assert (a - b).norm() <= 0.02 * b.norm() + 1e-6, name
        differ += not torch.equal(a, b)
    assert differ > 0


def test_single_cycle_backpropagates_into_the_state():
    model = tiny()
    z = torch.randn(1, 83, 32, requires_grad=True)
    z_H, _ = model.forward_cycles(z, torch.randn(1, 83, 32), torch.randn(1, 83, 32), H_cycles=1)
    z_H.sum().backward()
    assert z.grad is not None and z.grad.abs().sum() > 0


def test_curriculum_override_changes_network_calls():
    model = tiny(H_cycles=2, L_cycles=2)
    calls = count_calls(model)
    batch = make_batch(2, 0)
    act_step(model, initial_carry(model, 2, 'cpu'), batch, training=False)
    assert len(calls) == 2 * 3
    calls.clear()
    act_step(model, initial_carry(model, 2, 'cpu'), batch, training=False, H_cycles=3, L_cycles=4)
    assert len(calls) == 3 * 5 and sum(calls) == 5


def test_grad_checkpointing_gives_the_same_gradients():
    plain, ckpt = tiny(), tiny(grad_checkpointing=True)
    used = []

    def counting_checkpoint(fn, *args):
        used.append(True)
        return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)

    ckpt.checkpoint_fn = counting_checkpoint
    ckpt.load_state_dict(plain.state_dict())
    batch = make_batch(2, 0)
    for model in (plain, ckpt):
        carry = initial_carry(model, 2, 'cpu')
        _, out = act_step(model, carry, batch, training=False)
        out['logits'].square().mean().backward()
    assert len(used) == ckpt.config.L_cycles + 1    # each call of the gradient cycle on its own
    for a, b in zip(plain.main_parameters(), ckpt.main_parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)


# ---- ACT ------------------------------------------------------------------------------

def test_initial_carry_is_zero_and_all_halted():
    cfg = TRMConfig(**TINY)
    carry = initial_carry(cfg, 3, 'cpu')
    assert carry['halted'].all() and carry['halted'].dtype == torch.bool
    assert carry['z_H'].shape == (3, 83, 32) and not carry['z_H'].any()
    assert carry['steps'].dtype == torch.int32 and carry['inputs'].dtype == torch.int32
    assert carry['puzzle_identifiers'].shape == (3,)


def test_halted_rows_are_replaced_and_reset_others_continue():
    model = tiny()
    old_batch, new_batch = make_batch(4, 1), make_batch(4, 2)
    carry, _ = act_step(model, initial_carry(model, 4, 'cpu'), old_batch, training=False)
    carry, _ = act_step(model, carry, old_batch, training=False)
    carry['halted'] = torch.tensor([True, False, True, False])
    before = {k: v.clone() for k, v in carry.items()}

    new, out = act_step(model, carry, new_batch, training=False)

    reset = before['halted']
    for key in ('inputs', 'labels', 'puzzle_identifiers'):
        assert torch.equal(new[key][reset], new_batch[key][reset])
        assert torch.equal(new[key][~reset], before[key][~reset])
    assert new['steps'].tolist() == [1, 3, 1, 3]
    z_H = torch.where(reset.view(-1, 1, 1), model.H_init, before['z_H'])
    z_L = torch.where(reset.view(-1, 1, 1), model.L_init, before['z_L'])
    inputs = torch.where(reset.view(-1, 1), new_batch['inputs'], before['inputs'])
    expected, logits, _, _ = model({'z_H': z_H, 'z_L': z_L}, inputs, new['puzzle_identifiers'])
    assert torch.equal(new['z_H'], expected['z_H']) and torch.equal(new['z_L'], expected['z_L'])
    assert torch.equal(out['logits'], logits)
    assert not new['z_H'].requires_grad and not new['z_L'].requires_grad


def test_batch_dtypes_follow_the_carry():
    model = tiny()
    batch = {k: v.long() for k, v in make_batch(2, 0).items()}
    new, _ = act_step(model, initial_carry(model, 2, 'cpu'), batch, training=False)
    assert new['inputs'].dtype == torch.int32 and new['labels'].dtype == torch.int32


def test_eval_halts_only_at_max_steps_even_when_q_says_halt():
    model = tiny(halt_max_steps=4)
    set_q_bias(model, 5.0, -5.0)
    carry, batch = initial_carry(model, 3, 'cpu'), make_batch(3, 0)
    for step in range(1, 5):
        carry, _ = act_step(model, carry, batch, training=False)
        assert carry['steps'].tolist() == [step] * 3
        assert carry['halted'].tolist() == [step == 4] * 3


def test_eval_can_recurse_deeper_than_training_without_resetting_rows():
    model = tiny(halt_max_steps=2)
    carry, batch = initial_carry(model, 3, 'cpu'), make_batch(3, 0)
    deep, states = carry, []
    for step in range(1, 5):
        deep, _ = act_step(model, deep, batch, training=False, max_steps=4)
        assert deep['steps'].tolist() == [step] * 3 and deep['halted'].tolist() == [step == 4] * 3
        states.append(deep['z_H'])
    # The first two steps are the trained depth's; steps 3 and 4 go on from there, not from H_init.
    for step in range(2):
        carry, _ = act_step(model, carry, batch, training=False)
        torch.testing.assert_close(carry['z_H'], states[step])
    again, _ = act_step(model, carry, batch, training=False)   # as trained: halted rows restart
    assert not torch.equal(again['z_H'], states[2])
    with pytest.raises(ValueError, match='max_steps is for evaluation'):
        act_step(model, carry, batch, training=True, uniforms=torch.zeros(3, 2), max_steps=4)


def test_training_halts_on_positive_q_halt():
    model = tiny(halt_max_steps=4)
    batch, u = make_batch(3, 0), counter_uniforms(0, 0, 3, 2)
    carry, _ = act_step(model, initial_carry(model, 3, 'cpu'), batch, training=True, exploration_prob=0.0, uniforms=u)
    assert not carry['halted'].any()          # q_halt = -5 from the init
    set_q_bias(model, 5.0, -5.0)
    carry, _ = act_step(model, carry, batch, training=True, exploration_prob=0.0, uniforms=u)
    assert carry['halted'].all() and carry['steps'].tolist() == [2, 2, 2]
    # Halted rows restart: steps back to 1.
    carry, _ = act_step(model, carry, batch, training=True, exploration_prob=0.0, uniforms=u)
    assert carry['steps'].tolist() == [1, 1, 1]


def test_training_halts_at_max_steps_without_q():
    model = tiny(halt_max_steps=3)
    carry, batch = initial_carry(model, 2, 'cpu'), make_batch(2, 0)
    for step in range(1, 4):
        carry, _ = act_step(model, carry, batch, training=True, uniforms=counter_uniforms(0, step, 2, 2))
    assert carry['halted'].all() and carry['steps'].tolist() == [3, 3]


def test_exploration_min_steps_bounds_and_coverage():
    top = 1 - 2.0 ** -24
    u = torch.tensor([[0.0, 0.0], [0.05, top], [0.2, 0.5], [0.0999, 0.5]])
    assert exploration_min_steps(u, 0.1, 16).tolist() == [2, 16, 0, 9]
    u = counter_uniforms(3, 0, 4000, 2)
    m = exploration_min_steps(u, torch.tensor(0.5), 16)
    explored = m[m > 0]
    assert explored.min() == 2 and explored.max() == 16
    assert set(explored.tolist()) == set(range(2, 17))
    assert abs((m > 0).float().mean().item() - 0.5) < 0.05


def test_exploring_rows_halt_exactly_at_their_minimum():
    model = tiny(halt_max_steps=6)
    set_q_bias(model, 5.0, -5.0)              # q says "halt" every step
    # u0 = 0 explores; u1 picks minimum steps 2, 4, 6; the last row does not explore.
    u = torch.tensor([[0.0, 0.0], [0.0, 0.45], [0.0, 0.99], [0.9, 0.0]])
    assert exploration_min_steps(u, 0.1, 6).tolist() == [2, 4, 6, 0]
    carry, batch = initial_carry(model, 4, 'cpu'), make_batch(4, 0)
    first_halt = [None] * 4
    for step in range(1, 7):
        carry, _ = act_step(model, carry, batch, training=True, exploration_prob=torch.tensor(0.1), uniforms=u)
        for r in range(4):
            if first_halt[r] is None and carry['halted'][r]:
                first_halt[r] = step
    assert first_halt == [2, 4, 6, 1]


def test_exploration_prob_decays_linearly_for_int_and_tensor_steps():
    for step, expected in ((0, 0.1), (50, 0.055), (100, 0.01), (150, 0.01)):
        assert exploration_prob_at(step, 0.1, 0.01, 100) == pytest.approx(expected)
        t = exploration_prob_at(torch.tensor(step), 0.1, 0.01, 100)
        assert t.dim() == 0 and t.item() == pytest.approx(expected)


def test_training_requires_uniforms():
    model = tiny()
    with pytest.raises(ValueError, match='uniforms'):
        act_step(model, initial_carry(model, 1, 'cpu'), make_batch(1, 0), training=True)


def test_q_continue_branch_halts_on_comparison_and_sets_target():
    model = tiny(no_ACT_continue=False, halt_max_steps=3)
    batch, u = make_batch(2, 0), torch.full((2, 2), 0.9)
    set_q_bias(model, 1.0, 2.0)               # q_halt > 0 but below q_continue: keep going
    calls = count_calls(model)
    carry, out = act_step(model, initial_carry(model, 2, 'cpu'), batch, training=True, uniforms=u)
    assert not carry['halted'].any()
    assert len(calls) == 2 * (2 * 3)         # the step plus the target's extra forward
    _, metrics = loss_and_metrics(carry, out, model.config)
    assert metrics['q_continue_loss'] > 0
    torch.testing.assert_close(out['target_q_continue'], torch.sigmoid(torch.tensor([2.0, 2.0])))
    carry, _ = act_step(model, carry, batch, training=True, uniforms=u)
    carry, out = act_step(model, carry, batch, training=True, uniforms=u)
    # After the last step the target is the next q_halt alone.
    torch.testing.assert_close(out['target_q_continue'], torch.sigmoid(torch.tensor([1.0, 1.0])))
    set_q_bias(model, 2.0, 1.0)
    carry, _ = act_step(model, carry, batch, training=True, uniforms=u)
    assert carry['halted'].all() and carry['steps'].tolist() == [1, 1]
    _, out = act_step(model, carry, batch, training=False)
    assert 'target_q_continue' not in out


# ---- counter-based RNG ----------------------------------------------------------------

def test_counter_uniforms_deterministic_and_tensor_step():
    a = counter_uniforms(7, 123, 64, 2)
    assert a.dtype == torch.float32 and a.shape == (64, 2)
    assert torch.equal(a, counter_uniforms(7, torch.tensor(123), 64, 2))
    assert torch.equal(a[:10], counter_uniforms(7, 123, 10, 2))
    assert not torch.equal(a, counter_uniforms(7, 124, 64, 2))
    assert not torch.equal(a, counter_uniforms(8, 123, 64, 2))
    assert not torch.equal(a[:, 0], a[:, 1])
    big = counter_uniforms(1, 2 ** 40 + 5, 4, 2)
    assert not torch.equal(big, counter_uniforms(1, 5, 4, 2))


def test_counter_uniforms_are_roughly_uniform():
    u = torch.cat([counter_uniforms(0, s, 1000, 2) for s in range(10)])
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.01
    assert abs(u.var().item() - 1 / 12) < 0.003
    hist = torch.histc(u, bins=10, min=0, max=1)
    assert (hist - 2000).abs().max() < 200


def _python_uniform(seed, step, row, col):
    """The same hash on Python ints: the definition the tensor version must reproduce exactly."""
    mask = (1 << 31) - 1

    def mix(x):
        x ^= x >> 16
        x = (x * 0x2C1B3C6D) & mask
        x ^= x >> 15
        x = (x * 0x297A2D39) & mask
        return x ^ (x >> 16)

    key = mix((seed & mask) ^ 0x5851F42D)
    for part in ((seed >> 31) & mask, step & mask, (step >> 31) & mask):
        key = mix(key ^ part)
    h = mix(mix(mix(key ^ mix(col + 1)) ^ row))
    return (h >> 7) / 2 ** 24


def test_counter_uniforms_match_the_integer_definition():
    for seed, step in ((0, 0), (12345, 2 ** 33 + 17)):
        u = counter_uniforms(seed, step, 5, 3)
        expected = [[_python_uniform(seed, step, r, c) for c in range(3)] for r in range(5)]
        assert u.tolist() == expected


def test_counter_uniforms_pinned_values():
    # A resumed run must draw what the original drew: these numbers may never change.
    expected = torch.tensor([[0.23092377185821533, 0.0648009181022644], [0.2798996567726135, 0.3403458595275879]])
    assert torch.equal(counter_uniforms(0, 0, 2, 2), expected)
