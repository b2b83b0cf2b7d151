"""URM: its ConvSwiGLU, its loops against a written-out reference, truncated backpropagation
through loops, its one-state ACT carry, and its train step on 8 XLA devices."""

import json
import os

import pytest
import torch
import torch.nn.functional as F

from trm_spmd.errors import UserError
from trm_spmd.model import (URM, TRMConfig, act_step, build_model, counter_uniforms, initial_carry,
                            loss_and_metrics, trainable_param_count)
from trm_spmd.model.layers import ConvSwiGLU, DepthwiseConv, rms_norm

from conftest import REPO
from test_model import make_batch   # the same 81-position batches as the TRM tests

SEQ = 81
TINY = dict(family='urm', mlp_t=False, pos_encodings='rope', hidden_size=32, num_heads=4, expansion=2.0,
            L_layers=2, H_cycles=2, L_cycles=3, puzzle_emb_ndim=32, puzzle_emb_len=1, halt_max_steps=4,
            forward_dtype='float32')


def tiny(**overrides):
    torch.manual_seed(0)
    return URM(TRMConfig(**{**TINY, **overrides}))


def reference_conv(x, weight, bias):
    """The reference's ConvSwiGLU convolution: nn.Conv1d(C, C, 2, padding=1, groups=C) on
    [B, C, L], truncated to L positions."""
    conv = torch.nn.Conv1d(x.shape[-1], x.shape[-1], 2, padding=1, groups=x.shape[-1], bias=True)
    conv = conv.to(x.dtype)
    with torch.no_grad():
        conv.weight.copy_(weight)
        conv.bias.copy_(bias)
    return conv(x.transpose(1, 2))[..., :x.shape[1]].transpose(1, 2)


def reference_loops(model, hidden, x, loops):
    """URM's inner loop written out from its definition: inject the input, then per layer
    h = rms(h + attn(h)); h = rms(h + down(silu(conv(silu(gate) * up))))."""
    rope = (model.rope_cos, model.rope_sin)
    for _ in range(loops):
        hidden = hidden + x
        for block in model.layers:
            hidden = rms_norm(hidden + block.self_attn(hidden, rope), 1e-5)
            gate, up = F.linear(hidden, block.mlp.gate_up_proj.weight).chunk(2, dim=-1)
            conv = reference_conv(F.silu(gate) * up, block.mlp.dwconv.weight, block.mlp.dwconv.bias)
            hidden = rms_norm(hidden + F.linear(F.silu(conv), block.mlp.down_proj.weight), 1e-5)
    return hidden


def count_loops(model):
    """[grad_enabled flag per loop] (the first layer runs once per loop)."""
    loops = []
    model.layers[0].register_forward_hook(lambda *_: loops.append(torch.is_grad_enabled()))
    return loops


# ---- ConvSwiGLU ---------------------------------------------------------------------

def test_depthwise_conv_is_the_references_conv1d():
    torch.manual_seed(0)
    conv = DepthwiseConv(48)
    assert conv.weight.shape == (48, 1, 2) and conv.bias.shape == (48,)
    # nn.Conv1d's default init: uniform in +-1/sqrt(fan_in), fan_in = 1 channel x 2 taps.
    bound = 2 ** -0.5
    assert conv.weight.abs().max() <= bound and conv.weight.abs().max() > 0.9 * bound
    x = torch.randn(3, 20, 48) * 3
    torch.testing.assert_close(conv(x), reference_conv(x, conv.weight, conv.bias), rtol=1e-6, atol=1e-6)
    # In bfloat16, bit for bit: products and sum in float32, one rounding, as the convolution.
    xb = x.to(torch.bfloat16)
    expected = reference_conv(xb, conv.weight.to(torch.bfloat16), conv.bias.to(torch.bfloat16))
    assert torch.equal(conv(xb), expected)
    # A float32 sum that lands on a tie between two bfloat16 values: the bias, then the taps in
    # order, rounded once, as torch's CPU convolution does on some CPUs (on others, an AMD EPYC
    # among them, its kernels sum the taps first, which rounds this one up to 0.39453125).
    tie = DepthwiseConv(8)
    with torch.no_grad():
        tie.weight[0] = torch.tensor([[0.0128173828125, 0.01556396484375]])
        tie.bias[0] = 0.392578125
    x_tie = torch.randn(1, 2, 8).to(torch.bfloat16)
    x_tie[0, :, 0] = torch.tensor([0.0269775390625, 0.04052734375])
    p0, p1 = (x_tie[0, :, 0].float() * tie.weight[0, 0].bfloat16().float()).unbind()   # exact in float32
    b = tie.bias[0].bfloat16().float()
    assert ((b + p0) + p1).bfloat16().item() == 0.392578125 and (b + (p0 + p1)).bfloat16().item() == 0.39453125
    assert tie(x_tie)[0, 1, 0].item() == 0.392578125
    # Position 0 sees no previous position: w1 * x[0] + b.
    torch.testing.assert_close(conv(x)[:, 0], x[:, 0] * conv.weight[:, 0, 1] + conv.bias)


