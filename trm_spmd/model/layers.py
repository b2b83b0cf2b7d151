"""Building blocks of the TRM and URM networks, numerically as the references' models/layers.py.

Weights live in float32 and are cast to the activation dtype at use, so the optimizer and
EMA always work on float32 while the forward runs in bfloat16.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from trm_spmd.model import attention


def trunc_normal_(tensor, std=1.0, bound=2.0):
    """JAX-style truncated normal: cut at +-bound sigma, rescaled so the result has std `std`.

    torch.nn.init.trunc_normal_ cuts the distribution without correcting its std; the
    reference initialisation (and hence its training dynamics) uses the corrected one.
    """
    with torch.no_grad():
        if std == 0:
            return tensor.zero_()
        # Variance of a standard normal truncated to [-bound, bound].
        pdf = math.exp(-0.5 * bound * bound) / math.sqrt(2 * math.pi)
        mass = math.erf(bound / math.sqrt(2))
        truncated_std = math.sqrt(1 - 2 * bound * pdf / mass)
        scale = std / truncated_std
        # Inverse-CDF sampling: uniform in erf space, mapped back through erfinv.
        tensor.uniform_(-mass, mass).erfinv_().mul_(math.sqrt(2) * scale)
        return tensor.clamp_(-bound * scale, bound * scale)


def rms_norm(x, eps, dim=-1):
    """Weightless RMSNorm over `dim`, computed in float32, returned in x's dtype."""
    h = x.float()
    h = h * torch.rsqrt(h.square().mean(dim, keepdim=True) + eps)
    return h.to(x.dtype)


class _LinearFloat32WeightGrad(torch.autograd.Function):
    """x @ w.T with w cast to x's dtype; the weight's gradient leaves its matmul in float32
    (the same low-precision products, accumulated in float32) instead of being rounded to
    x's dtype first. Under SPMD the partial sums of the per-device batches are then float32,
    and the compiler sums a weight's uses into one float32 all-reduce of the weight's size;
    rounded per use, each use needs its own all-reduce."""

    @staticmethod
    def forward(ctx, x, weight):
        cast = weight.to(x.dtype)
        ctx.save_for_backward(x, cast)
        return F.linear(x, cast)

    @staticmethod
    def backward(ctx, grad):
        x, cast = ctx.saved_tensors
        grad_x = grad @ cast if ctx.needs_input_grad[0] else None
        grad_w = grad.reshape(-1, grad.shape[-1]).t().float() @ x.reshape(-1, x.shape[-1]).float()
        return grad_x, grad_w


class CastedLinear(nn.Module):
    """Linear layer, weight std 1/sqrt(fan_in), cast to the input dtype at use.

    float32_weight_grad (off by default, as the reference): the weight's gradient is
    accumulated in float32 out of the matmul rather than rounded to the input dtype per use
    (see TRM.use_float32_weight_grads).
    """

    float32_weight_grad = False

    def __init__(self, in_features, out_features, bias=False):
        super().__init__()
        self.weight = nn.Parameter(trunc_normal_(torch.empty(out_features, in_features),
                                                 std=in_features ** -0.5))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x):
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if self.float32_weight_grad and x.dtype != self.weight.dtype and torch.is_grad_enabled():
            out = _LinearFloat32WeightGrad.apply(x, self.weight)
            return out if bias is None else out + bias
        return F.linear(x, self.weight.to(x.dtype), bias)


class CastedEmbedding(nn.Module):
    def __init__(self, num_embeddings, dim, init_std, dtype):
        super().__init__()
        self.weight = nn.Parameter(trunc_normal_(torch.empty(num_embeddings, dim), std=init_std))
        self.dtype = dtype

    def forward(self, ids):
        return F.embedding(ids, self.weight.to(self.dtype))


def swiglu_width(features, expansion):
    """Inner width: round(expansion * n * 2/3) (Python's round), up to a multiple of 256."""
    inter = round(expansion * features * 2 / 3)
    return -(-inter // 256) * 256


class SwiGLU(nn.Module):
    """silu(gate) * up, then down; gate_up_proj packs [gate; up] along its output rows.

    axis=-1 mixes channels (an MLP per position). axis=1 mixes positions of a
    [B, L, D] tensor (the MLP-mixer token mix), as the reference does: on the transposed
    [B, D, L] every projection is one matrix product over the last axis. (W @ x on [B, L, D]
    avoids the transposes, but a CPU then expands W to every row: 2x slower per step.)
    """

    def __init__(self, features, expansion, axis=-1):
        super().__init__()
        if axis not in (-1, 1):
            raise ValueError(f'SwiGLU axis={axis} must be -1 (channels) or 1 (tokens)')
        inter = swiglu_width(features, expansion)
        self.axis = axis
        self.gate_up_proj = CastedLinear(features, 2 * inter)
        self.down_proj = CastedLinear(inter, features)

    def forward(self, x):
        if self.axis == -1:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(F.silu(gate) * up)
        gate, up = self.gate_up_proj(x.transpose(1, 2)).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up).transpose(1, 2)


