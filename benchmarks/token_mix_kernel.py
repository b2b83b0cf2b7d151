"""The token-mixing sublayer's Pallas kernels (xla.token_mix_kernel) against XLA, on one chip.

    python benchmarks/token_mix_kernel.py                        # compile for one v4 chip, no TPU needed
    python benchmarks/token_mix_kernel.py --rows_per_chip=24     # the baseline's 768 on a v4-64

A block's token-mixing sublayer, rms_norm(x + mlp_t(x)) over the positions of x [B, L, D]
(trm_spmd/runtime/token_mix_kernel.py), forward and forward+backward, at the baseline's
shapes (L = 97, D = 512, F = 512) and B examples per chip:

- XLA's version, the model's arithmetic in JAX, compiled by libtpu: the cost model's time and
  bytes (an estimate);
- the kernels compiled by libtpu (Mosaic accepts them for the chip) and their roofline, the
  MXU FLOPs (positions padded to 128 lanes) at the chip's peak or their bytes at its HBM
  bandwidth: libtpu's cost model gives a Mosaic kernel no time, so without a TPU the kernels'
  time is that bound, not a measurement;
- on a TPU VM (JAX sees a TPU; run it in an environment where torch_xla holds no TPU), both
  timed on the chip: that measurement decides what the kernels are worth.

Needs the pinned jax/jaxlib/libtpu of requirements.lock (Linux x86_64), or a TPU VM's environment
(setup.sh --tpu).
"""

import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_ROWS = flags.DEFINE_integer('rows_per_chip', 192, 'examples per chip (192: batch 6144 on a v4-64)')
_HIDDEN = flags.DEFINE_integer('hidden', 512, 'hidden size D (channels)')
_POSITIONS = flags.DEFINE_integer('positions', 97, 'positions L (81 cells + 16 puzzle-embedding positions)')
_REPEATS = flags.DEFINE_integer('repeats', 20, 'timed calls on a TPU')
EPS = 1e-5


def xla_sublayer(x, w_gate_up, w_down):
    """rms_norm(x + mlp_t(x)) over positions as the torch model computes it under XLA: bf16
    products accumulated in float32 and rounded, SiLU and the residual in bf16, the norm in float32."""
    import jax
    import jax.numpy as jnp
    h = jnp.einsum('fl,bld->bfd', w_gate_up, x, preferred_element_type=jnp.float32).astype(x.dtype)
    gate, up = jnp.split(h, 2, axis=1)
    y = jnp.einsum('lf,bfd->bld', w_down, jax.nn.silu(gate) * up, preferred_element_type=jnp.float32)
    residual = (x + y.astype(x.dtype)).astype(jnp.float32)
    return (residual * jax.lax.rsqrt(jnp.mean(residual * residual, axis=1, keepdims=True) + EPS)).astype(x.dtype)


def kernel_sublayer(x, w_gate_up, w_down):
    """The kernels' sublayer, differentiable (their VJP)."""
    import jax
    from trm_spmd.runtime import token_mix_kernel as kernel

    @jax.custom_vjp
    def sublayer(x, wgu, wd):
        return kernel.forward(x, wgu, wd, EPS)

    def backward(saved, dout):
        dx, dwgu, dwd = kernel.backward(*saved, dout, EPS)
        return dx, dwgu.astype(saved[1].dtype), dwd.astype(saved[2].dtype)

    sublayer.defvjp(lambda *a: (kernel.forward(*a, EPS), a), backward)
    return sublayer(x, w_gate_up, w_down)


def with_gradients(fn):
    import jax
    import jax.numpy as jnp
    return lambda *a: jax.grad(lambda *b: fn(*b).astype(jnp.float32).sum(), argnums=(0, 1, 2))(*a)


def _compiled_cost(fn, args):
    import jax
    start = time.perf_counter()
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else (cost or {})
    return cost, time.perf_counter() - start


def _time_on_chip(fn, args, repeats):
    import jax
    compiled = jax.jit(fn)
    jax.block_until_ready(compiled(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        out = compiled(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / repeats * 1e3


def main(argv):
    del argv
    os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
    from trm_spmd.errors import UserError
    from trm_spmd.runtime import tpu_aot
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print(f'error: this benchmark needs jax: {tpu_aot.SETUP_HINT}', file=sys.stderr)
        return 2
    from trm_spmd.model.layers import swiglu_width
    from trm_spmd.runtime.token_mix_kernel import roofline
    with tpu_aot.quiet_stderr():
        on_tpu = jax.default_backend() == 'tpu'
    if on_tpu:
        device = jax.devices()[0]
    else:   # the compile-only TPU compiler is pinned; a TPU VM's own jax drives its chip
        try:
            device = tpu_aot.devices(tpu_aot.topology('v4', 4))[0]
        except UserError as e:
            print(f'error: {e}', file=sys.stderr)
            return 2
    sharding = jax.sharding.SingleDeviceSharding(device)
    b, length, d = _ROWS.value, _POSITIONS.value, _HIDDEN.value
    f = swiglu_width(length, 4)
    shapes = [(b, length, d), (2 * f, length), (length, f)]
    args = [jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=sharding) for s in shapes]
    print(f'token-mixing sublayer per chip: x [{b} x {length} x {d}], W_gate_up [{2 * f} x {length}], '
          f'W_down [{length} x {f}], bf16; {device.device_kind}{"" if on_tpu else " (compile only)"}')
    forward_call = ([shapes[0]], shapes)
    backward_call = ([shapes[0], (2,) + shapes[1], (2,) + shapes[2]], [shapes[0]] + shapes)
    for label, xla_fn, kernel_fn, calls in (
            ('forward', xla_sublayer, kernel_sublayer, [forward_call]),
            ('forward+backward', with_gradients(xla_sublayer), with_gradients(kernel_sublayer),
             [forward_call, backward_call])):
        bound = roofline(calls, 'tpu-v4')
        with tpu_aot.quiet_stderr():
            xla_cost, _ = _compiled_cost(xla_fn, args)
            _, kernel_s = _compiled_cost(kernel_fn, args)
        xla_s = xla_cost.get('optimal_seconds')
        print(f'{label}: XLA {xla_cost.get("bytes accessed", 0) / 1e6:.0f} MB, cost model '
              + (f'{xla_s * 1e3:.3f} ms' if xla_s else 'none')
              + f'; kernels compiled by libtpu in {kernel_s:.1f} s, '
              f'{bound["mxu_flops"] / 1e9:.1f} GFLOP on the MXU, {bound["bytes"] / 1e6:.0f} MB, '
              f'roofline {bound["roofline_seconds"] * 1e3:.3f} ms (a bound: the cost model gives kernels no time)')
        if on_tpu:
            keys = jax.random.split(jax.random.key(0), 3)
            values = [jax.random.normal(k, s, jnp.bfloat16) * (s[-1] ** -0.5 if i else 1)
                      for i, (k, s) in enumerate(zip(keys, shapes))]
            print(f'  measured on the chip: XLA {_time_on_chip(xla_fn, values, _REPEATS.value):.3f} ms, '
                  f'kernels {_time_on_chip(kernel_fn, values, _REPEATS.value):.3f} ms')
    return 0


if __name__ == '__main__':
    app.run(lambda argv: sys.exit(main(argv)))
