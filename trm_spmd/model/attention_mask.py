"""Which positions a position may attend to (model.attention_mask), as a boolean [L, L] matrix.

Row i, column j is True where position i reads position j. The puzzle-embedding prefix is
global: every position reads it and it reads every position, so what the puzzle embedding
carries reaches every cell, and a prefix token can relay between cells a structure keeps
apart. The cells' structure:

  full     every pair (no mask: plain dense attention)
  sudoku   the constraint graph of a 9x9 Sudoku: a cell reads the 21 cells of its row,
           column and 3x3 box (itself included)
  window   a square grid (side sqrt(seq_len)): a cell reads the cells within Chebyshev
           distance model.attention_window, a (2r+1) x (2r+1) square clipped at the border

A dense attention kernel still computes every score and then drops the masked ones: the
mask restricts what a cell sees, not how much work the attention does.
"""

import math

import torch

KINDS = ('full', 'sudoku', 'window')
SUDOKU_SIDE = 9


def _grid_coordinates(side):
    cells = torch.arange(side * side)
    return cells // side, cells % side


def _sudoku_cells():
    rows, cols = _grid_coordinates(SUDOKU_SIDE)
    boxes = (rows // 3) * 3 + cols // 3
    same = [k[:, None] == k[None, :] for k in (rows, cols, boxes)]
    return same[0] | same[1] | same[2]


def _window_cells(seq_len, radius):
    rows, cols = _grid_coordinates(math.isqrt(seq_len))
    return torch.maximum((rows[:, None] - rows[None, :]).abs(), (cols[:, None] - cols[None, :]).abs()) <= radius


def fits(kind, seq_len):
    """None if `kind` can structure seq_len cells, else why not (for a config error)."""
    if kind == 'sudoku' and seq_len != SUDOKU_SIDE ** 2:
        return f'needs the {SUDOKU_SIDE ** 2} cells of a 9x9 Sudoku'
    if kind == 'window' and math.isqrt(seq_len) ** 2 != seq_len:
        return 'needs a square grid (seq_len a square number)'
    return None


def attention_mask(kind, seq_len, prefix_len, radius=1):
    """Boolean [prefix_len + seq_len]^2 (True: may attend), or None for 'full'."""
    if kind == 'full':
        return None
    if kind not in KINDS or fits(kind, seq_len):
        raise ValueError(f'attention mask {kind!r} does not fit {seq_len} cells')
    cells = _sudoku_cells() if kind == 'sudoku' else _window_cells(seq_len, radius)
    total = prefix_len + seq_len
    mask = torch.ones(total, total, dtype=torch.bool)
    mask[prefix_len:, prefix_len:] = cells
    return mask
