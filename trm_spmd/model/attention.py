"""Self-attention's core, softmax(q k^T / sqrt(d), masked) v, computed two ways (model.attention_impl).

dense      F.scaled_dot_product_attention: every score of the [L, L] matrix at once. Under
           XLA its decomposition computes in float32 (products included) and autograd keeps
           the probabilities for the backward pass: at 916 positions and 24 rows per chip,
           [192, 916, 916] float32, 644 MB, per attention of the grad cycle.
blockwise  the flash-attention scheme as plain torch for XLA to compile (static blocks and
           slices, no data-dependent shapes). The queries go in blocks of `block` positions;
           a block reads its keys in spans (one or more key blocks), in two passes: the first
           finds each query's largest score, the second sums the probabilities (float32)
           and multiplies them with v. The products take the activation dtype and write
           float32; each probability is rounded to the activation dtype once, for the value
           product (the row sums stay of the float32 ones: summing in the value product, a
           column of ones beside v, moves the logits twice as far from the official
           model's). The forward keeps q, k, v, the output and one log-sum-exp per query;
           the backward recomputes each block's probabilities from them, in two passes that
           each contract the scores along their last axis: dq by query blocks ([queries,
           keys]), dk and dv by key blocks ([keys, queries]), which spares XLA the
           transposed copies of [L, L] tensors a joint pass makes. Both recomputations, the
           forward's second pass and the backward, stand behind a barrier (`barrier`,
           xla.attention_recompute): a compiler that merges equal subexpressions (XLA)
           would otherwise compute each score once and keep it, float32, for every use,
           and a recomputed score costs one matmul of 64 multiply-adds where a stored one
           costs 4 bytes of HBM written and read again. A mask's schedule is made once, on
           the host: key blocks a query block cannot see are skipped, and spans it covers
           whole need no mask.

What each path costs on a TPU, and why the default block (1,024) holds every position of
our tasks at once (benchmarks/README.md, "Attention at 916 positions"): under XLA every
[L, L] intermediate goes through HBM, so smaller blocks only save memory, and skipping
masked 128-blocks costs more in small operations than it saves; xla.attention_kernel
(runtime/attention_kernel.py) is the fused kernel that keeps the scores on chip and does
skip them.

The mask is boolean [L, L], True where query i may read key j (model/attention_mask.py), and
constant: the schedule depends on it.
"""

import dataclasses
import functools

import torch
import torch.nn.functional as F

IMPLS = ('auto', 'dense', 'blockwise')
BLOCK = 1024


@dataclasses.dataclass(frozen=True)
class Span:
    start: int
    stop: int
    masked: bool       # some (query, key) pair of the span is masked out


