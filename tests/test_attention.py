"""model.attention_impl: the blockwise attention (trm_spmd/model/attention.py) computes what the dense one
does, with a mask skips the blocks it hides, and on the SPMD path compiles once and runs on the device."""

import os

import pytest
import torch

from trm_spmd import tasks
from trm_spmd.config import load_config
from trm_spmd.model import TRM, TRMConfig
from trm_spmd.model import attention
from trm_spmd.model.attention_mask import attention_mask
from trm_spmd.train.loop import train_and_evaluate

from conftest import (REPO, UPDATE_IS_GRADIENT, assert_compiled_once_on_the_device, one_train_step,
                      optimization_barriers, random_host_batch)


def operands(length, batch=2, heads=3, dim=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, length, dim, generator=generator, requires_grad=True) for _ in range(4)]


def assert_blockwise_matches_dense(length, mask, block, span=0):
    q, k, v, dout = operands(length)
    plan = attention.schedule(length, mask, block, span)
    want = attention.dense(q, k, v, mask)
    got = attention.blockwise(q, k, v, mask, plan)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for g, w in zip(torch.autograd.grad(got, (q, k, v), dout), torch.autograd.grad(want, (q, k, v), dout)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4 * float(w.abs().max()))
    return plan


# (length, block, span): one block; ragged blocks, one span per query block; spans of two blocks (online softmax).
@pytest.mark.parametrize('length,block,span', [(97, 128, 0), (97, 32, 0), (97, 16, 32)])
def test_blockwise_equals_dense_in_float32_forward_and_gradients(length, block, span):
    plan = assert_blockwise_matches_dense(length, None, block, span)
    assert plan.pairs_computed == length * length


def test_a_mask_keeps_its_meaning_blockwise():
    assert_blockwise_matches_dense(83, attention_mask('sudoku', 81, 2), 16, 32)


def test_a_window_mask_skips_the_blocks_it_hides():
    mask = attention_mask('window', 900, 16, 2)          # 30x30 mazes, radius 2: 5.9% of pairs kept
    length = mask.shape[0]
    plan = assert_blockwise_matches_dense(length, mask, 64, 128)
    assert plan.pairs_computed < 0.35 * length * length
    # The prefix's block reads every key; a block of cells reads the prefix and its neighbouring rows only.
    first, last = plan.blocks[0], plan.blocks[-1]
    assert sum(s.stop - s.start for s in first.spans) == length and all(s.stop - s.start <= 128 for s in first.spans)
    assert [(s.start, s.stop) for s in last.spans] == [(0, 64), (832, length)]   # rows 27-29 of cells
    assert all(not span.masked for span in attention.schedule(length, None, 64).blocks[0].spans)


def test_bfloat16_products_stay_within_rounding_of_float32():
    q, k, v, dout = operands(97)
    want = attention.dense(q, k, v)
    low = [t.detach().to(torch.bfloat16).requires_grad_(True) for t in (q, k, v)]
    got = attention.blockwise(*low, block=32)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.detach(), rtol=0, atol=3e-2)
    # The backward rounds each probability to bfloat16 once, for dv and the score gradient both:
    # within two bfloat16 steps of the largest gradient (measured: 0.5% to 0.8%, as before).
    wanted = torch.autograd.grad(want, (q, k, v), dout)
    for g, w in zip(torch.autograd.grad(got, low, dout.to(torch.bfloat16)), wanted):
        assert g.dtype == torch.bfloat16
        assert float((g.float() - w).abs().max()) < 2 ** -6 * float(w.abs().max())


def test_a_mask_without_its_schedule_on_a_device_is_refused():
    q, k, v, _ = operands(8)
    mask = torch.ones(8, 8, dtype=torch.bool)
    with pytest.raises(ValueError, match='needs its schedule'):
        attention.blockwise(q, k, v, mask.to('meta'))


# ---- the model and the config --------------------------------------------------------------

SMALL = dict(seq_len=81, hidden_size=32, num_heads=4, expansion=2.0, L_layers=2, H_cycles=1, L_cycles=2,
             mlp_t=False, pos_encodings='rope', puzzle_emb_ndim=32, puzzle_emb_len=2, forward_dtype='float32',
             attention_block=32)


def _step_outputs(cfg):
    torch.manual_seed(0)
    model = TRM(cfg)
    batch = 3
    states = {name: init.expand(batch, cfg.total_len, -1).clone() for name, init in model.initial_states().items()}
    inputs = torch.randint(1, cfg.vocab_size, (batch, cfg.seq_len))
    _, logits, q_halt, _ = model(states, inputs, torch.zeros(batch, dtype=torch.int32))
    (logits.square().mean() + q_halt.sum()).backward()
    return logits, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize('mask', ['full', 'sudoku'])
