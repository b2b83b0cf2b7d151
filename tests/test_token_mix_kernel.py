"""xla.token_mix_kernel: the token-mixing sublayer as Pallas TPU kernels (trm_spmd/runtime/token_mix_kernel.py).

The kernels' arithmetic runs here in JAX's interpret mode on the CPU against the token mix
computed plainly; the torch side (manual sharding over the mesh, the weight gradients summed
over chips, autograd) runs on 8 virtual XLA devices with the kernel call replaced by the same
arithmetic in torch; lowering and tracing for a TPU need no TPU. What only a TPU shows (the
kernels' speed) is benchmarks/token_mix_kernel.py's.
"""

import os

import numpy as np
import pytest
import torch

from trm_spmd.config import ConfigError, load_config, validate
from trm_spmd.errors import UserError

from conftest import REPO, UPDATE_IS_GRADIENT, one_train_step, random_host_batch

jax = pytest.importorskip('jax', reason='jax comes with requirements.lock (Linux x86_64)')
jnp = jax.numpy
kernel = pytest.importorskip('trm_spmd.runtime.token_mix_kernel')


EPS = 1e-5


def plain(x, w_gate_up, w_down):
    """rms_norm(x + mlp_t(x)) over the positions of x [B, L, D], as model.trm.Block computes it
    (float32 products and norm)."""
    h = jnp.einsum('fl,bld->bfd', w_gate_up, x, preferred_element_type=jnp.float32)
    gate, up = jnp.split(h, 2, axis=1)
    inner = (jax.nn.silu(gate) * up).astype(x.dtype)
    residual = x + jnp.einsum('lf,bfd->bld', w_down, inner, preferred_element_type=jnp.float32)
    return (residual * jax.lax.rsqrt(jnp.mean(residual * residual, axis=1, keepdims=True) + EPS)).astype(x.dtype)


def operands(batch, length, channels, inner, dtype):
    keys = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(keys[0], (batch, length, channels)).astype(dtype)
    w_gate_up = (jax.random.normal(keys[1], (2 * inner, length)) * length ** -0.5).astype(dtype)
    w_down = (jax.random.normal(keys[2], (length, inner)) * inner ** -0.5).astype(dtype)
    dy = jax.random.normal(keys[3], (batch, length, channels)).astype(dtype)
    return x, w_gate_up, w_down, dy


# (batch, channels): two cores and one channel block; one core (odd batch) and two blocks.
@pytest.mark.slow
@pytest.mark.parametrize('batch,channels', [(2, 256), (3, 512)])
def test_forward_and_gradients_match_the_plain_token_mix_in_float32(batch, channels):
    x, w_gate_up, w_down, dy = operands(batch, 97, channels, 512, jnp.float32)
    y = kernel.forward(x, w_gate_up, w_down, EPS, interpret=True)
    np.testing.assert_allclose(y, plain(x, w_gate_up, w_down), rtol=1e-5, atol=1e-5)
    _, vjp = jax.vjp(plain, x, w_gate_up, w_down)
    for got, want in zip(kernel.backward(x, w_gate_up, w_down, dy, EPS, interpret=True), vjp(dy)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(jnp.abs(want).max()))


def test_bfloat16_stays_within_rounding_of_the_float32_result():
    x, w_gate_up, w_down, dy = operands(2, 97, 256, 512, jnp.bfloat16)
    exact = [a.astype(jnp.float32) for a in (x, w_gate_up, w_down, dy)]
    y = kernel.forward(x, w_gate_up, w_down, EPS, interpret=True).astype(jnp.float32)
    want = plain(*exact[:3])
    # bfloat16 keeps 8 bits: a relative 2^-8 of the output's scale, a few roundings deep.
    assert float(jnp.abs(y - want).max()) < 4 * 2 ** -8 * float(jnp.abs(want).max())
    _, vjp = jax.vjp(plain, *exact[:3])
    for got, ref in zip(kernel.backward(x, w_gate_up, w_down, dy, EPS, interpret=True), vjp(exact[3])):
        got = got.astype(jnp.float32)
        assert float(jnp.abs(got - ref).max()) < 4 * 2 ** -8 * float(jnp.abs(ref).max())


@pytest.mark.slow
def test_partial_sums_split_the_examples_between_the_cores():
    x, w_gate_up, w_down, dy = operands(4, 16, 128, 256, jnp.float32)
    _, d_gate_up, d_down = kernel.backward_partials(x, w_gate_up, w_down, dy, EPS, interpret=True)
    assert d_gate_up.shape == (2, 512, 16) and d_down.shape == (2, 16, 256)
    _, vjp = jax.vjp(plain, x[:2], w_gate_up, w_down)   # core 0 holds the first half's sums
    np.testing.assert_allclose(d_gate_up[0], vjp(dy[:2])[1], rtol=1e-4, atol=1e-3)
    assert kernel.partial_sums(4, 128) == 2 and kernel.partial_sums(3, 128) == 1


def test_channels_not_in_blocks_of_128_are_refused():
    x, w_gate_up, w_down, _ = operands(2, 16, 96, 256, jnp.float32)
    with pytest.raises(ValueError, match='multiple of 128'):
        kernel.forward(x, w_gate_up, w_down, EPS, interpret=True)