@dataclasses.dataclass(frozen=True)
class Block:
    start: int
    stop: int
    spans: tuple       # of Span: the positions of the other side it reads, in order


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Which keys each block of queries reads (blocks), and which queries read each block of
    keys (key_blocks: the schedule of the transposed mask), for `length` positions."""
    length: int
    block: int
    blocks: tuple      # of Block
    key_blocks: tuple  # of Block

    @property
    def pairs_computed(self):
        """(query, key) scores the schedule computes, padded spans included."""
        return sum((b.stop - b.start) * (s.stop - s.start) for b in self.blocks for s in b.spans)


def schedule(length, mask=None, block=BLOCK, span=0):
    """The blockwise schedule for `length` positions: queries and keys in blocks of `block`
    (the last one shorter), a query block's visible key blocks merged into spans of up to
    `span` positions (0: a span runs as far as the visible blocks are consecutive). `mask`
    is a boolean [length, length] CPU tensor or None (every pair); every query must see a key."""
    if block < 1:
        raise ValueError(f'attention block {block} must be >= 1')
    if mask is not None and tuple(mask.shape) != (length, length):
        raise ValueError(f'attention mask of shape {tuple(mask.shape)} for {length} positions')
    plan = Schedule(length, block, _blocks(length, mask, block, span),
                    _blocks(length, None if mask is None else mask.t(), block, span))
    if any(not b.spans for b in plan.blocks):
        raise ValueError('the attention mask leaves queries that read no key')
    return plan


def _blocks(length, mask, block, span):
    """The Blocks of rows of `mask` ([rows, columns]; None: all True), each with the spans of
    columns it reads."""
    bounds = [(s, min(s + block, length)) for s in range(0, length, block)]
    limit = span or length
    blocks = []
    for r0, r1 in bounds:
        spans = []
        for c0, c1 in bounds:
            if mask is not None and not bool(mask[r0:r1, c0:c1].any()):
                continue
            if spans and spans[-1][1] == c0 and c1 - spans[-1][0] <= limit:
                spans[-1] = (spans[-1][0], c1)
            else:
                spans.append((c0, c1))
        blocks.append(Block(r0, r1, tuple(
            Span(c0, c1, mask is not None and not bool(mask[r0:r1, c0:c1].all())) for c0, c1 in spans)))
    return tuple(blocks)


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


def _scores(q, k, scale, mask, start, stop, span):
    """Scores [queries start:stop, keys of the span] in float32, masked."""
    s = _product(q, k.transpose(-1, -2)) * scale
    if span.masked:
        s = s.masked_fill(~mask[start:stop, span.start:span.stop], float('-inf'))
    return s


def _scores_t(k, q_t, scale, mask, start, stop, span):
    """Scores transposed, [keys start:stop, queries of the span], from q^T, in float32, masked."""
    s = _product(k, q_t) * scale
    if span.masked:
        s = s.masked_fill(~mask[span.start:span.stop, start:stop].t(), float('-inf'))
    return s


def _row_max(qb, k, mask, block, scale):
    """The first pass: each query's largest score over its spans, float32 [..., queries, 1]."""
    row_max = None
    for span in block.spans:
        s = _scores(qb, k[..., span.start:span.stop, :], scale, mask, block.start, block.stop, span)
        m = s.amax(-1, keepdim=True)
        row_max = m if row_max is None else torch.maximum(row_max, m)
    return row_max


def _forward_block(q, k, v, mask, block, scale, barrier):
    """(out, lse) of one query block, in two passes over its spans: the row max, then the
    probabilities, their float32 sum and their product with v."""
    qb = q[..., block.start:block.stop, :]
    row_max = _row_max(qb, k, mask, block, scale)
    if barrier is not None:
        # Else the second pass's scores equal the first's, and XLA computes them once and
        # keeps them, float32, for both: three reads and a write of 4 bytes a score where
        # recomputing them costs a matmul and writes each probability once, in 2.
        qb, k, row_max = barrier([qb, k, row_max])
    row_sum = acc = None
    for span in block.spans:
        s = _scores(qb, k[..., span.start:span.stop, :], scale, mask, block.start, block.stop, span)
        p = torch.exp(s - row_max)
        p_sum = p.sum(-1, keepdim=True)
        pv = _product(p.to(v.dtype), v[..., span.start:span.stop, :])
        acc, row_sum = (pv, p_sum) if acc is None else (acc + pv, row_sum + p_sum)
    return (acc / row_sum).to(q.dtype), row_max + torch.log(row_sum)


def _probabilities(scores, lse, like):
    """exp(scores - lse) rounded to like's dtype, in float32: the backward writes each
    probability once, in the activation dtype, for its value gradient and its score gradient
    both (the forward rounds them so for its value product too)."""
    return _wide(torch.exp(scores - lse).to(like.dtype))