def test_the_model_trains_the_same_through_either_path(mask):
    dense_logits, dense_grads = _step_outputs(TRMConfig(**SMALL, attention_impl='dense', attention_mask=mask))
    logits, grads = _step_outputs(TRMConfig(**SMALL, attention_impl='blockwise', attention_mask=mask))
    torch.testing.assert_close(logits, dense_logits, rtol=1e-4, atol=1e-5)
    assert grads.keys() == dense_grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, dense_grads[name], rtol=1e-4, atol=1e-4 * float(dense_grads[name].abs().max()))


def test_auto_picks_blockwise_only_where_the_backend_runs_it_faster():
    long = TRMConfig(**SMALL)                                    # 83 positions in blocks of 32
    assert long.with_auto_attention('blockwise').attention_impl == 'blockwise'
    assert long.with_auto_attention('dense').attention_impl == 'dense'
    # One block is faster blockwise too on a TPU: 97 positions, 0.156 against 0.199 ms forward and gradients.
    one_block = TRMConfig(**{**SMALL, 'attention_block': 128})
    assert one_block.with_auto_attention('blockwise').attention_impl == 'blockwise'
    chosen = TRMConfig(**SMALL, attention_impl='dense')
    assert chosen.with_auto_attention('blockwise').attention_impl == 'dense'
    assert TRMConfig(**SMALL).attention_path == 'dense' and TRMConfig(**{**SMALL, 'mlp_t': True}).attention_path is None
    assert 'blockwise (32-position blocks' in long.with_auto_attention('blockwise').token_mixing()


def test_runtimes_prefer_dense_on_cpus():
    from trm_spmd.runtime.native import NativeRuntime
    from trm_spmd.runtime.xla import XlaRuntime
    assert NativeRuntime().fast_attention == 'dense' and XlaRuntime().fast_attention == 'dense'


def test_an_old_run_config_without_the_keys_means_auto():
    config = load_config(os.path.join(REPO, 'configs/maze.py'))
    for key in ('attention_impl', 'attention_block'):
        config.model.unlock()
        del config.model[key]
    cfg = TRMConfig.from_config(config, vocab_size=6, seq_len=900)
    assert cfg.attention_impl == 'auto' and cfg.attention_block == attention.BLOCK


# ---- on the SPMD path ------------------------------------------------------------------

@pytest.mark.slow
def test_the_blockwise_step_compiles_once_and_runs_on_the_device(tmp_path, capsys):
    config = load_config(f'{REPO}/configs/maze.py:sparse_window,runlocal')
    config.update_from_flattened_dict({'model.attention_impl': 'blockwise', 'model.attention_block': 16,
                                       'model.attention_window': 1, 'train.total_steps': 10,
                                       'train.eval_every_steps': 5, 'train.log_every_steps': 1,
                                       'checkpoint.keep_best': 0})
    train_and_evaluate(config, str(tmp_path))
    assert 'token mixing: self-attention, blockwise (16-position blocks' in capsys.readouterr().out
    assert_compiled_once_on_the_device(str(tmp_path), 10)


def _blockwise_update(recompute):
    config = load_config(f'{REPO}/configs/maze.py:runlocal')
    config.update_from_flattened_dict({'model.attention_impl': 'blockwise', 'model.attention_block': 16,
                                       'xla.attention_recompute': recompute, 'data.global_batch_size': 16,
                                       **UPDATE_IS_GRADIENT})
    return config, one_train_step(config, random_host_batch(config, 16))


@pytest.mark.slow
def test_the_recompute_barrier_changes_when_not_what_the_backward_computes():
    _, (before, plain, plain_proto) = _blockwise_update(False)
    config, (start, forced, proto) = _blockwise_update(True)
    # One barrier per query block of every attention's forward, one per attention of the gradient
    # cycle (its L_cycles + 1 network calls) for its backward; none without.
    m = config.model
    blocks = len(attention.schedule(TRMConfig.from_config(config, **tasks.sizes(config)).total_len, None,
                                    m.attention_block).blocks)
    grad_cycle = (m.L_cycles + 1) * m.L_layers
    assert blocks > 1
    assert optimization_barriers(plain_proto) == 0
    assert optimization_barriers(proto) == m.H_cycles * grad_cycle * blocks + grad_cycle
    for name, p in plain.items():
        torch.testing.assert_close(start[name], before[name], rtol=0, atol=0)
        assert (p - before[name]).abs().max() > 0, name
        torch.testing.assert_close(forced[name], p, rtol=1e-5, atol=1e-6)
