"""Self-attention's core, softmax(q k^T / sqrt(d), masked) v, computed two ways (model.attention_impl).

dense      F.scaled_dot_product_attention: every score of the [L, L] matrix at once. Under
           XLA its decomposition computes in float32 and autograd keeps the probabilities for
           the backward pass: at 916 positions and 24 rows per chip that is [192, 916, 916]
           float32, 644 MB, per attention of the grad cycle (benchmarks/README.md).
blockwise  the queries in blocks of `block` positions; each block reads its keys in spans
           (a span is one or more key blocks), the softmax kept online across spans
           (running max and sum in float32), the products in the activation dtype with
           float32 results. Nothing of size [L, L] outlives a block, the forward keeps only
           q, k, v, the output and the log-sum-exp per row, and the backward recomputes each
           block's probabilities from them (the flash-attention scheme, here as plain torch
           for XLA to compile: static block counts and slices, no data-dependent shapes).
           With a mask the schedule is made once from it (on the host): key blocks a query
           block cannot see at all are skipped, spans the mask covers whole need no mask.

The mask is boolean [L, L], True where query i may read key j (model/attention_mask.py), and
constant: the schedule depends on it.
"""

import dataclasses
import functools

import torch
import torch.nn.functional as F

IMPLS = ('auto', 'dense', 'blockwise')
BLOCK = 128
# Running max before any key is seen: finite, so that rows a span masks out whole give
# exp(-inf - (-1e30)) = 0 rather than exp(-inf + inf) = nan.
_NO_MAX = -1e30


@dataclasses.dataclass(frozen=True)
class Span:
    start: int
    stop: int
    masked: bool       # some (query, key) pair of the span is masked out


@dataclasses.dataclass(frozen=True)
class QueryBlock:
    start: int
    stop: int
    spans: tuple       # of Span, in key order


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Which keys each block of queries reads, for sequences of `length` positions."""
    length: int
    block: int
    blocks: tuple      # of QueryBlock

    @property
    def pairs_computed(self):
        """(query, key) scores the schedule computes, padded spans included."""
        return sum((b.stop - b.start) * (s.stop - s.start) for b in self.blocks for s in b.spans)


def schedule(length, mask=None, block=BLOCK, span=0):
    """The blockwise schedule for `length` positions: queries and keys in blocks of `block`
    (the last one shorter), a query block's visible key blocks merged into spans of up to
    `span` positions (0: a span runs as far as the visible blocks are consecutive). `mask`
    is a boolean [length, length] CPU tensor or None (every pair)."""
    if block < 1:
        raise ValueError(f'attention block {block} must be >= 1')
    if mask is not None and tuple(mask.shape) != (length, length):
        raise ValueError(f'attention mask of shape {tuple(mask.shape)} for {length} positions')
    starts = list(range(0, length, block))
    bounds = [(s, min(s + block, length)) for s in starts]
    limit = span or length
    blocks = []
    for q0, q1 in bounds:
        visible = [(k0, k1) for k0, k1 in bounds if mask is None or bool(mask[q0:q1, k0:k1].any())]
        spans, current = [], None
        for k0, k1 in visible:
            if current and current[1] == k0 and k1 - current[0] <= limit:
                current = (current[0], k1)
            else:
                if current:
                    spans.append(current)
                current = (k0, k1)
        spans.append(current)
        blocks.append(QueryBlock(q0, q1, tuple(
            Span(k0, k1, mask is not None and not bool(mask[q0:q1, k0:k1].all())) for k0, k1 in spans)))
    return Schedule(length, block, tuple(blocks))


@functools.lru_cache(maxsize=32)
def _full_schedule(length, block):
    return schedule(length, None, block)


def _wide(t):
    """t in float32 (float64 stays)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _product(a, b):
    """a @ b with float32 results. Under XLA the conversions fold into the matmul (DEFAULT
    precision): a product of the activation dtype that writes float32."""
    return torch.matmul(_wide(a), _wide(b))


def _scores(q, k, scale, mask, block, span):
    s = _product(q, k.transpose(-1, -2)) * scale
    if span.masked:
        s = s.masked_fill(~mask[block.start:block.stop, span.start:span.stop], float('-inf'))
    return s


