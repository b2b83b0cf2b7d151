"""xla.attention_kernel: self-attention as fused Pallas TPU kernels (trm_spmd/runtime/attention_kernel.py).

The kernels' arithmetic runs here in JAX's interpret mode on the CPU against attention
computed plainly; the torch side (layout, padding, the block table and bias made from the
mask, manual sharding, autograd) runs on 8 virtual XLA devices with the kernel call replaced
by the same arithmetic in torch; lowering for a TPU needs no TPU. What only a TPU shows (the
kernels' speed) is benchmarks/attention.py's.
"""

import os

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


def plain(q, k, v, mask):
    """softmax(q k^T / sqrt(d), masked) v of [N, L, d] in float32."""
    s = jnp.einsum('nld,nmd->nlm', q, k, preferred_element_type=jnp.float32) * q.shape[-1] ** -0.5
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
    return jnp.einsum('nlm,nmd->nld', jax.nn.softmax(s, -1).astype(v.dtype), v,
                      preferred_element_type=jnp.float32).astype(v.dtype)


def kernel_operands(mask, length):
    """(table, bias) of a boolean [L, L] numpy mask or None, as the kernels take them."""
    if mask is None:
        blocks = kernel.padded_length(length) // kernel.BLOCK
        return jnp.ones(blocks * blocks, jnp.int32), None
    full = kernel.padded_mask(mask, length)
    return jnp.asarray(kernel.table_of(full)), jnp.asarray(kernel.bias_layout(np.where(full.T, 0.0, -np.inf)))


def through_kernels(q, k, v, dout, mask):
    """(out, (dq, dk, dv)) of [N, L, d] by the kernels in interpret mode."""
    length = q.shape[1]
    padded = kernel.padded_length(length)

    def pad(t):
        return jnp.pad(t, ((0, 0), (0, padded - length), (0, 0)))

    table, bias = kernel_operands(mask, length)
    qt, kp, vp = pad(q).transpose(0, 2, 1), pad(k), pad(v)
    ot, lse = kernel.forward(qt, kp, vp, table, bias, length, interpret=True)
    out = ot.transpose(0, 2, 1)[:, :length]
    delta = jnp.sum(dout.astype(jnp.float32) * out.astype(jnp.float32), -1)
    delta = jnp.pad(delta, ((0, 0), (0, padded - length)))[:, None, :]
    dqt, dk, dv = kernel.backward(qt, kp, vp, table, pad(dout).transpose(0, 2, 1), lse, delta, bias, length,
                                  interpret=True)
    return out, (dqt.transpose(0, 2, 1)[:, :length], dk[:, :length], dv[:, :length])


def operands(n, length, d, dtype):
    keys = jax.random.split(jax.random.key(0), 4)
    return [jax.random.normal(key, (n, length, d)).astype(dtype) for key in keys]


# (positions, mask): one padded block; 916 = the maze's 16 + 900 under its 5x5 window (block-sparse).
@pytest.mark.parametrize('length,mask', [(97, None), (272, attention_mask('window', 256, 16, 2).numpy())])
def test_forward_and_gradients_match_plain_attention_in_float32(length, mask):
    q, k, v, dout = operands(3, length, 64, jnp.float32)
    out, grads = through_kernels(q, k, v, dout, mask)
    want, vjp = jax.vjp(lambda *a: plain(*a, mask), q, k, v)
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
    q, k, v, dout = operands(1, 130, 64, jnp.float32)
    wide, _ = through_kernels(q, k, v, dout, None)
    narrow, _ = through_kernels(*(t.astype(jnp.bfloat16) for t in (q, k, v, dout)), None)
    assert narrow.dtype == jnp.bfloat16
    np.testing.assert_allclose(narrow.astype(jnp.float32), wide, atol=3e-2)


def test_lengths_over_the_limit_are_refused():
    q = jnp.zeros((1, 64, kernel.MAX_LENGTH + kernel.BLOCK), jnp.float32)
    k = jnp.zeros((1, kernel.MAX_LENGTH + kernel.BLOCK, 64), jnp.float32)
    with pytest.raises(ValueError, match='multiple of 128'):
        kernel.forward(q, k, k, jnp.ones(1, jnp.int32), interpret=True)


def test_lowering_for_a_tpu_needs_no_tpu():
    for kind in ('forward', 'dq', 'dkv'):
        for masked in (False, True):
            assert 'tpu_custom_call' in str(kernel.lowered_for_tpu(kind, 4, 64, 256, 200, masked))


def test_roofline_counts_each_kernels_products_and_bytes():
    n, d, padded = 8, 64, 256
    qt, kv, row, table = (n, d, padded), (n, padded, d), (n, 1, padded), (4,)
    calls = [([qt, row], [table, qt, kv, kv]),                              # forward
             ([qt], [table, qt, kv, kv, qt, row, row]),                      # dq
             ([kv, kv], [table, qt, kv, kv, qt, row, row])]                  # dk, dv
    tile = 2 * 128 * 128 * 128                                               # d = 64 fills half the MXU: as 128
    values = n * padded * d * 2
    assert kernel.call_figures(*calls[0]) == (2 * 4 * n * tile, 4 * values + n * padded * 4 + 16)
    assert kernel.call_figures(*calls[1], visible=0.5) == (3 * 2 * n * tile, 5 * values + 2 * n * padded * 4 + 16)
    assert kernel.call_figures(*calls[2])[0] == 4 * 4 * n * tile
    bound = kernel.roofline(calls, 'tpu-v4')
    assert bound['calls'] == 3 and bound['roofline_seconds'] == pytest.approx((2 + 3 + 4) * 4 * n * tile / 275e12)
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
def stand_in(runtime, kind, length, masked, inputs, shapes, dtypes):
    """The kernels' outputs computed plainly in torch on one chip's tensors (all tiles of the
    table at once)."""
    table, qt, k, v = inputs[:4]
    bias = inputs[4] if masked else None
    n, d, padded = qt.shape
    blocks = padded // kernel.BLOCK
    visible = table.view(blocks, blocks).repeat_interleave(kernel.BLOCK, 0).repeat_interleave(kernel.BLOCK, 1)
    s = torch.einsum('nkd,ndq->nkq', k.float(), qt.float()) * d ** -0.5
    s = s.masked_fill(visible.t() == 0, float('-inf'))
    s = s + bias.float() if masked else s.masked_fill(torch.arange(padded, device=s.device)[:, None] >= length,
                                                      float('-inf'))
    if kind == 'forward':
        lse = torch.logsumexp(s, dim=1, keepdim=True)
        ot = torch.einsum('nkd,nkq->ndq', v.float(), torch.exp(s - lse))
        return [ot.to(dtypes[0]), lse]
    dot, lse, delta = (t.float() for t in inputs[-3:])
    p = torch.exp(s - lse)
    ds = p * (torch.einsum('nkd,ndq->nkq', v.float(), dot) - delta) * d ** -0.5
    if kind == 'dq':
        return [torch.einsum('nkd,nkq->ndq', k.float(), ds).to(dtypes[0])]
    return [torch.einsum('nkq,ndq->nkd', ds, qt.float()).to(dtypes[0]),
            torch.einsum('nkq,ndq->nkd', p, dot).to(dtypes[1])]


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
