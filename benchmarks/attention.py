"""Self-attention's core alone on one TPU chip, by the TPU compiler: dense, blockwise, the kernels.

    python benchmarks/attention.py --config=configs/maze.py                  # 24 rows per chip (768 on a v4-64)
    python benchmarks/attention.py --config=configs/maze.py:sparse_window --blocks=128,256

softmax(q k^T / sqrt(d), masked) v for q, k, v [rows, heads, L, d] in bfloat16 with the
config's heads, head dimension, positions and mask (model.attention_mask), forward alone (a
no-grad network call) and forward with the gradients of q, k and v (a call of the grad cycle):

- dense and blockwise (model/attention.py, each --blocks size; --norecompute: without
  xla.attention_recompute's barriers) traced by torch_xla on virtual CPU devices, one per
  chip of a v4 2x2x1 (each chip its own rows), and compiled by libtpu:
  the cost model's time, the temporaries, the matmuls' element types (compiler estimates);
- the Pallas kernels (runtime/attention_kernel.py; q, k, v as they take them, [rows, heads x
  d, L]) compiled by libtpu for the same chip (Mosaic accepts them or says why) and their
  roofline, a bound: libtpu's cost model gives a kernel no time, so without a TPU that bound
  is all there is.

The whole train step is benchmarks/tpu_compile.py's. Needs the pinned jax/jaxlib/libtpu of
requirements.lock (Linux x86_64).
"""

import os
import sys
import time

from absl import flags

if __package__ in (None, ''):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHIPS = 4   # the smallest v4 topology, 2x2x1; every chip runs the same per-chip program
os.environ.setdefault('PJRT_DEVICE', 'CPU')
os.environ['CPU_NUM_DEVICES'] = str(CHIPS)

from benchmarks import common  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
    from trm_spmd.model import attention
    common.define_flags('config whose attention (heads, head dimension, positions, mask) is measured')
    flags.DEFINE_integer('rows_per_chip', 24, 'examples per chip (24: batch 768 on a v4-64)')
    flags.DEFINE_list('blocks', [str(attention.BLOCK)], 'block sizes of the blockwise path')
    flags.DEFINE_bool('recompute', True, 'blockwise recomputes its scores behind barriers (xla.attention_recompute)')
    flags.DEFINE_bool('kernels', True, 'also compile the Pallas kernels')


def _torch_path(runtime, cfg, mask, impl, block, rows, grad):
    """The cost model's figures of one path traced by torch_xla and compiled for a v4 2x2x1."""
    import torch
    from trm_spmd.model import attention
    from trm_spmd.runtime import tpu_aot
    shape = (rows * CHIPS, cfg.num_heads, cfg.total_len, cfg.head_dim)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (runtime.shard_along_data(torch.randn(shape, generator=generator).to(torch.bfloat16)
                                        .to(runtime.device)) for _ in range(3))
    device_mask = None if mask is None else runtime.replicate(mask.to(runtime.device))
    runtime.sync()
    if grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    with torch.set_grad_enabled(grad):
        if impl == 'dense':
            out = attention.dense(q, k, v, device_mask)
        else:
            out = attention.blockwise(q, k, v, device_mask, attention.schedule(cfg.total_len, mask, block),
                                      barrier=runtime.serialize if FLAGS.recompute else None)
        if grad:
            out.float().square().sum().backward()
    tensors = [q.grad, k.grad, v.grad] if grad else [out]
    figures = tpu_aot.compile_module(runtime.hlo_module_proto(tensors), tpu_aot.topology('v4', CHIPS))
    runtime.sync()
    return {'ms': figures['optimal_seconds'] * 1e3 if figures['optimal_seconds'] else None,
            'temp_bytes': figures['memory']['temp_bytes'], 'matmuls': figures['matmuls'],
            'bytes_accessed': figures['bytes_accessed'], 'compile_s': figures['compile_s']}


