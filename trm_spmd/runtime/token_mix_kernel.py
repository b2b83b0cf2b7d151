"""The token-mixing sublayer as two Pallas TPU kernels that keep its inner layer on chip.

The token-mixing sublayer of a block (model.trm.Block with model.mlp_t) is
out = rms_norm(x + mlp_t(x)) over the L positions of x [B, L, D], mlp_t mixing positions
separately for every example and channel: per example, [gate; up] = W_gate_up [2F, L] @ x
[L, D], then W_down [L, F] @ (silu(gate) * up). XLA runs the MLP as two matmuls and writes the
[2F, D] inner layer of every example to HBM between them: 10.6x the bytes of the input at
L = 97, F = 512, which makes the token mix bound by memory traffic (benchmarks/README.md).
Here one kernel does the whole sublayer per tile (one example, a block of channels; the norm
over positions is local to a tile), reading x and writing out only; the backward kernel
recomputes it per tile, writes dx and accumulates both weight gradients in float32 on chip.
The tiles read x where it lies: no transposed copy of the activations is made.

The kernels are pure JAX, imported only where one is lowered (runtime.xla on a TPU, the TPU compiler,
tests in JAX's interpret mode on CPU). Products accumulate in float32; unlike the XLA path,
nothing is rounded to bfloat16 inside the sublayer (tests/test_token_mix_kernel.py bounds the
difference).
"""

import functools

# Each grid splits its tiles over the two TensorCores of a v4/v5p chip (megacore): a grid
# axis marked parallel is shared between them; single-core chips run it as a loop.
CORES = 2
# Channels per tile: the [2F, CHANNELS] float32 inner layer of a tile (2 MiB at F = 512) and
# its gradients must fit in VMEM beside the double-buffered inputs.
CHANNELS = 256
MXU_LANES = 128


def _grid(batch, channels):
    """(cores, examples per core, channel blocks, channels per block) for x [batch, L, channels]."""
    block = min(CHANNELS, channels)
    if channels % block or block % MXU_LANES:
        raise ValueError(f'the token mix kernel needs model.hidden_size ({channels}) to be a multiple of '
                         f'{MXU_LANES} and of {block}')
    cores = CORES if batch % CORES == 0 else 1
    return cores, batch // cores, channels // block, block


def _sublayer(x, w_gate_up, w_down, eps):
    """The sublayer on one tile x [L, C], float32: (gate, up, sigmoid(gate), inner, 1/rms, out)."""
    import jax
    import jax.numpy as jnp
    f = w_down.shape[1]
    h = jnp.dot(w_gate_up, x, preferred_element_type=jnp.float32)
    gate, up = h[:f], h[f:]
    sig = jax.nn.sigmoid(gate)
    inner = gate * sig * up
    residual = x.astype(jnp.float32) + jnp.dot(w_down, inner.astype(x.dtype), preferred_element_type=jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.mean(residual * residual, axis=0, keepdims=True) + eps)
    return gate, up, sig, inner, inv_rms, residual * inv_rms


def _forward_kernel(x_ref, wgu_ref, wd_ref, out_ref, *, eps):
    *_, out = _sublayer(x_ref[...], wgu_ref[...], wd_ref[...], eps)
    out_ref[...] = out.astype(out_ref.dtype)


