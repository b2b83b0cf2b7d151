"""Self-attention as fused Pallas TPU kernels (flash attention): scores stay on chip.

softmax(q k^T / sqrt(d), masked) v of every (example, head), with the queries in blocks of
128 and, per query block, the keys in blocks of 128 under an online softmax (running max and
sum in float32), so the [L, L] scores and probabilities never reach HBM: a call reads q, k,
v and writes the output and one log-sum-exp per query. The backward is two kernels that
recompute each block's probabilities from the log-sum-exp: one accumulates dq over the key
blocks, the other dk and dv over the query blocks. A static mask skips the key blocks a
query block cannot see at all (their products are not computed) and adds a -inf bias in the
others it covers in part; without a mask only the padding is masked.

Layout: the queries lie on the 128 lanes. The kernels take q, the output and its gradient
transposed, [N, d, L] for N = examples x heads, and k, v [N, L, d]; the per-query figures
(log-sum-exp, rowsum(dO * O)) are then rows [N, 1, L], as the scores' transpose s^T = k q^T
[keys, queries] holds them, with no relayout in the kernels. L is padded to a multiple of 128
by the caller (runtime.xla); the padded keys are masked.

Pure JAX, imported only where a kernel is lowered (runtime.xla on a TPU, the TPU compiler,
tests in JAX's interpret mode on the CPU). Products take the operands' dtype (bfloat16 on a
TPU) and accumulate in float32; the probabilities are rounded to it for the products that
read them, as in the blockwise torch path (model/attention.py).
"""

import functools

BLOCK = 128
# The largest padded lengths: without a mask (k and v of a sequence stay in VMEM), and with
# one (its bias, [L, L] in the operands' dtype, stays in VMEM whole: 2 MiB at 1024 in bfloat16).
MAX_LENGTH = 4096
MAX_MASKED_LENGTH = 1024
_NO_MAX = -1e30
_CORES_PARALLEL = ('parallel', 'parallel')


