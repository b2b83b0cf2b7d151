"""xla.attention_kernel: self-attention's core by the Pallas kernels of runtime/attention_kernel.py,
each chip running them on its own examples (manual sharding), under torch autograd.

The torch side lays the tensors out as the kernels read them (sequences padded to a multiple
of 128, q and the output transposed so the queries lie on the lanes), derives the block table
and the mask's bias from the model's mask inside the graph (no host read), and calls the
kernels' tpu_custom_call per chip. Only runtime.xla imports this module.
"""

import os

import torch
import torch.nn.functional as F


def _layout(q, k, v, padded):
    """q^T [B, H, d, P] and k, v [B, H, P, d], the positions padded with zeros to P."""
    pad = padded - q.shape[-2]
    qt = F.pad(q, (0, 0, 0, pad)).transpose(-1, -2)
    return qt, F.pad(k, (0, 0, 0, pad)), F.pad(v, (0, 0, 0, pad))


def _table_and_bias(mask, length, padded, dtype, device, block):
    """(table int32 [blocks^2], bias [blocks, P, 128] or None) of a boolean [L, L] mask or None,
    as attention_kernel.padded_mask, table_of and bias_layout make them on the host: padded
    keys masked (by the kernel itself without a mask), padded queries reading key 0 only."""
    blocks = padded // block
    if mask is None:
        return torch.ones(blocks * blocks, dtype=torch.int32, device=device), None
    full = F.pad(mask, (0, padded - length, 0, padded - length))
    if padded > length:
        key_0 = torch.arange(padded, device=device) == 0
        full = torch.cat([full[:length], key_0.expand(padded - length, padded)])
    table = full.view(blocks, block, blocks, block).any(3).any(1).reshape(-1).to(torch.int32)
    bias = torch.zeros(padded, padded, dtype=dtype, device=device).masked_fill(~full.t(), float('-inf'))
    return table, bias.view(padded, blocks, block).permute(1, 0, 2)


def attention_kernel_fn(runtime):
    """fn(q, k, v, mask) -> softmax(q k^T / sqrt(d), masked) v for q, k, v [B, H, L, d] (batch
    sharded along the mesh's data axis), by the kernels, differentiable."""
    from trm_spmd.runtime import attention_kernel as kernel

    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, mask):
            length, padded = q.shape[-2], kernel.padded_length(q.shape[-2])
            qt, kp, vp = _layout(q, k, v, padded)
            table, bias = _table_and_bias(mask, length, padded, q.dtype, q.device, kernel.BLOCK)
            ot, lse = _per_chip(runtime, 'forward', length, [table, qt, kp, vp, bias], [qt, 'row'])
            out = ot.transpose(-1, -2)[..., :length, :]
            ctx.save_for_backward(qt, kp, vp, table, bias, out, lse)
            ctx.length = length
            return out

        @staticmethod
        def backward(ctx, grad_out):
            qt, kp, vp, table, bias, out, lse = ctx.saved_tensors
            length, padded = ctx.length, qt.shape[-1]
            grad_out = grad_out.to(qt.dtype)
            dot = F.pad(grad_out, (0, 0, 0, padded - length)).transpose(-1, -2)
            delta = F.pad((grad_out.float() * out.float()).sum(-1), (0, padded - length)).unsqueeze(-2)
            operands = [table, qt, kp, vp, bias, dot, lse, delta]
            dqt, = _per_chip(runtime, 'dq', length, operands, [qt])
            dk, dv = _per_chip(runtime, 'dkv', length, operands, [kp, vp])
            return (dqt.transpose(-1, -2)[..., :length, :], dk[..., :length, :], dv[..., :length, :], None)

    return FlashAttention.apply


def _per_chip(runtime, kind, length, operands, results):
    """One kernel's custom call on every chip's own examples. operands: table, q^T, k, v,
    bias or None, then the rest, global [B, H, ...] (table and bias replicated); results:
    tensors shaped as each result, or 'row' for a [B, H, 1, P] float32 one. Returns the
    results, global."""
    xs, mesh = runtime._xs, runtime.mesh
    table, qt, bias = operands[0], operands[1], operands[4]
    batch, heads, d, padded = qt.shape

    def local(t):
        if t.dim() < 4:   # table, bias: every chip reads them whole
            return xs.enable_manual_sharding(t, (None,) * t.dim(), mesh=mesh).global_tensor
        t = xs.enable_manual_sharding(t, ('data',) + (None,) * 3, mesh=mesh).global_tensor
        return t.reshape((-1,) + tuple(t.shape[2:]))   # [examples x heads, ...]

    inputs = [local(t) for t in operands if t is not None]
    n = inputs[1].shape[0]
    shapes = [[n, 1, padded] if r == 'row' else [n] + list(r.shape[2:]) for r in results]
    dtypes = [torch.float32 if r == 'row' else r.dtype for r in results]
    outputs = custom_call(runtime, kind, length, bias is not None, inputs, shapes, dtypes)
    spec = ('data',) + (None,) * 3
    return [xs.disable_manual_sharding(o.reshape((n // heads, heads) + tuple(o.shape[1:])), spec,
                                       (batch, heads) + tuple(o.shape[1:]), mesh=mesh).global_tensor
            for o in outputs]


def custom_call(runtime, kind, length, masked, inputs, shapes, dtypes):
    """The kernel's tpu_custom_call on one chip's tensors (`inputs` as attention_kernel's
    lowered_for_tpu takes them) -> its outputs."""
    # The TPU is torch_xla's: JAX only lowers the kernels and must open no device.
    os.environ.setdefault('JAX_PLATFORMS', 'cpu')
    from torch_xla.experimental.custom_kernel import _extract_backend_config
    from trm_spmd.runtime import attention_kernel as kernel
    n, d, padded = inputs[1].shape
    lowered = kernel.lowered_for_tpu(kind, n, d, padded, length, masked, str(inputs[1].dtype).removeprefix('torch.'))
    return runtime._torch_xla._XLAC._xla_tpu_custom_call(inputs, _extract_backend_config(lowered), shapes, dtypes)