def _backward_kernel(x_ref, dout_ref, wgu_ref, wd_ref, dx_ref, dwgu_ref, dwd_ref, *, eps):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def contract(a, b, dims):
        return jax.lax.dot_general(a, b, (dims, ((), ())), preferred_element_type=jnp.float32)

    x, wgu, wd = x_ref[...], wgu_ref[...], wd_ref[...]
    dout = dout_ref[...].astype(jnp.float32)
    gate, up, sig, inner, inv_rms, out = _sublayer(x, wgu, wd, eps)
    # Through the norm over positions, to the residual x + mlp(x).
    d_res = inv_rms * (dout - out * jnp.mean(dout * out, axis=0, keepdims=True))
    dy = d_res.astype(x.dtype)
    d_inner = contract(wd, dy, ((0,), (0,)))                   # W_down^T @ dy: [F, C]
    d_gate = d_inner * up * sig * (1 + gate * (1 - sig))       # d silu(g) = s (1 + g (1 - s))
    d_h = jnp.concatenate([d_gate, d_inner * gate * sig], axis=0).astype(x.dtype)
    dx_ref[...] = (d_res + contract(wgu, d_h, ((0,), (0,)))).astype(dx_ref.dtype)

    @pl.when((pl.program_id(1) == 0) & (pl.program_id(2) == 0))
    def _():
        dwgu_ref[...] = jnp.zeros_like(dwgu_ref)
        dwd_ref[...] = jnp.zeros_like(dwd_ref)

    # The weight gradients' blocks stay in VMEM over a core's tiles (one partial sum per core).
    dwgu_ref[...] += contract(d_h, x, ((1,), (1,)))
    dwd_ref[...] += contract(dy, inner.astype(x.dtype), ((1,), (1,)))


def _call(kernel, x_shape, inputs, outputs, interpret):
    """pallas_call over the (cores, examples per core, channel blocks) grid of x [B, L, D]'s
    tiles (one example, a block of channels). `inputs`: 'tiled' for an array of x's shape read
    by tiles, else the shape of one every tile reads whole; `outputs`: (shape, dtype) pairs, x's
    shape tiled, any other one block per core (a partial sum over its tiles)."""
    import jax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    batch, length, channels = x_shape
    cores, per_core, blocks, block = _grid(batch, channels)
    tiled = pl.BlockSpec((None, length, block), lambda c, i, j: (c * per_core + i, 0, j))

    def whole(shape):
        return pl.BlockSpec(shape, lambda c, i, j: (0,) * len(shape))

    def one_per_core(shape):
        return pl.BlockSpec((None,) + shape, lambda c, i, j: (c,) + (0,) * len(shape))

    return pl.pallas_call(
        kernel, grid=(cores, per_core, blocks), interpret=interpret,
        in_specs=[tiled if i == 'tiled' else whole(i) for i in inputs],
        out_specs=[tiled if shape == x_shape else one_per_core(shape) for shape, _ in outputs],
        out_shape=[jax.ShapeDtypeStruct(shape if shape == x_shape else (cores,) + shape, dtype)
                   for shape, dtype in outputs],
        compiler_params=pltpu.CompilerParams(dimension_semantics=('parallel', 'arbitrary', 'arbitrary')))


def forward(x, w_gate_up, w_down, eps, interpret=False):
    """rms_norm(x + mlp_t(x)) over positions of x [B, L, D], with w_gate_up [2F, L] and
    w_down [L, F] (the torch layers' weights), all of one dtype (bfloat16 on a TPU)."""
    call = _call(functools.partial(_forward_kernel, eps=eps), x.shape, ['tiled', w_gate_up.shape, w_down.shape],
                 [(x.shape, x.dtype)], interpret)
    return call(x, w_gate_up, w_down)[0]


def backward_partials(x, w_gate_up, w_down, dout, eps, interpret=False):
    """(dx, d w_gate_up, d w_down) of `forward` in one kernel call, each weight gradient as
    float32 partial sums, one per core ([cores, ...])."""
    import jax.numpy as jnp
    call = _call(functools.partial(_backward_kernel, eps=eps), x.shape,
                 ['tiled', 'tiled', w_gate_up.shape, w_down.shape],
                 [(x.shape, x.dtype), (w_gate_up.shape, jnp.float32), (w_down.shape, jnp.float32)], interpret)
    return call(x, dout, w_gate_up, w_down)