def padded_length(length):
    return -(-length // BLOCK) * BLOCK


def _contract(a, b, dims):
    import jax
    import jax.numpy as jnp
    return jax.lax.dot_general(a, b, (dims, ((), ())), preferred_element_type=jnp.float32)


def padded_mask(mask, length):
    """The kernels' view of a boolean [L, L] mask (numpy), [P, P]: padded keys masked, padded
    queries reading key 0 only (their rows stay finite)."""
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


def bias_layout(full_t):
    """[P (keys), P (queries)] -> [blocks, P, 128]: the kernels' layout of the mask's bias."""
    padded = full_t.shape[0]
    return full_t.reshape(padded, padded // BLOCK, BLOCK).transpose(1, 0, 2)


def _scores(k, qt, bias, scale, pad_keys):
    """s^T [keys, queries] of one tile in float32, masked: `bias` [keys, queries] (0 or -inf)
    or None; `pad_keys` > 0 masks that many trailing keys (the padding)."""
    import jax
    import jax.numpy as jnp
    s = jnp.dot(k, qt, preferred_element_type=jnp.float32) * scale
    if bias is not None:
        s = s + bias.astype(jnp.float32)
    if pad_keys:
        keys = jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
        s = jnp.where(keys < s.shape[0] - pad_keys, s, -jnp.inf)
    return s


def _key_block(j, length):
    """(rows of key block j, how many of its keys are padding)."""
    return slice(j * BLOCK, (j + 1) * BLOCK), max(0, (j + 1) * BLOCK - length)


def _forward_kernel(table_ref, qt_ref, k_ref, v_ref, *refs, scale, length, blocks, masked):
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    bias_ref, (ot_ref, lse_ref, max_ref, sum_ref, acc_ref) = (refs[0], refs[1:]) if masked else (None, refs)
    i = pl.program_id(1)
    qt = qt_ref[...]
    max_ref[...] = jnp.full(max_ref.shape, _NO_MAX, jnp.float32)
    sum_ref[...] = jnp.zeros(sum_ref.shape, jnp.float32)
    acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
    for j in range(blocks):
        @pl.when(table_ref[i * blocks + j] > 0)
        def _(j=j):
            keys, pad = _key_block(j, length)
            v = v_ref[keys, :]
            s = _scores(k_ref[keys, :], qt, bias_ref[i, keys, :] if masked else None, scale, pad)
            old = max_ref[...]
            new = jnp.maximum(old, jnp.max(s, axis=0, keepdims=True))
            rescale = jnp.exp(old - new)
            p = jnp.exp(s - new)
            sum_ref[...] = sum_ref[...] * rescale + jnp.sum(p, axis=0, keepdims=True)
            acc_ref[...] = acc_ref[...] * rescale + _contract(v, p.astype(v.dtype), ((0,), (0,)))
            max_ref[...] = new

    total = sum_ref[...]
    ot_ref[...] = (acc_ref[...] / total).astype(ot_ref.dtype)
    lse_ref[...] = max_ref[...] + jnp.log(total)


def _dq_kernel(table_ref, qt_ref, k_ref, v_ref, *refs, scale, length, blocks, masked):
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    bias_ref, (dot_ref, lse_ref, delta_ref, dqt_ref, acc_ref) = (refs[0], refs[1:]) if masked else (None, refs)
    i = pl.program_id(1)
    qt, dot_, lse, delta = qt_ref[...], dot_ref[...], lse_ref[...], delta_ref[...]
    acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
    for j in range(blocks):
        @pl.when(table_ref[i * blocks + j] > 0)
        def _(j=j):
            keys, pad = _key_block(j, length)
            k = k_ref[keys, :]
            p = jnp.exp(_scores(k, qt, bias_ref[i, keys, :] if masked else None, scale, pad) - lse)
            dp = jnp.dot(v_ref[keys, :], dot_, preferred_element_type=jnp.float32)
            ds = (p * (dp - delta) * scale).astype(k.dtype)
            acc_ref[...] += _contract(k, ds, ((0,), (0,)))

    dqt_ref[...] = acc_ref[...].astype(dqt_ref.dtype)


def _dkv_kernel(table_ref, qt_ref, k_ref, v_ref, *refs, scale, length, blocks, masked):
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    bias_ref, (dot_ref, lse_ref, delta_ref, dk_ref, dv_ref, dk_acc, dv_acc) = \
        (refs[0], refs[1:]) if masked else (None, refs)
    j = pl.program_id(1)
    k, v = k_ref[...], v_ref[...]
    dk_acc[...] = jnp.zeros(dk_acc.shape, jnp.float32)
    dv_acc[...] = jnp.zeros(dv_acc.shape, jnp.float32)
    # Padded keys are not masked here: their gradients are dropped by the caller, and they
    # reach no other gradient (their k and v are zeros).
    for i in range(blocks):
        @pl.when(table_ref[i * blocks + j] > 0)
        def _(i=i):
            queries = slice(i * BLOCK, (i + 1) * BLOCK)
            qt, dot_ = qt_ref[:, queries], dot_ref[:, queries]
            bias = bias_ref[i, pl.ds(pl.multiple_of(j * BLOCK, BLOCK), BLOCK), :] if masked else None
            s = _scores(k, qt, bias, scale, 0)
            p = jnp.exp(s - lse_ref[:, queries])
            dv_acc[...] += _contract(p.astype(v.dtype), dot_, ((1,), (1,)))
            dp = jnp.dot(v, dot_, preferred_element_type=jnp.float32)
            ds = (p * (dp - delta_ref[:, queries]) * scale).astype(k.dtype)
            dk_acc[...] += _contract(ds, qt, ((1,), (1,)))

    dk_ref[...] = dk_acc[...].astype(dk_ref.dtype)
    dv_ref[...] = dv_acc[...].astype(dv_ref.dtype)


def _specs(d, padded, per_query_block):
    """BlockSpecs by layout over the (N, blocks) grid: per_query_block, a program has one
    query block (q^T, the output and the per-query rows in [d, 128] / [1, 128] tiles) and
    every key; else one key block ([128, d] tiles of k, v and their gradients) and every query.
    The mask's bias is read whole."""
    from jax.experimental import pallas as pl
    # The mask's bias, whole in VMEM for every program: [query blocks, keys, 128 queries].
    bias = pl.BlockSpec((padded // BLOCK, padded, BLOCK), lambda b, i, t: (0, 0, 0))
    if per_query_block:
        return {'qt': pl.BlockSpec((None, d, BLOCK), lambda b, i, t: (b, 0, i)),
                'kv': pl.BlockSpec((None, padded, d), lambda b, i, t: (b, 0, 0)),
                'row': pl.BlockSpec((None, 1, BLOCK), lambda b, i, t: (b, 0, i)),
                'bias': bias}
    return {'qt': pl.BlockSpec((None, d, padded), lambda b, j, t: (b, 0, 0)),
            'kv': pl.BlockSpec((None, BLOCK, d), lambda b, j, t: (b, j, 0)),
            'row': pl.BlockSpec((None, 1, padded), lambda b, j, t: (b, 0, 0)),
            'bias': bias}


def _call(kernel, name, operands, inputs, outputs, scratch, per_query_block, length, interpret):
    """One kernel over the (N, blocks) grid. operands: table, q^T, k, v, bias or None, then
    the rest; inputs / outputs: their layouts ('qt', 'kv', 'row') past the bias, and (layout,
    dtype) of the results; scratch: shapes of float32 VMEM scratch."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    table, qt, k, v, bias, *rest = operands
    n, d, padded = qt.shape
    limit = MAX_MASKED_LENGTH if bias is not None else MAX_LENGTH
    if padded % BLOCK or padded > limit or k.shape != (n, padded, d) or length > padded:
        raise ValueError(f'the attention kernel takes q^T [N, d, L] and k [N, L, d], L a multiple of {BLOCK} up '
                         f'to {limit} holding the {length} positions; got {qt.shape} and {k.shape}')
    blocks = padded // BLOCK
    specs = _specs(d, padded, per_query_block)
    full = {'qt': (n, d, padded), 'kv': (n, padded, d), 'row': (n, 1, padded)}
    masked = bias is not None
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(n, blocks),
        in_specs=[specs[x] for x in ('qt', 'kv', 'kv') + ('bias',) * masked + tuple(inputs)],
        out_specs=[specs[layout] for layout, _ in outputs],
        scratch_shapes=[pltpu.VMEM(shape, jnp.float32) for shape in scratch])
    fn = functools.partial(kernel, scale=d ** -0.5, length=length, blocks=blocks, masked=masked)
    call = pl.pallas_call(fn, grid_spec=grid_spec, interpret=interpret, name=name,
                          out_shape=[jax.ShapeDtypeStruct(full[layout], dtype) for layout, dtype in outputs],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=('parallel', 'parallel')))
    return call(table, qt, k, v, *([bias] if masked else []), *rest)


def forward(qt, k, v, table, bias=None, length=None, interpret=False):
    """(o^T [N, d, L], log-sum-exp [N, 1, L] float32) of q^T [N, d, L], k, v [N, L, d].

    table: int32 [blocks * blocks], > 0 where query block i reads key block j (entry i *
    blocks + j); bias: None, or the mask as 0 / -inf by query block, [blocks, L (keys), 128
    (queries)] (bias_layout), every padded key at -inf; length: the positions that are not
    padding (default L)."""
    import jax.numpy as jnp
    length = length or qt.shape[2]
    return _call(_forward_kernel, 'attention_forward', (table, qt, k, v, bias), (), [('qt', qt.dtype),
                 ('row', jnp.float32)], [(1, BLOCK), (1, BLOCK), (qt.shape[1], BLOCK)], True, length, interpret)


def _backward_calls(which, qt, k, v, table, dot, lse, delta, bias, length, interpret=False):
    """The dq kernel, the dk/dv kernel or both ('dq', 'dkv', 'both') -> (dq^T, dk, dv), None for
    what was not computed."""
    operands = (table, qt, k, v, bias, dot, lse, delta)
    d = qt.shape[1]
    dqt = dk = dv = None
    if which in ('dq', 'both'):
        dqt, = _call(_dq_kernel, 'attention_backward_dq', operands, ('qt', 'row', 'row'), [('qt', qt.dtype)],
                     [(d, BLOCK)], True, length, interpret)
    if which in ('dkv', 'both'):
        dk, dv = _call(_dkv_kernel, 'attention_backward_dkv', operands, ('qt', 'row', 'row'),
                       [('kv', k.dtype), ('kv', v.dtype)], [(BLOCK, d), (BLOCK, d)], False, length, interpret)
    return dqt, dk, dv


def backward(qt, k, v, table, dot, lse, delta, bias=None, length=None, interpret=False):
    """(dq^T, dk, dv) of `forward` for the output's gradient dO^T [N, d, L], from its
    log-sum-exp and delta = rowsum(dO * O) [N, 1, L] float32: two kernels, dq (per query
    block) and dk, dv (per key block). Gradients of padded positions are not meaningful."""
    return _backward_calls('both', qt, k, v, table, dot, lse, delta, bias, length or qt.shape[2], interpret)


@functools.lru_cache(maxsize=None)
def lowered_for_tpu(kind, n, d, padded, length, masked, dtype='bfloat16'):
    """The lowered (StableHLO) module of one kernel, 'forward', 'dq' or 'dkv', for n
    sequences (examples x heads) of `padded` positions (`length` of them real) and head
    dimension d, with a mask's bias or without: its tpu_custom_call holds the kernel. The
    operands are those of forward / backward, in order. Lowering needs no TPU."""
    import jax
    import jax.numpy as jnp
    dt = jnp.dtype(dtype)
    blocks = padded // BLOCK
    table = jax.ShapeDtypeStruct((blocks * blocks,), jnp.int32)
    qt = jax.ShapeDtypeStruct((n, d, padded), dt)
    kv = jax.ShapeDtypeStruct((n, padded, d), dt)
    row = jax.ShapeDtypeStruct((n, 1, padded), jnp.float32)
    bias = [jax.ShapeDtypeStruct((blocks, padded, BLOCK), dt)] if masked else []

    def split(args):   # (table, qt, k, v, bias or None, rest)
        return args[:4] + ((args[4],) if masked else (None,)), args[4 + masked:]

    if kind == 'forward':
        def fn(*args):
            (t, q, k, v, b), _ = split(args)
            return forward(q, k, v, t, b, length)
        args = [table, qt, kv, kv] + bias
    elif kind in ('dq', 'dkv'):
        def fn(*args):
            (t, q, k, v, b), (dot, lse, delta) = split(args)
            dqt, dk, dv = _backward_calls(kind, q, k, v, t, dot, lse, delta, b, length)
            return dqt if kind == 'dq' else (dk, dv)
        args = [table, qt, kv, kv] + bias + [qt, row, row]
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
    tiles the mask leaves (the block table's values are not in the module). Per tile, each
    product is 2 x 128 x 128 x d FLOPs with d (64 for the maze) counted as 128, the MXU's
    depth and width, whichever of them it fills: the forward makes 2 (s, p v), the dq kernel
    3 (s, dp, dq), the dk/dv kernel 4 (s, dv, dp, dk). Bytes are the operands and results
    (per-query rows float32, the table int32, the rest 2-byte): the scores stay on chip."""
    n, d, padded = operands[1]
    tiles = n * (padded // BLOCK) ** 2 * visible
    products = 2 if len(results) == 2 and results[1][1] == 1 else (3 if len(results) == 1 else 4)
    flops = products * tiles * 2 * BLOCK * BLOCK * max(d, BLOCK)

    def size(dims):
        count = 1
        for dim in dims:
            count *= dim
        return count * (4 if len(dims) == 1 or (len(dims) == 3 and dims[1] == 1) else 2)

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