def test_conv_swiglu_mixes_only_the_previous_position():
    torch.manual_seed(0)
    mlp = ConvSwiGLU(16, 2.0)
    x = torch.randn(1, 10, 16, requires_grad=True)
    mlp(x)[0, 6].sum().backward()
    touched = x.grad[0].abs().sum(-1) > 0
    assert touched.tolist() == [i in (5, 6) for i in range(10)]


# ---- the network --------------------------------------------------------------------

def test_state_layout_and_parameters():
    model = tiny(forward_dtype='bfloat16')
    names = {n for n, _ in model.named_parameters()}
    assert 'init_hidden' not in names and 'init_hidden' in model.state_dict()
    assert model.init_hidden.dtype == torch.bfloat16 and model.init_hidden.shape == (32,)
    assert {'layers.1.self_attn.qkv_proj.weight', 'layers.1.mlp.dwconv.weight', 'layers.1.mlp.dwconv.bias',
            'layers.1.mlp.gate_up_proj.weight', 'layers.1.mlp.down_proj.weight'} <= names
    assert not any(n.startswith('L_level') or 'H_init' in n for n in model.state_dict())
    assert model.config.state_names == ('hidden',) and model.config.total_len == 1 + SEQ
    # The ARC-AGI runs' network (configs/urm.py): 4 layers of attention + ConvSwiGLU at 512.
    arc = TRMConfig(family='urm', mlp_t=False, pos_encodings='rope', L_layers=4, puzzle_emb_len=1,
                    seq_len=900, vocab_size=12)
    layer = 4 * 512 * 512 + 3 * 512 * 1536 + 3 * 1536
    assert trainable_param_count(build_model(arc)) == 4 * layer + 2 * 12 * 512 + 2 * 512 + 2


def test_config_refuses_a_token_mixing_mlp():
    with pytest.raises(UserError, match="model.family='urm' mixes tokens by attention"):
        TRMConfig(**{**TINY, 'mlp_t': True})
    with pytest.raises(UserError, match='model.family'):
        TRMConfig(family='hrm')


def test_loops_match_the_written_out_reference():
    model = tiny()
    batch = make_batch(2, 0)
    x = model.input_embeddings(batch['inputs'], batch['puzzle_identifiers'])
    h0 = torch.randn(2, 1 + SEQ, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_loops(h0, x), reference_loops(model, h0, x, 2 * 3),
                                   rtol=1e-5, atol=1e-5)
        # H_cycles x L_cycles loops in all: (3, 2) and (1, 6) run the same six.
        torch.testing.assert_close(model.forward_loops(h0, x, H_cycles=3, L_cycles=2),
                                   model.forward_loops(h0, x, H_cycles=1, L_cycles=6), rtol=0, atol=0)


def test_act_step_carries_one_hidden_state_and_resets_halted_rows():
    model = tiny()
    carry = initial_carry(model, 4, 'cpu')
    assert set(carry) == {'hidden', 'steps', 'halted', 'inputs', 'labels', 'puzzle_identifiers'}
    old_batch, new_batch = make_batch(4, 1), make_batch(4, 2)
    carry, _ = act_step(model, carry, old_batch, training=False)
    carry['halted'] = torch.tensor([True, False, True, False])
    before = {k: v.clone() for k, v in carry.items()}
    new, out = act_step(model, carry, new_batch, training=False)
    reset = before['halted']
    hidden = torch.where(reset.view(-1, 1, 1), model.init_hidden, before['hidden'])
    inputs = torch.where(reset.view(-1, 1), new_batch['inputs'], before['inputs'])
    with torch.no_grad():
        x = model.input_embeddings(inputs, new['puzzle_identifiers'])
        expected = reference_loops(model, hidden, x, 6)
    torch.testing.assert_close(new['hidden'], expected, rtol=1e-5, atol=1e-5)
    assert new['steps'].tolist() == [1, 2, 1, 2] and not new['hidden'].requires_grad
    logits, q_halt, _ = model.heads(expected)
    torch.testing.assert_close(out['logits'], logits, rtol=1e-5, atol=1e-5)


# ---- truncated backpropagation through loops ---------------------------------------------

