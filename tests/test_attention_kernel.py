"""xla.attention_kernel: self-attention as fused Pallas TPU kernels (trm_spmd/runtime/attention_kernel.py).

The kernels' arithmetic runs here in JAX's interpret mode on the CPU against attention
computed plainly; the torch side (the model's layout, the block table and bias made from the
mask, manual sharding, autograd) runs on 8 virtual XLA devices with the kernel call replaced
by the same arithmetic in torch; lowering for a TPU needs no TPU, and libtpu compiles the
kernels for a v4 chip without one. What only a TPU shows (the kernels' speed) is
benchmarks/attention.py's bound until a TPU measures it.
"""

import os
import platform
import sys

import numpy as np
import pytest
import torch

from trm_spmd.config import ConfigError, load_config, validate
from trm_spmd.errors import UserError
from trm_spmd.model.attention_mask import attention_mask

from conftest import REPO, UPDATE_IS_GRADIENT, one_train_step, random_host_batch

jax = pytest.importorskip('jax', reason='jax comes with requirements.lock (Linux x86_64)')
jnp = jax.numpy
kernel = pytest.importorskip('trm_spmd.runtime.attention_kernel')


def heads(t, d):
    """[B, L, H x d] -> [B, H, L, d]."""
    return t.reshape(t.shape[0], t.shape[1], -1, d).transpose(0, 2, 1, 3)


def plain(q, k, v, mask, d):
    """softmax(q k^T / sqrt(d), masked) v of [B, L, H x d] by heads of d, in float32."""
    q, k, v = (heads(t, d) for t in (q, k, v))
    s = jnp.einsum('bhld,bhmd->bhlm', q, k, preferred_element_type=jnp.float32) * d ** -0.5
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
    out = jnp.einsum('bhlm,bhmd->bhld', jax.nn.softmax(s, -1).astype(v.dtype), v, preferred_element_type=jnp.float32)
    return out.transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[2], -1).astype(v.dtype)


def kernel_operands(mask, length):
    """(table, bias) of a boolean [L, L] numpy mask or None, as the kernels take them."""
    if mask is None:
        blocks = kernel.blocks_of(length)
        return jnp.ones(blocks * blocks, jnp.int32), None
    full = kernel.padded_mask(mask, length)
    return jnp.asarray(kernel.table_of(full)), jnp.asarray(kernel.bias_layout(np.where(full.T, 0.0, -np.inf), length))


def through_kernels(q, k, v, dout, mask, d):
    """(out, (dq, dk, dv)) of [B, L, H x d] by the kernels in interpret mode."""
    table, bias = kernel_operands(mask, q.shape[1])
    qt, kt, vt, dot = (t.transpose(0, 2, 1) for t in (q, k, v, dout))   # the kernels' [B, H x d, L]
    ot, lse = kernel.forward(qt, kt, vt, table, d, bias, interpret=True)
    grads = kernel.backward(qt, kt, vt, table, dot, ot, lse, d, bias, interpret=True)
    return ot.transpose(0, 2, 1), tuple(g.transpose(0, 2, 1) for g in grads)


def operands(batch, length, width, dtype):
    keys = jax.random.split(jax.random.key(0), 4)
    return [jax.random.normal(key, (batch, length, width)).astype(dtype) for key in keys]


# (positions, heads x width, mask): Sudoku's 97 (shorter than a block) in two groups of two
# heads; 272 (a short last block) with a block-sparse window; four heads of 16 in one group
# narrower than the lanes.
@pytest.mark.parametrize('length,width,d,mask', [
    (97, 256, 64, None), (272, 128, 64, attention_mask('window', 256, 16, 2).numpy()), (200, 64, 16, None)])
def test_forward_and_gradients_match_plain_attention_in_float32(length, width, d, mask):
    q, k, v, dout = operands(2, length, width, jnp.float32)
    out, grads = through_kernels(q, k, v, dout, mask, d)
    want, vjp = jax.vjp(lambda *a: plain(*a, mask, d), q, k, v)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    for got, expected in zip(grads, vjp(dout)):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(jnp.abs(expected).max()))


def test_masked_blocks_are_skipped_and_the_window_mask_skips_most():
    mask = attention_mask('window', 900, 16, 2).numpy()
    table, _ = kernel_operands(mask, 916)
    assert table.shape == (64,) and int(table.sum()) < 64
    # The prefix's block reads every key; a cell block its neighbouring rows of cells and the prefix.
    grid = np.asarray(table).reshape(8, 8)
    assert grid[0].all() and grid[:, 0].all() and grid[7, 2] == 0


