"""Self-attention as fused Pallas TPU kernels (flash attention): scores stay on chip.

softmax(q k^T / sqrt(d), masked) v of every (example, head), with the queries in blocks of
128 and, per query block, the keys in blocks of 128 under an online softmax (running max and
sum in float32), so the [L, L] scores and probabilities never reach HBM: a call reads q, k,
v and writes the output and one log-sum-exp per query. The backward is two kernels that
recompute each block's probabilities from the log-sum-exp: one accumulates dq over the key
blocks (and forms rowsum(dO * O) on the way), the other dk and dv over the query blocks. A
static mask skips the key blocks a query block cannot see at all (their products are not
computed) and adds a -inf bias in the others it covers in part.

Layout: the kernels take q, k, v, the output and their gradients as [B, H x d, L], the heads
side by side and the positions on the lanes, unpadded: the layout XLA gives the model's
[B, L, H, d] projections (positions minor), so the transposes around the calls are free and
the step pads and copies nothing for them. A program takes one example's group of 128 rows
(128 / d heads; the whole width when it is narrower) and one block of 128 queries (or keys);
a query block past the end of the sequence is read partly from beyond it, which changes only
its own columns (dropped on writing), and the last key block is simply shorter. The scores
are held transposed, s^T = k q^T [keys, queries], so the per-query figures (running max,
sum, log-sum-exp, rowsum(dO * O)) are rows on the lanes, [B, groups, heads per group, L]
float32 in and out. A head's products take all 128 rows of q^T (or dO^T) with the other
heads' rows zeroed: the MXU is 128 deep, so that costs what a d-deep product does.

Pure JAX, imported only where a kernel is lowered (runtime.xla on a TPU, the TPU compiler,
tests in JAX's interpret mode on the CPU). Products take the operands' dtype (bfloat16 on a
TPU) and accumulate in float32; the probabilities are rounded to it for the products that
read them, as in the blockwise torch path (model/attention.py).
"""

import functools

BLOCK = 128
LANES = 128
# The longest sequences: without a mask (k and v of an example's lane group stay in VMEM),
# and with one (its bias, [L, L] in the operands' dtype, stays in VMEM whole: 2 MiB at 1024).
MAX_LENGTH = 4096
MAX_MASKED_LENGTH = 1024
_NO_MAX = -1e30