def test_only_the_last_outer_cycle_builds_a_graph():
    model = tiny(H_cycles=3, L_cycles=2)
    loops = count_loops(model)
    h0 = torch.randn(2, 1 + SEQ, 32, requires_grad=True)
    x = torch.randn(2, 1 + SEQ, 32, requires_grad=True)
    model.forward_loops(h0, x).square().sum().backward()
    assert loops == [False] * 4 + [True] * 2
    # Nothing flows back through the first 4 loops: not to the state they started from ...
    assert h0.grad is None
    # ... and the input embeddings' gradient is that of the last 2 loops alone, from their start.
    with torch.no_grad():
        start = model.forward_loops(h0, x, H_cycles=1, L_cycles=4)
    x2 = x.detach().clone().requires_grad_()
    model.zero_grad()
    model.forward_loops(start, x2, H_cycles=1, L_cycles=2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)


def test_no_grad_loops_contribute_nothing_to_param_grads():
    model = tiny(H_cycles=2, L_cycles=2)
    h0, x = torch.randn(2, 1 + SEQ, 32), torch.randn(2, 1 + SEQ, 32)
    model.forward_loops(h0, x).square().sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_main_parameters() if p.grad is not None}
    model.zero_grad()
    with torch.no_grad():
        start = model.forward_loops(h0, x, H_cycles=1, L_cycles=2)
    model.forward_loops(start, x, H_cycles=1, L_cycles=2).square().sum().backward()
    assert grads and grads.keys() == {n for n, p in model.named_main_parameters() if p.grad is not None}
    for name, p in model.named_main_parameters():
        if name in grads:
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-6)


def test_one_outer_cycle_backpropagates_into_the_state():
    model = tiny(H_cycles=1)
    h0 = torch.randn(1, 1 + SEQ, 32, requires_grad=True)
    model.forward_loops(h0, torch.randn(1, 1 + SEQ, 32)).sum().backward()
    assert h0.grad is not None and h0.grad.abs().sum() > 0


def test_grad_checkpointing_gives_the_same_gradients():
    plain, ckpt = tiny(), tiny(grad_checkpointing=True)
    used = []

    def counting_checkpoint(fn, *args):
        used.append(True)
        return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)

    ckpt.checkpoint_fn = counting_checkpoint
    batch = make_batch(4, 3)
    grads = []
    for m in (plain, ckpt):
        new, out = act_step(m, initial_carry(m, 4, 'cpu'), batch, training=True,
                            uniforms=counter_uniforms(0, 0, 4, 2))
        loss_and_metrics(new, out, m.config)[0].backward()
        grads.append([p.grad for p in m.main_parameters()])
    assert len(used) == ckpt.config.L_cycles       # each loop of the gradient cycle on its own
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# ---- configs/urm.py against the public scripts -------------------------------------------

# scripts/URM_{arcagi1,arcagi2,sudoku}.sh over config/cfg_pretrain.yaml and config/arch/urm.yaml
# (UbiquantAI/URM 41de2c3), written out independently of the config file.
NETWORK = {'model.family': 'urm', 'model.mlp_t': False, 'model.pos_encodings': 'rope', 'model.hidden_size': 512,
           'model.num_heads': 8, 'model.expansion': 4.0, 'model.L_layers': 4, 'model.H_cycles': 2,
           'model.L_cycles': 6, 'model.puzzle_emb_ndim': 512, 'model.puzzle_emb_len': 1, 'act.halt_max_steps': 16,
           'act.exploration_prob': 0.1, 'loss.type': 'stablemax', 'optim.lr': 1e-4, 'optim.beta1': 0.9,
           'optim.beta2': 0.95, 'optim.warmup_steps': 2000, 'optim.lr_min_ratio': 1.0, 'ema.enabled': True,
           'ema.decay': 0.999}
ARC = {**NETWORK, 'data.task': 'arc', 'data.global_batch_size': 768, 'optim.weight_decay': 0.1,
       'optim.puzzle_emb_lr': 1e-2, 'optim.puzzle_emb_weight_decay': 0.1, 'train.epochs': 200000,
       'train.eval_every_epochs': 2000}
SCRIPTS = {
    'arc1': {**ARC, 'data.arc_source': 'arc1', 'data.path': 'data/arc1concept-aug-1000', 'optim.name': 'adam_atan2'},
    'arc2': {**ARC, 'data.arc_source': 'arc2', 'data.path': 'data/arc2concept-aug-1000', 'optim.name': 'muon',
             'optim.muon_momentum': 0.95, 'optim.muon_ns_steps': 5, 'optim.eps': 1e-8},
    'sudoku': {**NETWORK, 'data.task': 'sudoku', 'data.path': 'data/sudoku-extreme-1k-aug-1000',
               'data.global_batch_size': 128, 'optim.name': 'adam_atan2', 'optim.weight_decay': 1.0,
               'optim.puzzle_emb_lr': 1e-4, 'optim.puzzle_emb_weight_decay': 1.0, 'train.epochs': 50000,
               'train.eval_every_epochs': 2000},
    # No URM script: its network under configs/maze.py's paper recipe.
    'maze': {**NETWORK, 'data.task': 'maze', 'data.path': 'data/maze-30x30-hard-1k-aug-8',
             'data.global_batch_size': 768, 'optim.name': 'adam_atan2', 'optim.weight_decay': 1.0,
             'optim.puzzle_emb_lr': 1e-4, 'train.epochs': 50000, 'train.eval_every_epochs': 5000},
}