def _kernels(cfg, mask, rows, grad):
    """Compiles the kernels (forward, or forward and backward) for one v4 chip -> (compile
    seconds, roofline)."""
    import jax
    import jax.numpy as jnp
    from trm_spmd.runtime import attention_kernel as kernel
    from trm_spmd.runtime import tpu_aot
    d, length, width = cfg.head_dim, cfg.total_len, cfg.num_heads * cfg.head_dim
    blocks = kernel.blocks_of(length)
    masked = mask is not None
    device = tpu_aot.devices(tpu_aot.topology('v4', CHIPS))[0]
    sharding = jax.sharding.SingleDeviceSharding(device)

    def spec(shape, dtype=jnp.bfloat16):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    x, row = spec((rows, width, length)), spec(kernel.row_shape(rows, width, length, d), jnp.float32)
    table = spec((blocks * blocks,), jnp.int32)
    bias = [spec((blocks, kernel.padded_length(length), kernel.query_block(length)))] if masked else []

    def run(table, q, k, v, *rest):
        b = rest[0] if masked else None
        out, lse = kernel.forward(q, k, v, table, d, b)
        if not grad:
            return out
        return kernel.backward(q, k, v, table, out, out, lse, d, b)   # the output as dO: the right shape

    start = time.perf_counter()
    with tpu_aot.quiet_stderr():
        jax.jit(run).lower(table, x, x, x, *bias).compile()
    seconds = time.perf_counter() - start
    shapes = [table.shape, x.shape, x.shape, x.shape] + [b.shape for b in bias]
    calls = [([x.shape, row.shape], shapes)]
    if grad:
        calls += [([x.shape, row.shape], shapes + [x.shape, x.shape, row.shape]),
                  ([x.shape, x.shape], shapes + [x.shape, row.shape, row.shape])]
    return seconds, kernel.roofline(calls, 'tpu-v4', kernel.visible_tiles(mask.numpy() if masked else None, length))


def main(argv):
    del argv
    from trm_spmd import tasks
    from trm_spmd.errors import UserError
    from trm_spmd.model.attention_mask import attention_mask
    from trm_spmd.model.config import TRMConfig
    from trm_spmd.runtime import tpu_aot
    from trm_spmd.runtime.xla import XlaRuntime
    config, overrides = common.config_and_overrides()
    cfg = TRMConfig.from_config(config, **tasks.sizes(config))
    if cfg.mlp_t:
        raise UserError(f'{FLAGS["config"].config_filename} mixes positions with an MLP: benchmark an attention '
                        'config (model.mlp_t=False)')
    versions = tpu_aot.check_environment()
    runtime = XlaRuntime()   # torch_xla's CPU client first; libtpu is loaded by the compiles
    mask = attention_mask(cfg.attention_mask, cfg.seq_len, cfg.prefix_len, cfg.attention_window)
    rows = FLAGS.rows_per_chip
    lines = [f'attention per chip: q, k, v [{rows} x {cfg.num_heads} x {cfg.total_len} x {cfg.head_dim}] bfloat16, '
             f'mask {cfg.attention_mask}; v4 (compile only), libtpu {versions["libtpu"]}']
    results = {}
    paths = [('dense', 0)] + [('blockwise', int(b)) for b in FLAGS.blocks]
    for grad in (False, True):
        what = 'forward and gradients' if grad else 'forward'
        for impl, block in paths:
            name = impl if impl == 'dense' else f'blockwise {block}'
            r = _torch_path(runtime, cfg, mask, impl, block, rows, grad)
            results[f'{name}, {what}'] = r
            matmuls = ', '.join(f'{k}: {v}' for k, v in sorted(r['matmuls'].items()))
            lines.append(f'{what:<22} {name:<15} cost model {r["ms"]:8.3f} ms, temporaries '
                         f'{r["temp_bytes"] / 2**30:6.2f} GiB, matmuls {matmuls} (compiler estimate)')
        if FLAGS.kernels:
            seconds, bound = _kernels(cfg, mask, rows, grad)
            results[f'kernels, {what}'] = {**bound, 'compile_s': seconds}
            lines.append(f'{what:<22} {"kernels":<15} roofline   {bound["roofline_seconds"] * 1e3:8.3f} ms '
                         f'({bound["calls"]} calls, {bound["mxu_flops"] / 1e12:.3g} TFLOP on the MXU, '
                         f'{bound["bytes"] / 1e6:.0f} MB, {bound["visible_tiles"]:.0%} of the tiles; a bound, '
                         f'not a measurement); Mosaic compiled them in {seconds:.1f} s')
    common.report('attention', {'slug': 'v4', 'kind': 'tpu-v4', 'description': 'one TPU v4 chip, compile only: '
                                'no TPU used', 'projected': True},
                  {'rows_per_chip': rows, 'blocks': FLAGS.blocks, 'positions': cfg.total_len,
                   'heads': cfg.num_heads, 'head_dim': cfg.head_dim, 'mask': cfg.attention_mask,
                   'tpu_compiler': versions}, results, lines, overrides=overrides,
                  notes='Compiler estimates and roofline bounds, on a machine without a TPU.')


if __name__ == '__main__':
    common.run(define_flags, main)