class _Blockwise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, plan, barrier):
        scale = q.shape[-1] ** -0.5
        parts = [_forward_block(q, k, v, mask, block, scale, barrier) for block in plan.blocks]
        out = torch.cat([o for o, _ in parts], dim=-2) if len(parts) > 1 else parts[0][0]
        lse = torch.cat([l for _, l in parts], dim=-2) if len(parts) > 1 else parts[0][1]
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.plan, ctx.barrier = plan, barrier
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, mask = ctx.saved_tensors
        plan = ctx.plan
        scale = q.shape[-1] ** -0.5
        grad_out = grad_out.to(q.dtype)
        if ctx.barrier is not None:
            # The recomputed blocks then read values that exist only once the output's
            # gradient does: a compiler can neither merge them with the forward's blocks
            # (which would keep those alive until here) nor compute them early.
            q, k, v, out, lse, grad_out = ctx.barrier([q, k, v, out, lse, grad_out])
        # d softmax: dS = P * (dP - rowsum(dO * O)).
        delta = (_wide(grad_out) * _wide(out)).sum(-1, keepdim=True)
        # Two passes, each block's scores recomputed in the orientation its products contract:
        # dq by query blocks (scores [queries, keys]), dk and dv by key blocks ([keys, queries]).
        dq = []
        for block in plan.blocks:
            rows = slice(block.start, block.stop)
            qb, dob = q[..., rows, :], grad_out[..., rows, :]
            acc = None
            for span in block.spans:
                keys = slice(span.start, span.stop)
                kb, vb = k[..., keys, :], v[..., keys, :]
                p = _probabilities(_scores(qb, kb, scale, mask, block.start, block.stop, span), lse[..., rows, :], q)
                ds = (p * (_product(dob, vb.transpose(-1, -2)) - delta[..., rows, :]) * scale).to(q.dtype)
                part = _product(ds, kb)
                acc = part if acc is None else acc + part
            dq.append(acc)
        lse_t, delta_t = lse.transpose(-1, -2), delta.transpose(-1, -2)
        q_t, do_t = q.transpose(-1, -2), grad_out.transpose(-1, -2)
        dk, dv = [], []
        for block in plan.key_blocks:
            keys = slice(block.start, block.stop)
            kb, vb = k[..., keys, :], v[..., keys, :]
            dk_acc = dv_acc = None
            for span in block.spans:
                rows = slice(span.start, span.stop)
                s_t = _scores_t(kb, q_t[..., rows], scale, mask, block.start, block.stop, span)
                p_t = _probabilities(s_t, lse_t[..., rows], q)
                dv_part = _product(p_t, grad_out[..., rows, :])
                ds_t = (p_t * (_product(vb, do_t[..., rows]) - delta_t[..., rows]) * scale).to(q.dtype)
                dk_part = _product(ds_t, q[..., rows, :])
                dk_acc = dk_part if dk_acc is None else dk_acc + dk_part
                dv_acc = dv_part if dv_acc is None else dv_acc + dv_part
            if dk_acc is None:   # keys no query reads
                dk_acc = dv_acc = torch.zeros_like(_wide(kb))
            dk.append(dk_acc)
            dv.append(dv_acc)

        def whole(parts, like):
            return (torch.cat(parts, dim=-2) if len(parts) > 1 else parts[0]).to(like.dtype)

        return whole(dq, q), whole(dk, k), whole(dv, v), None, None, None


def blockwise(q, k, v, mask=None, plan=None, block=BLOCK, barrier=None):
    """softmax(q k^T / sqrt(d), masked) v for q, k, v [..., L, d] by blocks of queries (see the
    module's docstring). `plan`: schedule(L, mask, ...), made once on the host; without a mask
    it may be left out (then made here, with `block`). `barrier`: fn(tensors) -> tensors that
    nothing may read before all of them exist (Runtime.serialize); given, the forward's second
    pass recomputes its scores behind it (from the row max on) and so does the backward (from
    the output's gradient on)."""
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
    return _Blockwise.apply(q, k, v, mask, plan, barrier)


def dense(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d), masked) v by F.scaled_dot_product_attention (non-causal)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False)
