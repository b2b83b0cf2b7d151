"""Sudoku symmetries (the reference's augmentation), vectorized over a batch.

A symmetry relabels the digits 1..9, transposes with probability 1/2, permutes the
bands and the rows inside each band, and the stacks and the columns inside each stack.
Every such map sends a valid puzzle/solution pair to a valid pair, so one symmetry is
applied to a question and its answer alike. Grids here are token arrays (0 pad,
1 blank, digit d -> d + 1): pad and blank stay fixed.
"""

import dataclasses
import itertools

import numpy as np

_PERMUTATIONS_OF_3 = np.array(list(itertools.permutations(range(3))), np.intp)
DRAWS = 20   # uniform numbers per symmetry: 18 used, padded to Philox's block of 4


@dataclasses.dataclass
class Symmetries:
    token_map: np.ndarray    # uint8 [n, 11]: new token of each old token
    source: np.ndarray       # intp [n, 81]: output cell i takes input cell source[i]


def _line_permutations(u):
    """[n, 9] permutations of 0..8 that keep the three groups of three together, from
    uniform u [n, 4]: one number orders the groups, one orders each group's lines."""
    pick = np.minimum((u * 6).astype(np.intp), 5)
    groups = _PERMUTATIONS_OF_3[pick[:, 0]]
    within = _PERMUTATIONS_OF_3[pick[:, 1:]]
    return (groups[:, :, None] * 3 + within).reshape(-1, 9)


def from_uniform(u):
    """One symmetry per row of uniform numbers u [n, DRAWS] in [0, 1)."""
    n = u.shape[0]
    digits = np.argsort(u[:, :9], axis=1).astype(np.uint8) + np.uint8(2)
    token_map = np.concatenate([np.broadcast_to(np.arange(2, dtype=np.uint8), (n, 2)), digits], axis=1)
    transpose = u[:, 9] < 0.5
    rows = _line_permutations(u[:, 10:14])
    cols = _line_permutations(u[:, 14:18])
    # Cell (r, c) reads (rows[r], cols[c]), or (cols[c], rows[r]) when transposed: flat
    # index rows[r] * 9 + cols[c] or rows[r] + cols[c] * 9, i.e. the line strides swap.
    row_stride = np.where(transpose, 1, 9)[:, None]
    source = ((rows * row_stride)[:, :, None] + (cols * (10 - row_stride))[:, None, :]).reshape(n, 81)
    return Symmetries(token_map=token_map, source=source)


def random_symmetries(rng, n):
    """n independent random symmetries drawn from a numpy Generator."""
    return from_uniform(rng.random((n, DRAWS)))


def apply(symmetries, tokens):
    """Applies symmetry k to row k of tokens [n, 81] (values 0..10); keeps the dtype."""
    tokens = np.ascontiguousarray(tokens)
    row = np.arange(tokens.shape[0])[:, None]
    # Flat gathers: cheaper than 2-D fancy indexing or take_along_axis at these sizes.
    moved = tokens.reshape(-1)[symmetries.source + row * tokens.shape[1]]
    mapped = np.ascontiguousarray(symmetries.token_map).reshape(-1)[moved + row * symmetries.token_map.shape[1]]
    return mapped.astype(tokens.dtype, copy=False)