@pytest.mark.parametrize('variant', sorted(SCRIPTS))
def test_each_variant_is_its_script(variant, monkeypatch):
    from trm_spmd.config import load_config, validate
    monkeypatch.chdir(REPO)
    config = load_config(f'configs/urm.py:{variant}')
    for key, value in SCRIPTS[variant].items():
        node = config
        for part in key.split('.'):
            node = node[part]
        assert node == (pytest.approx(value) if isinstance(value, float) else value), key
    validate(config, device_count=8)
    validate(config, device_count=32, process_count=8)   # a v4-64
    local = load_config(f'configs/urm.py:{variant},runlocal')
    assert (local.model.family, local.model.H_cycles, local.model.L_cycles, local.model.L_layers) == ('urm', 2, 6, 4)
    assert local.optim.name == config.optim.name and local.data.task == config.data.task
    validate(local, device_count=8)


def test_sudoku_steps_follow_the_scripts_epochs():
    from trm_spmd.config import load_config
    from trm_spmd.train.loop import schedule_steps
    # 50,000 epochs x 1,000 puzzles / 128 = 390,625 updates, evaluated every 2,000 epochs: 25 times.
    assert schedule_steps(load_config(f'{REPO}/configs/urm.py:sudoku'), 1000) == (390625, 15625)


# ---- on the SPMD path -----------------------------------------------------------------

@pytest.mark.slow
def test_urm_with_muon_compiles_once_and_resumes_exactly(tmp_path):
    """The URM train step (ConvSwiGLU's convolution, the no-grad loops) and Muon's
    Newton-Schulz products compile into one graph on 8 XLA devices: nothing recompiles after
    warm-up, no op falls back to the CPU, nothing is read back inside a step. A resume from
    the checkpoint before the last ends with the same weights, Muon and Adam states, EMA and
    carry (the one hidden state of every row) as the straight run."""
    from trm_spmd.config import load_config
    from trm_spmd.train.loop import train_and_evaluate
    from test_lifecycle import assert_resume_is_exact

    def train(workdir):
        config = load_config(f'{REPO}/configs/urm.py:sudoku,runlocal')   # arc2's network and optimizer, 81 cells
        config.update_from_flattened_dict({'optim.name': 'muon', 'train.total_steps': 10,
                                           'train.eval_every_steps': 5, 'train.log_every_steps': 1,
                                           'checkpoint.every_steps': 4, 'checkpoint.keep_best': 0})
        assert config.model.family == 'urm' and config.model.H_cycles == 2
        train_and_evaluate(config, str(workdir))

    train(tmp_path / 'run')
    _, state = assert_resume_is_exact(tmp_path / 'run', tmp_path / 'resumed', 10, train)
    assert state['carry/hidden'].shape == (16, 1 + SEQ, 32)
    assert any(key.endswith('/momentum_buffer') for key in state) and any(key.endswith('/exp_avg') for key in state)
    with open(os.path.join(tmp_path, 'run', 'metrics.jsonl')) as f:
        train = [r for r in map(json.loads, f) if 'train/loss' in r]
    assert [r['step'] for r in train] == list(range(1, 11))
    # Warm-up: the first train step and the first evaluation (step 5), read at step 6.
    assert len({r['xla/uncached_compiles'] for r in train if r['step'] >= 6}) == 1
    assert all(r['xla/cpu_fallback_ops'] == 0 for r in train)
    assert len({r['xla/host_syncs'] for r in train}) == 1
    assert all(torch.isfinite(torch.tensor(r['train/loss'])) for r in train)
    # solve.py rebuilds the run's network from its config.json: a URM, with its EMA weights.
    import numpy as np
    from trm_spmd.solve import build_model as solver_model, load_run, solve
    config, state = load_run(str(tmp_path / 'run'))
    model = solver_model(config, state, SEQ)
    assert isinstance(model, URM) and torch.equal(model.layers[0].mlp.dwconv.bias.detach(),
                                                  torch.from_numpy(np.asarray(state['ema']['layers.0.mlp.dwconv.bias'])))
    tokens, steps, _ = solve(model, np.ones((1, SEQ), np.int32))[0]
    assert tokens.shape == (SEQ,) and 1 <= steps <= 2