def blocks_of(length):
    return -(-length // BLOCK)


def padded_length(length):
    """The length the mask's block table and bias cover: whole blocks."""
    return blocks_of(length) * BLOCK


def query_block(length):
    """Queries (and keys) a program takes: a block, or the whole of a shorter sequence."""
    return min(BLOCK, length)


def lane_groups(width, head_dim):
    """(lanes a program reads, heads among them) for q of width H x d: 128 lanes, or the whole
    of a narrower width. ValueError where heads would straddle two groups."""
    group = min(LANES, width)
    if head_dim > group or group % head_dim or width % group:
        raise ValueError(f'the attention kernel takes heads of a width dividing {LANES} (and q, k, v of a width '
                         f'that is a multiple of {LANES} or less); got heads of {head_dim} in {width}')
    return group, group // head_dim


def row_shape(batch, width, length, head_dim):
    """The per-query rows' shape (log-sum-exp, rowsum(dO * O)) for q^T [batch, width, length]:
    [batch, lane groups, heads per group, length]."""
    group, heads = lane_groups(width, head_dim)
    return batch, width // group, heads, length


def _contract(a, b, dims):
    import jax
    import jax.numpy as jnp
    return jax.lax.dot_general(a, b, (dims, ((), ())), preferred_element_type=jnp.float32)


def padded_mask(mask, length):
    """The kernels' view of a boolean [L, L] mask (numpy), [P, P]: padded keys masked, padded
    queries reading key 0 only (their columns stay finite)."""
    import numpy as np
    padded = padded_length(length)
    full = np.zeros((padded, padded), bool)
    full[:length, :length] = mask
    full[length:, 0] = True
    return full


def table_of(full):
    """The block table of a [P, P] padded mask: int32 [blocks^2], 1 where query block i reads
    some key of key block j (entry i * blocks + j)."""
    import numpy as np
    blocks = full.shape[0] // BLOCK
    return full.reshape(blocks, BLOCK, blocks, BLOCK).any((1, 3)).reshape(-1).astype(np.int32)


def bias_layout(full_t, length):
    """[P (keys), P (queries)] -> [blocks, P, query_block(length)]: the kernels' layout of the
    mask's bias, by query block (a numpy array or a torch tensor)."""
    padded, width = full_t.shape[0], query_block(length)
    blocks = padded // BLOCK
    return full_t[:, :blocks * width].reshape(padded, blocks, width).swapaxes(0, 1)


def _head_rows(shape, h, d):
    """Where rows (lanes of the model's q, dO) h*d .. (h+1)*d lie: head h's."""
    import jax
    import jax.numpy as jnp
    rows = jax.lax.broadcasted_iota(jnp.int32, shape, 0)
    return (rows >= h * d) & (rows < (h + 1) * d)


def _only(t, where):
    import jax.numpy as jnp
    return jnp.where(where, t, jnp.zeros_like(t))


def _scores(kt, qt, bias, scale):
    """s^T [keys, queries] of one tile in float32: k^T [lanes, keys], q^T [lanes, queries] (one
    head's lanes, the rest zero), `bias` [keys, queries] (0 or -inf) or None."""
    import jax.numpy as jnp
    s = _contract(kt, qt, ((0,), (0,))) * scale
    return s if bias is None else s + bias.astype(jnp.float32)


def _span(j, length):
    """Positions of block j: the last one is shorter where the length is not a multiple."""
    return slice(j * BLOCK, min((j + 1) * BLOCK, length))


def _each_visible(table_ref, blocks, length, entry, body):
    """body(b, positions of block b) under the table's entry(b), for every block b: the key
    blocks one query block reads, or the query blocks that read one key block."""
    from jax.experimental import pallas as pl
    for b in range(blocks):
        pl.when(table_ref[entry(b)] > 0)(functools.partial(body, b, _span(b, length)))


def _forward_kernel(table_ref, qt_ref, kt_ref, vt_ref, *refs, scale, length, blocks, d, heads, masked):
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    bias_ref, (ot_ref, lse_ref, max_ref, sum_ref, acc_ref) = (refs[0], refs[1:]) if masked else (None, refs)
    i = pl.program_id(2)
    qt = qt_ref[...]
    for h in range(heads):
        head = _head_rows(qt.shape, h, d)
        qt_h = _only(qt, head)
        max_ref[...] = jnp.full(max_ref.shape, _NO_MAX, jnp.float32)
        sum_ref[...] = jnp.zeros(sum_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

        def from_keys(j, keys):
            vt = vt_ref[:, keys]
            s = _scores(kt_ref[:, keys], qt_h, bias_ref[i, keys, :] if masked else None, scale)
            old = max_ref[...]
            new = jnp.maximum(old, jnp.max(s, axis=0, keepdims=True))
            rescale = jnp.exp(old - new)
            p = jnp.exp(s - new)
            sum_ref[...] = sum_ref[...] * rescale + jnp.sum(p, axis=0, keepdims=True)
            acc_ref[...] = acc_ref[...] * rescale + jnp.dot(vt, p.astype(vt.dtype), preferred_element_type=jnp.float32)
            max_ref[...] = new

        _each_visible(table_ref, blocks, length, lambda j: i * blocks + j, from_keys)

        # The rows of the other heads' lanes hold this head's probabilities times their v.
        total = sum_ref[...]
        part = (acc_ref[...] / total).astype(ot_ref.dtype)
        ot_ref[...] = part if h == 0 else jnp.where(head, part, ot_ref[...])
        lse_ref[h:h + 1, :] = max_ref[...] + jnp.log(total)


def _dq_kernel(table_ref, qt_ref, kt_ref, vt_ref, *refs, scale, length, blocks, d, heads, masked):
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    bias_ref, (dot_ref, ot_ref, lse_ref, dqt_ref, delta_ref, acc_ref) = \
        (refs[0], refs[1:]) if masked else (None, refs)
    i = pl.program_id(2)
    qt, dot_ = qt_ref[...], dot_ref[...]
    products = dot_.astype(jnp.float32) * ot_ref[...].astype(jnp.float32)
    for h in range(heads):
        head = _head_rows(qt.shape, h, d)
        qt_h, dot_h = _only(qt, head), _only(dot_, head)
        # The score gradient's shift, rowsum(dO * O) of the head: written for the dk/dv kernel.
        lse, delta = lse_ref[h:h + 1, :], jnp.sum(_only(products, head), axis=0, keepdims=True)
        delta_ref[h:h + 1, :] = delta
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

        def from_keys(j, keys):
            kt = kt_ref[:, keys]
            p = jnp.exp(_scores(kt, qt_h, bias_ref[i, keys, :] if masked else None, scale) - lse)
            dp = _contract(vt_ref[:, keys], dot_h, ((0,), (0,)))
            ds = (p * (dp - delta) * scale).astype(kt.dtype)
            acc_ref[...] += jnp.dot(kt, ds, preferred_element_type=jnp.float32)

        _each_visible(table_ref, blocks, length, lambda j: i * blocks + j, from_keys)

        part = acc_ref[...].astype(dqt_ref.dtype)
        dqt_ref[...] = part if h == 0 else jnp.where(head, part, dqt_ref[...])


def _dkv_kernel(table_ref, qt_ref, kt_ref, vt_ref, *refs, scale, length, blocks, d, heads, masked):
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    bias_ref, (dot_ref, lse_ref, delta_ref, dkt_ref, dvt_ref, dk_acc, dv_acc) = \
        (refs[0], refs[1:]) if masked else (None, refs)
    j = pl.program_id(2)
    kt, vt = kt_ref[...], vt_ref[...]
    dk_acc[...] = jnp.zeros(dk_acc.shape, jnp.float32)
    dv_acc[...] = jnp.zeros(dv_acc.shape, jnp.float32)
    # Keys of a block past the sequence's end come from beyond it: their gradients are
    # dropped on writing, and they reach no other key's.
    for h in range(heads):
        def from_queries(i, queries):
            qt, dot_ = qt_ref[:, queries], dot_ref[:, queries]
            head = _head_rows(qt.shape, h, d)
            # q and dO of head h alone: its products leave every other head's lanes zero.
            qt_h, dot_h = _only(qt, head), _only(dot_, head)
            bias = None
            if masked:
                rows = pl.ds(pl.multiple_of(j * BLOCK, BLOCK), kt.shape[1])
                bias = bias_ref[i, rows, :][:, :queries.stop - queries.start]
            p = jnp.exp(_scores(kt, qt_h, bias, scale) - lse_ref[h:h + 1, queries])
            dv_acc[...] += _contract(dot_h, p.astype(vt.dtype), ((1,), (1,)))
            dp = _contract(vt, dot_h, ((0,), (0,)))
            ds = (p * (dp - delta_ref[h:h + 1, queries]) * scale).astype(kt.dtype)
            dk_acc[...] += _contract(qt_h, ds, ((1,), (1,)))

        _each_visible(table_ref, blocks, length, lambda i: i * blocks + j, from_queries)

    dkt_ref[...] = dk_acc[...].astype(dkt_ref.dtype)
    dvt_ref[...] = dv_acc[...].astype(dvt_ref.dtype)


def _specs(length, group, heads, masked_shape, per_query_block):
    """BlockSpecs over the (B, lane groups, blocks) grid: per_query_block, a program has one
    block of queries (q^T, the output's, dO^T and dq^T as [128 lanes, block] tiles; per-query
    rows as [heads, block]) and every key; else one block of keys (k^T, v^T and their
    gradients) and every query. The mask's bias is read whole."""
    from jax.experimental import pallas as pl
    rows = query_block(length)
    block = pl.BlockSpec((None, group, rows), lambda b, g, i, t: (b, g, i))
    whole = pl.BlockSpec((None, group, length), lambda b, g, i, t: (b, g, 0))
    specs = {'q': block if per_query_block else whole, 'kv': whole if per_query_block else block,
             'row': pl.BlockSpec((None, None, heads, rows if per_query_block else length),
                                 (lambda b, g, i, t: (b, g, 0, i)) if per_query_block else
                                 (lambda b, g, i, t: (b, g, 0, 0)))}
    if masked_shape is not None:
        specs['bias'] = pl.BlockSpec(masked_shape, lambda b, g, i, t: (0, 0, 0))
    return specs


def _call(kernel, name, operands, inputs, outputs, scratch, per_query_block, head_dim, interpret):
    """One kernel over the (B, lane groups, blocks) grid. operands: table, q^T, k^T, v^T, bias
    or None, then the rest; inputs / outputs: their layouts ('q', 'kv', 'row') past the bias, and
    (layout, dtype) of the results; scratch: shapes of float32 VMEM scratch."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    table, qt, kt, vt, bias, *rest = operands
    batch, width, length = qt.shape
    group, heads = lane_groups(width, head_dim)
    limit = MAX_MASKED_LENGTH if bias is not None else MAX_LENGTH
    if length > limit or kt.shape != qt.shape or vt.shape != qt.shape:
        raise ValueError(f'the attention kernel takes q^T, k^T, v^T [B, H x d, L] alike, L up to {limit}; got '
                         f'{qt.shape}, {kt.shape} and {vt.shape}')
    blocks = blocks_of(length)
    specs = _specs(length, group, heads, None if bias is None else bias.shape, per_query_block)
    full = {'q': qt.shape, 'kv': qt.shape, 'row': row_shape(*qt.shape, head_dim)}
    masked = bias is not None
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(batch, width // group, blocks),
        in_specs=[specs[x] for x in ('q', 'kv', 'kv') + ('bias',) * masked + tuple(inputs)],
        out_specs=[specs[layout] for layout, _ in outputs],
        scratch_shapes=[pltpu.VMEM(shape, jnp.float32) for shape in scratch(group, query_block(length))])
    fn = functools.partial(kernel, scale=head_dim ** -0.5, length=length, blocks=blocks, d=head_dim, heads=heads,
                           masked=masked)
    call = pl.pallas_call(fn, grid_spec=grid_spec, interpret=interpret, name=name,
                          out_shape=[jax.ShapeDtypeStruct(full[layout], dtype) for layout, dtype in outputs],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=('parallel',) * 3))
    return call(table, qt, kt, vt, *([bias] if masked else []), *rest)


def forward(qt, kt, vt, table, head_dim, bias=None, interpret=False):
    """(o^T [B, H x d, L], log-sum-exp [B, groups, heads per group, L] float32) of q^T, k^T, v^T
    [B, H x d, L] (heads of head_dim lanes, positions on the lanes).

    table: int32 [blocks * blocks], > 0 where query block i reads key block j (entry i *
    blocks + j); bias: None, or the mask as 0 / -inf by query block (bias_layout)."""
    import jax.numpy as jnp
    return _call(_forward_kernel, 'attention_forward', (table, qt, kt, vt, bias), (),
                 [('q', qt.dtype), ('row', jnp.float32)],
                 lambda group, rows: [(1, rows), (1, rows), (group, rows)], True, head_dim, interpret)


def dq_and_delta(qt, kt, vt, table, dot, ot, lse, head_dim, bias=None, interpret=False):
    """(dq^T [B, H x d, L], delta [B, groups, heads per group, L] float32) for the output's
    gradient dO^T, from the output o^T and its log-sum-exp: the dq kernel, one program per
    query block, which forms delta = rowsum(dO * O) per head on the way."""
    import jax.numpy as jnp
    return _call(_dq_kernel, 'attention_backward_dq', (table, qt, kt, vt, bias, dot, ot, lse), ('q', 'q', 'row'),
                 [('q', qt.dtype), ('row', jnp.float32)], lambda group, rows: [(group, rows)], True, head_dim,
                 interpret)


def dkv(qt, kt, vt, table, dot, lse, delta, head_dim, bias=None, interpret=False):
    """(dk^T, dv^T) [B, H x d, L]: the dk/dv kernel, one program per key block."""
    return _call(_dkv_kernel, 'attention_backward_dkv', (table, qt, kt, vt, bias, dot, lse, delta),
                 ('q', 'row', 'row'), [('kv', kt.dtype), ('kv', vt.dtype)],
                 lambda group, rows: [(group, rows), (group, rows)], False, head_dim, interpret)


def backward(qt, kt, vt, table, dot, ot, lse, head_dim, bias=None, interpret=False):
    """(dq^T, dk^T, dv^T) of `forward` for the output's gradient dO^T [B, H x d, L], from the
    output o^T and its log-sum-exp: the dq kernel (which also forms delta), then the dk/dv
    kernel."""
    dqt, delta = dq_and_delta(qt, kt, vt, table, dot, ot, lse, head_dim, bias, interpret)
    dkt, dvt = dkv(qt, kt, vt, table, dot, lse, delta, head_dim, bias, interpret)
    return dqt, dkt, dvt


@functools.lru_cache(maxsize=None)
def lowered_for_tpu(kind, batch, length, width, head_dim, masked, dtype='bfloat16'):
    """The lowered (StableHLO) module of one kernel, 'forward', 'dq' or 'dkv', for `batch`
    sequences of `length` positions, q^T, k^T, v^T [batch, width, length] with heads of
    head_dim lanes, with a mask's bias or without: its tpu_custom_call holds the kernel. The
    operands are those of forward, dq_and_delta or dkv, in order. Lowering needs no TPU."""
    import jax
    import jax.numpy as jnp
    dt = jnp.dtype(dtype)
    blocks = blocks_of(length)
    table = jax.ShapeDtypeStruct((blocks * blocks,), jnp.int32)
    x = jax.ShapeDtypeStruct((batch, width, length), dt)
    row = jax.ShapeDtypeStruct(row_shape(batch, width, length, head_dim), jnp.float32)
    bias = [jax.ShapeDtypeStruct((blocks, padded_length(length), query_block(length)), dt)] if masked else []

    def split(args):   # (table, q, k, v, bias or None, rest)
        return args[:4] + ((args[4],) if masked else (None,)), args[4 + masked:]

    if kind == 'forward':
        def fn(*args):
            (t, q, k, v, b), _ = split(args)
            return forward(q, k, v, t, head_dim, b)
        args = [table, x, x, x] + bias
    elif kind == 'dq':
        def fn(*args):
            (t, q, k, v, b), (dot, ot, lse) = split(args)
            return dq_and_delta(q, k, v, t, dot, ot, lse, head_dim, b)
        args = [table, x, x, x] + bias + [x, x, row]
    elif kind == 'dkv':
        def fn(*args):
            (t, q, k, v, b), (dot, lse, delta) = split(args)
            return dkv(q, k, v, t, dot, lse, delta, head_dim, b)
        args = [table, x, x, x] + bias + [x, row, row]
    else:
        raise ValueError(f'kind={kind!r}')
    return jax.jit(fn).trace(*args).lower(lowering_platforms=('tpu',)).compiler_ir()


def is_attention_call(operands):
    """Whether a Mosaic kernel call (tpu_aot.mosaic_kernels' operand dims) is one of these
    kernels: their first operand is the 1-D block table."""
    return bool(operands) and operands[0] is not None and len(operands[0]) == 1


def call_figures(results, operands, visible=1.0):
    """(FLOPs the MXU spends, HBM bytes moved) of one kernel call seen in a compiled module
    (tpu_aot.mosaic_kernels: result and operand dims), `visible` the share of the 128 x 128
    tiles the mask leaves (the block table's values are not in the module). Per tile and
    head, each product is 2 x 128 x 128 x 128 FLOPs: a head's product reads a whole group of
    128 lanes (its own, the others' zeroed), the MXU's depth and width, and a short last block
    is padded to the tile. The forward makes 2 products (s, p v), the dq kernel 3 (s, dp, dq),
    the dk/dv kernel 4 (s, dv, dp, dk). Bytes are the operands and results (per-query rows
    and the table 4-byte, the rest 2-byte): the scores stay on chip."""
    batch, width, length = operands[1]
    backward = len(operands) > 5            # the forward reads table, q, k, v and a bias or none
    rows = next(dims for dims in list(results) + list(operands) if len(dims) == 4)
    tiles = batch * rows[1] * rows[2] * blocks_of(length) ** 2 * visible
    products = 4 if len(results[-1]) == 3 and len(results) == 2 else (3 if backward else 2)
    flops = products * tiles * 2 * BLOCK * BLOCK * max(width // rows[1], BLOCK)

    def size(dims):
        count = 1
        for dim in dims:
            count *= dim
        return count * (4 if len(dims) in (1, 4) else 2)

    return flops, sum(size(dims) for dims in list(operands) + list(results))


def roofline(calls, chip_kind, visible=1.0):
    """These kernels' calls of a compiled module ([(result dims, operand dims)]) on one chip
    of `chip_kind`: their count, MXU FLOPs, HBM bytes and roofline seconds, each call's FLOPs
    at the chip's peak or its bytes at its HBM bandwidth, whichever is longer (the softmax's
    elementwise work is not in it). None without calls."""
    if not calls:
        return None
    from trm_spmd.hardware import HBM_GBPS, PEAK_BF16_TFLOPS
    figures = [call_figures(results, operands, visible) for results, operands in calls]
    peak, bandwidth = PEAK_BF16_TFLOPS[chip_kind] * 1e12, HBM_GBPS[chip_kind] * 1e9
    return {'calls': len(calls), 'mxu_flops': sum(f for f, _ in figures), 'bytes': sum(b for _, b in figures),
            'roofline_seconds': sum(max(f / peak, b / bandwidth) for f, b in figures), 'visible_tiles': visible}


def visible_tiles(mask, length):
    """The share of the 128 x 128 tiles the kernels compute for a boolean [L, L] mask (numpy)
    or None (all of them)."""
    if mask is None:
        return 1.0
    table = table_of(padded_mask(mask, length))
    return float(table.sum()) / table.size