class _Blockwise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, plan):
        scale = q.shape[-1] ** -0.5
        outs, lses = [], []
        for block in plan.blocks:
            qb = q[..., block.start:block.stop, :]
            row_max = row_sum = acc = None
            for span in block.spans:
                s = _scores(qb, k[..., span.start:span.stop, :], scale, mask, block, span)
                v_span = v[..., span.start:span.stop, :]
                if acc is None:
                    row_max = s.amax(-1, keepdim=True).clamp(min=_NO_MAX)
                    p = torch.exp(s - row_max)
                    row_sum = p.sum(-1, keepdim=True)
                    acc = _product(p.to(v.dtype), v_span)
                else:
                    new_max = torch.maximum(row_max, s.amax(-1, keepdim=True))
                    rescale = torch.exp(row_max - new_max)
                    p = torch.exp(s - new_max)
                    row_sum = row_sum * rescale + p.sum(-1, keepdim=True)
                    acc = acc * rescale + _product(p.to(v.dtype), v_span)
                    row_max = new_max
            outs.append((acc / row_sum).to(q.dtype))
            lses.append(row_max + torch.log(row_sum))
        out = torch.cat(outs, dim=-2) if len(outs) > 1 else outs[0]
        lse = torch.cat(lses, dim=-2) if len(lses) > 1 else lses[0]
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.plan = plan
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, mask = ctx.saved_tensors
        plan = ctx.plan
        scale = q.shape[-1] ** -0.5
        grad_out = grad_out.to(q.dtype)
        # d softmax: dS = P * (dP - rowsum(dO * O)).
        delta = (_wide(grad_out) * _wide(out)).sum(-1, keepdim=True)
        dk = {start: None for start in range(0, plan.length, plan.block)}
        dv = dict(dk)
        dqs = []

        def add(acc, key, value):
            acc[key] = value if acc[key] is None else acc[key] + value

        for block in plan.blocks:
            rows = slice(block.start, block.stop)
            qb, dob = q[..., rows, :], grad_out[..., rows, :]
            dq = None
            for span in block.spans:
                keys = slice(span.start, span.stop)
                kb, vb = k[..., keys, :], v[..., keys, :]
                p = torch.exp(_scores(qb, kb, scale, mask, block, span) - lse[..., rows, :])
                dv_span = _product(p.to(q.dtype).transpose(-1, -2), dob)
                ds = (p * (_product(dob, vb.transpose(-1, -2)) - delta[..., rows, :]) * scale).to(q.dtype)
                dq_span = _product(ds, kb)
                dq = dq_span if dq is None else dq + dq_span
                dk_span = _product(ds.transpose(-1, -2), qb)
                # A span covers whole key blocks: its gradients go to them block by block.
                for start in range(span.start, span.stop, plan.block):
                    part = slice(start - span.start, min(start + plan.block, span.stop) - span.start)
                    add(dk, start, dk_span[..., part, :])
                    add(dv, start, dv_span[..., part, :])
            dqs.append(dq)

        def whole(parts, like):
            # A key block no query block reads gets no gradient.
            parts = [p if p is not None else like.new_zeros(like[..., s:min(s + plan.block, plan.length), :].shape,
                                                            dtype=lse.dtype)
                     for s, p in parts.items()]
            return (torch.cat(parts, dim=-2) if len(parts) > 1 else parts[0]).to(like.dtype)

        dq = torch.cat(dqs, dim=-2) if len(dqs) > 1 else dqs[0]
        return dq.to(q.dtype), whole(dk, k), whole(dv, v), None, None


def blockwise(q, k, v, mask=None, plan=None, block=BLOCK):
    """softmax(q k^T / sqrt(d), masked) v for q, k, v [..., L, d] by blocks of queries (see the
    module's docstring). `plan`: schedule(L, mask, ...), made once on the host; without a mask
    it may be left out (then made here, with `block`)."""
    length = q.shape[-2]
    if plan is None:
        if mask is not None:
            raise ValueError('blockwise attention with a mask needs its schedule (attention.schedule of the mask '
                             'on the host): reading the mask here would sync with the device')
        plan = _full_schedule(length, block)
    if plan.length != length:
        raise ValueError(f'attention schedule for {plan.length} positions used on {length}')
    if mask is None:
        mask = q.new_ones((1, 1), dtype=torch.bool)   # read by no span (none is masked)
    return _Blockwise.apply(q, k, v, mask, plan)


def dense(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d), masked) v by F.scaled_dot_product_attention (non-causal)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False)