def test_bfloat16_stays_within_its_rounding_of_float32():
    q, k, v, dout = operands(1, 130, 128, jnp.float32)
    wide, _ = through_kernels(q, k, v, dout, None, 64)
    narrow, _ = through_kernels(*(t.astype(jnp.bfloat16) for t in (q, k, v, dout)), None, 64)
    assert narrow.dtype == jnp.bfloat16
    np.testing.assert_allclose(narrow.astype(jnp.float32), wide, atol=3e-2)


def test_lengths_over_the_limit_and_heads_across_lane_groups_are_refused():
    q = jnp.zeros((1, 128, kernel.MAX_LENGTH + 1), jnp.float32)
    with pytest.raises(ValueError, match='L up to 4096'):
        kernel.forward(q, q, q, jnp.ones(1, jnp.int32), 64, interpret=True)
    for width, d in ((384, 96), (256, 256)):
        with pytest.raises(ValueError, match='heads of a width dividing 128'):
            kernel.lane_groups(width, d)


def test_lowering_for_a_tpu_needs_no_tpu():
    for kind in ('forward', 'dq', 'dkv'):
        for masked in (False, True):
            assert 'tpu_custom_call' in str(kernel.lowered_for_tpu(kind, 2, 200, 256, 64, masked))


@pytest.mark.slow
def test_libtpu_compiles_the_kernels_for_a_v4_chip(tmp_path):
    # Mosaic's rules (block shapes, a short last block, 20-lane slices) are libtpu's to judge:
    # the benchmark compiles the three kernels for 916 positions under the maze's window mask.
    if sys.platform != 'linux' or platform.machine() != 'x86_64':
        pytest.skip(f'libtpu is published for Linux x86_64 only, not {sys.platform} {platform.machine()}')
    from conftest import run_in_subprocess
    done = run_in_subprocess([os.path.join(REPO, 'benchmarks', 'attention.py'), '--config=configs/maze.py:sparse_window',
                              '--rows_per_chip=1', f'--out={tmp_path}'], devices=4)
    assert done.returncode == 0, done.stderr[-3000:]
    kernels = [line for line in done.stdout.splitlines() if ' kernels ' in line]
    assert len(kernels) == 2 and all('a bound, not a measurement); Mosaic compiled them' in line for line in kernels)
    assert '(3 calls' in kernels[1] and '53% of the tiles' in kernels[1]


