"""URM's ConvSwiGLU on one TPU chip, by the TPU compiler: its width-2 depthwise convolution as a
grouped convolution (the reference's nn.Conv1d) against a shift and two multiply-adds (ours,
trm_spmd/model/layers.py DepthwiseConv), forward and backward.

    python benchmarks/depthwise_conv.py                     # ARC's 24 rows per chip of a v4-64
    python benchmarks/depthwise_conv.py --rows_per_chip=4   # Sudoku's batch 128 on a v4-64

The sublayer (gate/up projection, silu(gate) * up, the convolution, SiLU, down projection) at
URM's widths (D = 512, inner 1536) is written in JAX with the model's arithmetic (bfloat16
products accumulated in float32) and compiled by libtpu for one v4 chip; the cost model's time,
FLOPs, bytes and temporaries of each form are printed. Compiler estimates, no TPU used. Needs
the pinned jax/jaxlib/libtpu of requirements.lock, as benchmarks/token_mix_kernel.py.
"""

import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_ROWS = flags.DEFINE_integer('rows_per_chip', 24, 'examples per chip (24: batch 768 on a v4-64)')
_POSITIONS = flags.DEFINE_integer('positions', 901, 'positions (900 cells + 1 puzzle-embedding position)')
_HIDDEN = flags.DEFINE_integer('hidden', 512, 'hidden size D')


def grouped(h, w, b):
    """The reference's nn.Conv1d(F, F, 2, padding=1, groups=F) truncated to L positions; h [B, L, F]."""
    import jax
    import jax.numpy as jnp
    y = jax.lax.conv_general_dilated(h, jnp.transpose(w, (2, 1, 0)), (1,), [(1, 0)],
                                     dimension_numbers=('NWC', 'WIO', 'NWC'), feature_group_count=h.shape[-1],
                                     preferred_element_type=jnp.float32)
    return (y + b.astype(jnp.float32)).astype(h.dtype)


def shifted(h, w, b):
    """DepthwiseConv's arithmetic: b + w0 * h[t-1] + w1 * h[t] in float32, rounded once."""
    import jax.numpy as jnp
    previous = jnp.pad(h, ((0, 0), (1, 0), (0, 0)))[:, :-1]
    w = w.astype(jnp.float32)
    y = b.astype(jnp.float32) + previous.astype(jnp.float32) * w[:, 0, 0] + h.astype(jnp.float32) * w[:, 0, 1]
    return y.astype(h.dtype)


def conv_swiglu_grad(conv):
    """Gradients of the ConvSwiGLU sublayer's output sum with respect to its input and weights."""
    import jax
    import jax.numpy as jnp

    def sublayer(x, w_gate_up, w_conv, b_conv, w_down):
        h = jnp.einsum('bld,fd->blf', x, w_gate_up, preferred_element_type=jnp.float32).astype(x.dtype)
        gate, up = jnp.split(h, 2, axis=-1)
        h = conv(jax.nn.silu(gate) * up, w_conv, b_conv)
        return jnp.einsum('blf,df->bld', jax.nn.silu(h), w_down, preferred_element_type=jnp.float32).astype(x.dtype)

    return jax.grad(lambda *a: sublayer(*a).astype(jnp.float32).sum(), argnums=(0, 1, 2, 3, 4))


def main(argv):
    del argv
    os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
    from trm_spmd.errors import UserError
    from trm_spmd.model.layers import swiglu_width
    from trm_spmd.runtime import tpu_aot
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print(f'error: this benchmark needs jax: {tpu_aot.SETUP_HINT}', file=sys.stderr)
        return 2
    try:
        device = tpu_aot.devices(tpu_aot.topology('v4', 4))[0]
    except UserError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    sharding = jax.sharding.SingleDeviceSharding(device)
    b, length, d = _ROWS.value, _POSITIONS.value, _HIDDEN.value
    f = swiglu_width(d, 4)
    shapes = [(b, length, d), (2 * f, d), (f, 1, 2), (f,), (d, f)]
    args = [jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=sharding) for s in shapes]
    print(f'ConvSwiGLU forward + backward on one v4 chip: x [{b} x {length} x {d}], inner {f}')
    for name, conv in (('grouped convolution', grouped), ('shift + multiply-adds', shifted)):
        start = time.perf_counter()
        with tpu_aot.quiet_stderr():
            compiled = jax.jit(conv_swiglu_grad(conv)).lower(*args).compile()
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else (cost or {})
        seconds = tpu_aot.cost_model_seconds(cost.get('optimal_seconds'), compiled.as_text())
        temps = compiled.memory_analysis().temp_size_in_bytes
        print(f'  {name:22s} cost model {seconds * 1e3 if seconds else float("nan"):.3f} ms, '
              f'{cost.get("flops", 0) / 1e9:.1f} GFLOP, {cost.get("bytes accessed", 0) / 1e9:.2f} GB accessed, '
              f'temporaries {temps / 2**20:.0f} MiB (compiled in {time.perf_counter() - start:.1f} s)', flush=True)
    return 0


if __name__ == '__main__':
    app.run(lambda argv: sys.exit(main(argv)))