class DepthwiseConv(nn.Module):
    """URM's short convolution over positions: each channel of x [B, L, C] mixed with the
    previous position, out[t] = w[c, 0, 0] * x[t-1] + w[c, 0, 1] * x[t] + b[c] (x[-1] = 0).

    The reference's nn.Conv1d(C, C, kernel 2, padding 1, groups C) truncated to L positions,
    with its parameter shapes ([C, 1, 2] and [C]) and default init (uniform in +-1/sqrt(2)).
    Written as one shift and two multiply-adds, elementwise work the compiler fuses with
    its neighbours. A grouped convolution does not fall back to the CPU on XLA either, but by
    the TPU compiler (benchmarks/depthwise_conv.py, ConvSwiGLU forward and backward on a v4
    chip) it costs twice as much at Sudoku's 4 rows a chip (0.105 against 0.055 ms) and 3%
    less at ARC's 24 rows of 901 positions (2.22 against 2.29 ms). Products and sum in
    float32, rounded once to x's dtype, in the order torch's bfloat16 depthwise convolution
    accumulates on a CPU: bit for bit the reference's result (tests/test_urm.py). The weights are float32 and cast to x's dtype at
    use like every other weight here; the reference keeps this module's in bfloat16.
    """

    KERNEL = 2

    def __init__(self, channels):
        super().__init__()
        bound = 1 / math.sqrt(self.KERNEL)   # nn.Conv1d's default: fan_in = 1 channel x 2 taps
        self.weight = nn.Parameter(torch.empty(channels, 1, self.KERNEL).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(channels).uniform_(-bound, bound))

    def forward(self, x):
        w = self.weight.to(x.dtype).float()
        previous = F.pad(x, (0, 0, 1, 0))[:, :-1]
        # The convolution's order of the float32 sum: bias, then the taps in order (a tie
        # between two bfloat16 values can round either way in another order).
        out = self.bias.to(x.dtype).float() + previous.float() * w[:, 0, 0] + x.float() * w[:, 0, 1]
        return out.to(x.dtype)


class ConvSwiGLU(nn.Module):
    """URM's channel MLP: silu(gate) * up, a depthwise convolution over positions, SiLU,
    then down. Same widths and packing as SwiGLU (gate_up_proj = [gate; up])."""

    def __init__(self, features, expansion):
        super().__init__()
        inter = swiglu_width(features, expansion)
        self.gate_up_proj = CastedLinear(features, 2 * inter)
        self.dwconv = DepthwiseConv(inter)
        self.down_proj = CastedLinear(inter, features)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(self.dwconv(F.silu(gate) * up)))


def rope_tables(head_dim, length, theta):
    """float32 cos/sin tables [length, head_dim], frequencies repeated for both halves."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotates x [B, L, H, Dh] by position; math in float32 as the reference, result in x's dtype.

    The reference's x * cos + cat(-x2, x1) * sin, with the halves as an axis of two: the
    rotated copy is that axis reversed and the sign goes on the table, so XLA makes one pass
    of it instead of writing the negated, concatenated copy in float32 first (7% of a
    916-position train step on a TPU). The same products and sums: the same bits."""
    halves = x.float().unflatten(-1, (2, -1))                        # [B, L, H, 2, Dh/2]
    cos = cos.unflatten(-1, (2, -1))[:, None]                        # [L, 1, 2, Dh/2]
    sin = sin.unflatten(-1, (2, -1))
    sin = torch.stack((-sin[:, 0], sin[:, 1]), dim=-2)[:, None]
    return (halves * cos + halves.flip(-2) * sin).flatten(-2).to(x.dtype)


class Attention(nn.Module):
    """Non-causal multi-head self-attention; qkv_proj packs [q; k; v] along its output rows.

    impl: 'dense' or 'blockwise' (model/attention.py); plan: the blockwise schedule of the
    sequence length and mask this layer sees (attention.schedule; may be None without a mask).
    kernel_fn (set by a backend, TRM.use_attention_kernel): fn(q, k, v, mask) -> the attention
    output computed by a kernel, in place of impl, all four [B, L, H, Dh] as the projection lays
    them out: the kernel takes them into its own layout.
    recompute_barrier (set by a backend, TRM.use_attention_recompute): the barrier behind which
    blockwise attention recomputes its scores (attention.blockwise), which keeps a compiler from
    storing them once for every use instead.
    """

    def __init__(self, hidden_size, num_heads, impl='dense', plan=None):
        super().__init__()
        if impl not in attention.IMPLS[1:]:
            raise ValueError(f'attention impl {impl!r} is not one of {attention.IMPLS[1:]}')
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.impl = impl
        self.plan = plan
        self.kernel_fn = None
        self.recompute_barrier = None
        self.qkv_proj = CastedLinear(hidden_size, 3 * hidden_size)
        self.o_proj = CastedLinear(hidden_size, hidden_size)

    def forward(self, x, rope=None, mask=None):
        """mask: None (every pair) or boolean [L, L], True where a position may attend."""
        b, n, d = x.shape
        q, k, v = self.qkv_proj(x).view(b, n, 3, self.num_heads, self.head_dim).unbind(dim=2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if self.kernel_fn is not None:
            return self.o_proj(self.kernel_fn(q, k, v, mask).reshape(b, n, d))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.impl == 'blockwise':
            out = attention.blockwise(q, k, v, mask, self.plan, barrier=self.recompute_barrier)
        else:
            out = attention.dense(q, k, v, mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, d))