def test_lowering_for_a_tpu_needs_no_tpu():
    text = str(kernel.lowered_for_tpu('backward', (4, 97, 512), 512, EPS))
    assert text.count('tpu_custom_call') == 1


def test_roofline_figures_of_a_call_count_the_padded_products_and_the_bytes_in_and_out():
    b, length, d, f = 4, 97, 512, 512
    x, wgu, wd = (b, length, d), (2 * f, length), (length, f)
    lanes, rows = 2 * b * d * 128 * f, 2 * b * d * 104 * f    # 97 positions as 128 lanes or 104 rows
    flops, nbytes = kernel.call_figures([x], [x, wgu, wd])
    assert flops == 2 * lanes + rows
    assert nbytes == 2 * (2 * b * length * d) + 2 * (3 * f * length)
    flops, nbytes = kernel.call_figures([x, (2,) + wgu, (2,) + wd], [x, x, wgu, wd])
    assert flops == 5 * lanes + 4 * rows
    assert nbytes == 2 * (3 * b * length * d) + 2 * (3 * f * length) + 4 * 2 * (3 * f * length)


# ---- configuration ----------------------------------------------------------------------
def baseline(**overrides):
    config = load_config(os.path.join(REPO, 'configs/baseline.py'))
    config.update_from_flattened_dict({'xla.token_mix_kernel': True, **overrides})
    return config


@pytest.mark.parametrize('overrides,message', [
    ({'model.mlp_t': False}, 'needs model.mlp_t=True'),
    ({'backend': 'native'}, 'needs backend xla'),
    ({'model.hidden_size': 320}, 'must be a multiple of 128'),
])
def test_settings_the_kernel_cannot_serve_are_refused(overrides, message):
    validate(baseline())
    with pytest.raises(ConfigError, match=message):
        validate(baseline(**overrides))


def test_devices_other_than_a_tpu_refuse_it_in_one_line():
    from trm_spmd.runtime.xla import XlaRuntime
    runtime = XlaRuntime()
    with pytest.raises(UserError, match='runs Pallas kernels on a TPU; this run\'s devices are CPU'):
        runtime.token_mix_kernel()


# ---- the torch side on 8 XLA devices ------------------------------------------------------
def stand_in(kind, eps, inputs):
    """The kernels' outputs computed plainly in torch on one chip's tensors."""
    from trm_spmd.model.layers import rms_norm
    x, w_gate_up, w_down = inputs[0], inputs[-2], inputs[-1]
    f = w_down.shape[1]

    def sublayer(x, w_gate_up, w_down):
        gate, up = torch.einsum('fl,bld->bfd', w_gate_up, x).split(f, dim=1)
        return rms_norm(x + torch.einsum('lf,bfd->bld', w_down, torch.nn.functional.silu(gate) * up), eps, dim=1)

    if kind == 'forward':
        return [sublayer(x, w_gate_up, w_down)]
    dout = inputs[1]
    parts = []
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in (x, w_gate_up, w_down)]
        for half in (slice(0, x.shape[0] // 2), slice(x.shape[0] // 2, None)):   # one partial sum per core
            out = sublayer(leaves[0][half], *leaves[1:])
            parts.append(torch.autograd.grad(out, leaves, dout[half]))
    return [parts[0][0] + parts[1][0], torch.stack([p[1] for p in parts]).float(),
            torch.stack([p[2] for p in parts]).float()]


def _one_update(kernel_on, monkeypatch):
    from trm_spmd.runtime.xla import XlaRuntime
    config = load_config(os.path.join(REPO, 'configs/baseline.py:runlocal'))
    config.update_from_flattened_dict({'xla.token_mix_kernel': kernel_on, 'model.hidden_size': 128,
                                       'data.global_batch_size': 32, **UPDATE_IS_GRADIENT})
    monkeypatch.setattr(XlaRuntime, '_kernel_outputs', lambda self, kind, eps, inputs: stand_in(kind, eps, inputs))

    def cpu_runs_the_stand_in(runtime):   # never a TPU kernel
        runtime.trace_only = True

    return one_train_step(config, random_host_batch(config, 32), cpu_runs_the_stand_in)


@pytest.mark.slow
def test_a_step_through_the_kernel_path_updates_as_the_plain_model(monkeypatch):
    before, plain_after, plain_proto = _one_update(False, monkeypatch)
    start, kernel_after, proto = _one_update(True, monkeypatch)
    # Each chip works on its own examples behind manual sharding; nothing of it in the plain step.
    assert b'SPMDFullToShardShape' in proto and b'SPMDFullToShardShape' not in plain_proto
    for name, p in plain_after.items():
        torch.testing.assert_close(start[name], before[name], rtol=0, atol=0)
        delta, delta_kernel = p - before[name], kernel_after[name] - before[name]
        if 'mlp_t' in name:
            assert delta.abs().max() > 0, name
        torch.testing.assert_close(delta_kernel, delta, rtol=1e-4, atol=1e-4 * float(delta.abs().max()))