def backward(x, w_gate_up, w_down, dout, eps, interpret=False):
    """(dx, d w_gate_up, d w_down) of `forward`; the weight gradients are float32."""
    dx, dwgu, dwd = backward_partials(x, w_gate_up, w_down, dout, eps, interpret)
    return dx, dwgu.sum(0), dwd.sum(0)


def partial_sums(batch, channels):
    """How many partial sums per weight gradient backward_partials returns for x [batch, _, channels]."""
    return _grid(batch, channels)[0]


@functools.lru_cache(maxsize=None)
def lowered_for_tpu(kind, x_shape, inner, eps, dtype='bfloat16'):
    """The lowered (StableHLO) module of one kernel ('forward' or 'backward', as
    backward_partials) for x of x_shape [B, L, D], inner width F and the norm's eps: its
    tpu_custom_call holds the kernel. Lowering needs no TPU."""
    import jax
    import jax.numpy as jnp
    dt = jnp.dtype(dtype)
    length = x_shape[1]
    x = jax.ShapeDtypeStruct(x_shape, dt)
    weights = [jax.ShapeDtypeStruct((2 * inner, length), dt), jax.ShapeDtypeStruct((length, inner), dt)]
    if kind == 'forward':
        fn, args = (lambda x, wgu, wd: forward(x, wgu, wd, eps)), [x] + weights
    elif kind == 'backward':
        fn, args = (lambda x, dout, wgu, wd: backward_partials(x, wgu, wd, dout, eps)), [x, x] + weights
    else:
        raise ValueError(f'kind={kind!r}')
    return jax.jit(fn).trace(*args).lower(lowering_platforms=('tpu',)).compiler_ir()


def call_figures(results, operands):
    """(FLOPs the MXU spends, HBM bytes moved) of one kernel call seen in a compiled module
    (tpu_aot.mosaic_kernels: result and operand dims). Each product is one [F x L] x [L x D]
    (2 FLOP per multiply-add) or twice that for the 2F-wide ones; the L positions fill the
    MXU's 128 lanes where they are a contracted or an output-column dimension and 8-row
    sublanes where they are the rows. Bytes are the operands and results only: the inner layer
    stays on chip."""
    x = operands[0]
    (batch, length, channels), inner = x, operands[-1][-1]

    def product(multiple):
        return 2 * batch * channels * inner * (-(-length // multiple) * multiple)

    if len(results) == 1:      # forward: [gate; up] (contracts L), down (L rows)
        flops = 2 * product(MXU_LANES) + product(8)
    else:                      # backward: the forward again, d inner, dx, both weight gradients
        flops = 2 * product(MXU_LANES) + product(8) + product(MXU_LANES) + 2 * product(8) \
            + 2 * product(MXU_LANES) + product(8)

    def size(dims, itemsize):
        n = 1
        for d in dims:
            n *= d
        return n * itemsize

    # Operands and out / dx are bfloat16, the weight gradients' partial sums float32.
    nbytes = sum(size(d, 2) for d in operands) + size(results[0], 2) + sum(size(d, 4) for d in results[1:])
    return flops, nbytes


def roofline(calls, chip_kind):
    """The kernel calls of a compiled module ([(result dims, operand dims)]) on one chip of
    `chip_kind` (trm_spmd.hardware): their count, MXU FLOPs, HBM bytes and roofline seconds,
    each call's FLOPs at the chip's peak or its bytes at its HBM bandwidth, whichever is longer
    (the elementwise work is not in it). None without calls."""
    if not calls:
        return None
    from trm_spmd.hardware import HBM_GBPS, PEAK_BF16_TFLOPS
    figures = [call_figures(results, operands) for results, operands in calls]
    peak, bandwidth = PEAK_BF16_TFLOPS[chip_kind] * 1e12, HBM_GBPS[chip_kind] * 1e9
    return {'calls': len(calls), 'mxu_flops': sum(f for f, _ in figures), 'bytes': sum(b for _, b in figures),
            'roofline_seconds': sum(max(f / peak, b / bandwidth) for f, b in figures)}
