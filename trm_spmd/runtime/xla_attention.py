"""xla.attention_kernel: self-attention's core by the Pallas kernels of runtime/attention_kernel.py,
each chip running them on its own examples (manual sharding), under torch autograd.

The kernels read q, k, v and write the output (and their gradients) as [B, H x d, L], the
positions minor: the layout XLA gives the model's projections, so nothing is padded and the
transposes to and from [B, L, H, d] are free. The torch side derives the block table and the
mask's bias from the model's mask inside the graph (no host read) and calls the kernels'
tpu_custom_call per chip. Only runtime.xla imports this module.
"""

import os

import torch
import torch.nn.functional as F


def _table_and_bias(mask, length, dtype, device):
    """(table int32 [blocks^2], bias [blocks, P, query block] or None) of a boolean [L, L] mask
    or None, as attention_kernel.padded_mask, table_of and bias_layout make them on the host:
    padded keys masked, padded queries reading key 0 only."""
    from trm_spmd.runtime import attention_kernel as kernel
    padded, block = kernel.padded_length(length), kernel.BLOCK
    blocks = padded // block
    if mask is None:
        return torch.ones(blocks * blocks, dtype=torch.int32, device=device), None
    full = F.pad(mask, (0, padded - length, 0, padded - length))
    if padded > length:
        key_0 = torch.arange(padded, device=device) == 0
        full = torch.cat([full[:length], key_0.expand(padded - length, padded)])
    table = full.view(blocks, block, blocks, block).any(3).any(1).reshape(-1).to(torch.int32)
    bias = torch.zeros(padded, padded, dtype=dtype, device=device).masked_fill(~full.t(), float('-inf'))
    return table, kernel.bias_layout(bias, length)


def _lanes_by_position(t):
    """[B, L, H, d] -> [B, H x d, L]."""
    return t.flatten(2).transpose(1, 2)


def _positions_by_head(t, heads):
    """[B, H x d, L] -> [B, L, H, d]."""
    return t.transpose(1, 2).unflatten(2, (heads, -1))


def attention_kernel_fn(runtime):
    """fn(q, k, v, mask) -> softmax(q k^T / sqrt(d), masked) v for q, k, v [B, L, H, d] (batch
    sharded along the mesh's data axis), [B, L, H, d], by the kernels, differentiable."""

    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, mask):
            b, length, heads, d = q.shape
            q, k, v = (_lanes_by_position(t) for t in (q, k, v))
            table, bias = _table_and_bias(mask, length, q.dtype, q.device)
            out, lse = _per_chip(runtime, 'forward', d, [table, q, k, v, bias], [q, 'row'])
            ctx.save_for_backward(q, k, v, table, bias, out, lse)
            return _positions_by_head(out, heads)

        @staticmethod
        def backward(ctx, grad_out):
            q, k, v, table, bias, out, lse = ctx.saved_tensors
            heads, d = grad_out.shape[2:]
            dout = _lanes_by_position(grad_out.to(q.dtype))
            dq, delta = _per_chip(runtime, 'dq', d, [table, q, k, v, bias, dout, out, lse], [q, 'row'])
            dk, dv = _per_chip(runtime, 'dkv', d, [table, q, k, v, bias, dout, lse, delta], [k, v])
            return tuple(_positions_by_head(t, heads) for t in (dq, dk, dv)) + (None,)

    return FlashAttention.apply


def _per_chip(runtime, kind, head_dim, operands, results):
    """One kernel's custom call on every chip's own examples. operands: table, q, k, v, bias
    or None, then the rest, global (table and bias replicated, the rest split by example);
    results: tensors shaped as each result, or 'row' for the per-query rows, [B, groups,
    heads per group, L] float32. Returns the results, global."""
    from trm_spmd.runtime import attention_kernel as kernel
    xs, mesh = runtime._xs, runtime.mesh
    batch, bias = operands[1].shape[0], operands[4]

    def local(t, by_example):
        spec = (('data',) if by_example else (None,)) + (None,) * (t.dim() - 1)
        return xs.enable_manual_sharding(t, spec, mesh=mesh).global_tensor

    inputs = [local(t, i not in (0, 4)) for i, t in enumerate(operands) if t is not None]
    q = inputs[1]   # this chip's examples
    shapes = [list(kernel.row_shape(*q.shape, head_dim)) if r == 'row' else [q.shape[0], *r.shape[1:]]
              for r in results]
    dtypes = [torch.float32 if r == 'row' else r.dtype for r in results]
    outputs = custom_call(runtime, kind, head_dim, bias is not None, inputs, shapes, dtypes)
    return [xs.disable_manual_sharding(o, ('data',) + (None,) * (o.dim() - 1), (batch,) + tuple(o.shape[1:]),
                                       mesh=mesh).global_tensor for o in outputs]


def custom_call(runtime, kind, head_dim, masked, inputs, shapes, dtypes):
    """The kernel's tpu_custom_call on one chip's tensors (`inputs` as attention_kernel's
    lowered_for_tpu takes them) -> its outputs."""
    # The TPU is torch_xla's: JAX only lowers the kernels and must open no device.
    os.environ.setdefault('JAX_PLATFORMS', 'cpu')
    from torch_xla.experimental.custom_kernel import _extract_backend_config
    from trm_spmd.runtime import attention_kernel as kernel
    batch, width, length = inputs[1].shape
    lowered = kernel.lowered_for_tpu(kind, batch, length, width, head_dim, masked,
                                     str(inputs[1].dtype).removeprefix('torch.'))
    return runtime._torch_xla._XLAC._xla_tpu_custom_call(inputs, _extract_backend_config(lowered), shapes, dtypes)