def test_roofline_counts_each_kernels_products_and_bytes():
    batch, length, width = 4, 256, 512                                       # 8 heads of 64, 2 blocks
    x, row, table = (batch, width, length), (batch, 4, 2, length), (4,)
    calls = [([x, row], [table, x, x, x]),                                   # forward
             ([x, row], [table, x, x, x, x, x, row]),                        # dq (and delta)
             ([x, x], [table, x, x, x, x, row, row])]                        # dk, dv
    tile = 2 * 128 * 128 * 128                                               # a head's product reads 128 lanes
    values, rows = batch * length * width * 2, batch * 8 * length * 4
    tiles = batch * 8 * 4
    assert kernel.call_figures(*calls[0]) == (2 * tiles * tile, 4 * values + rows + 16)
    assert kernel.call_figures(*calls[1], visible=0.5) == (3 * tiles // 2 * tile, 6 * values + 2 * rows + 16)
    assert kernel.call_figures(*calls[2]) == (4 * tiles * tile, 6 * values + 2 * rows + 16)
    masked_forward = ([x, row], [table, x, x, x, (2, 256, 128)])
    assert kernel.call_figures(*masked_forward)[0] == 2 * tiles * tile
    bound = kernel.roofline(calls, 'tpu-v4')
    assert bound['calls'] == 3 and bound['roofline_seconds'] == pytest.approx((2 + 3 + 4) * tiles * tile / 275e12)
    assert kernel.is_attention_call(calls[1][1]) and not kernel.is_attention_call([(8, 97, 512), (1024, 97)])
    assert kernel.visible_tiles(None, 916) == 1.0
    assert kernel.visible_tiles(attention_mask('window', 900, 16, 2).numpy(), 916) < 0.6


# ---- configuration ----------------------------------------------------------------------
def maze(**overrides):
    config = load_config(os.path.join(REPO, 'configs/maze.py'))
    config.update_from_flattened_dict({'xla.attention_kernel': True, **overrides})
    return config


@pytest.mark.parametrize('overrides,message', [
    ({'model.mlp_t': True}, 'needs model.mlp_t=False'),
    ({'backend': 'native'}, 'needs backend xla'),
])
def test_settings_the_kernel_cannot_serve_are_refused(overrides, message):
    validate(maze())
    with pytest.raises(ConfigError, match=message):
        validate(maze(**overrides))


def test_devices_other_than_a_tpu_refuse_it_in_one_line():
    from trm_spmd.runtime.native import NativeRuntime
    from trm_spmd.runtime.xla import XlaRuntime
    with pytest.raises(UserError, match='runs Pallas kernels on a TPU; this run\'s devices are CPU'):
        XlaRuntime().attention_kernel()
    with pytest.raises(UserError, match='the native backend has none'):
        NativeRuntime().attention_kernel()


# ---- the torch side on 8 XLA devices ------------------------------------------------------
def stand_in(runtime, kind, head_dim, masked, inputs, shapes, dtypes):
    """The kernels' outputs computed plainly in torch on one chip's tensors [B, H x d, L] (all
    tiles of the table at once)."""
    table, q, k, v = inputs[:4]
    bias = inputs[4] if masked else None
    batch, width, length = q.shape
    blocks = kernel.blocks_of(length)

    def split(t):   # [B, H x d, L] -> [B, H, L, d] float32
        return t.float().view(batch, -1, head_dim, length).transpose(2, 3)

    def join(t, dtype):
        return t.transpose(2, 3).reshape(batch, width, length).to(dtype)

    q, k, v = split(q), split(k), split(v)
    visible = table.view(blocks, blocks).repeat_interleave(kernel.BLOCK, 0).repeat_interleave(kernel.BLOCK, 1)
    s = torch.einsum('bhqd,bhkd->bhqk', q, k) * head_dim ** -0.5
    s = s.masked_fill(visible[:length, :length] == 0, float('-inf'))
    if masked:   # [blocks, P (keys), query block] -> [queries, keys]
        s = s + bias.permute(1, 0, 2).reshape(bias.shape[1], -1)[:length, :length].t().float()
    if kind == 'forward':
        lse = torch.logsumexp(s, dim=-1)
        return [join(torch.einsum('bhqk,bhkd->bhqd', torch.exp(s - lse[..., None]), v), dtypes[0]),
                lse.reshape(shapes[1])]
    dout = split(inputs[-3])
    if kind == 'dq':   # dO, O, lse; delta formed here
        lse = inputs[-1].view(batch, -1, length, 1)
        delta = (dout * split(inputs[-2])).sum(-1, keepdim=True)
    else:              # dO, lse, delta
        lse, delta = (t.view(batch, -1, length, 1) for t in inputs[-2:])
    p = torch.exp(s - lse)
    ds = p * (torch.einsum('bhqd,bhkd->bhqk', dout, v) - delta) * head_dim ** -0.5
    if kind == 'dq':
        return [join(torch.einsum('bhqk,bhkd->bhqd', ds, k), dtypes[0]), delta.reshape(shapes[1])]
    return [join(torch.einsum('bhqk,bhqd->bhkd', ds, q), dtypes[0]),
            join(torch.einsum('bhqk,bhqd->bhkd', p, dout), dtypes[1])]


def _one_update(kernel_on, monkeypatch, mask='full'):
    from trm_spmd.runtime import xla_attention
    config = load_config(os.path.join(REPO, 'configs/maze.py:runlocal'))
    config.update_from_flattened_dict({'xla.attention_kernel': kernel_on, 'model.attention_impl': 'dense',
                                       'model.attention_mask': mask, 'model.attention_window': 1,
                                       'data.global_batch_size': 16, **UPDATE_IS_GRADIENT})
    monkeypatch.setattr(xla_attention, 'custom_call', stand_in)

    def cpu_runs_the_stand_in(runtime):   # never a TPU kernel
        runtime.trace_only = True

    return one_train_step(config, random_host_batch(config, 16), cpu_runs_the_stand_in)


@pytest.mark.slow
@pytest.mark.parametrize('mask', ['full', 'window'])
def test_a_step_through_the_kernel_path_updates_as_the_plain_model(monkeypatch, mask):
    before, plain_after, plain_proto = _one_update(False, monkeypatch, mask)
    start, kernel_after, proto = _one_update(True, monkeypatch, mask)
    # Each chip works on its own examples behind manual sharding; nothing of it in the plain step.
    assert b'SPMDFullToShardShape' in proto and b'SPMDFullToShardShape' not in plain_proto
    for name, p in plain_after.items():
        torch.testing.assert_close(start[name], before[name], rtol=0, atol=0)
        delta, delta_kernel = p - before[name], kernel_after[name] - before[name]
        if 'qkv_proj' in name:
            assert delta.abs().max() > 0, name
        torch.testing.assert_close(delta_kernel, delta, rtol=1e-4, atol=1e-4 * float(delta.abs().max()))
