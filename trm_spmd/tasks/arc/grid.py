"""ARC grids as numpy arrays: checks, the official token layout, symmetries, names, hashes.

An ARC grid is a list of rows of colours 0-9, 1x1 to 30x30. A model row is a 30x30 canvas
of tokens (the official builder's): PAD 0, EOS 1, colour c -> c + 2. The grid sits at some
(row, col) of the canvas, with a row of EOS under it and a column of EOS right of it where
they fit; the rest is PAD. Augmented copies of a task are named after the symmetry and the
colour mapping that made them, so a prediction can be mapped back to the original task.
"""

import hashlib

import numpy as np

from trm_spmd.data.errors import PuzzleError

GRID = 30
SEQ_LEN = GRID * GRID
PAD, EOS, COLOUR0 = 0, 1, 2
VOCAB_SIZE = COLOUR0 + 10
DIHEDRAL_INVERSE = (0, 3, 2, 1, 4, 5, 6, 7)    # dihedral(dihedral(x, k), DIHEDRAL_INVERSE[k]) == x
SEPARATOR = '|||'


def check_grid(grid, where):
    """uint8 [rows, cols] of a grid read from JSON; a PuzzleError names `where` and the fault
    (rows and columns counted from 1, as for Sudoku and mazes)."""
    if not isinstance(grid, list) or not all(isinstance(row, list) for row in grid):
        raise PuzzleError(f'{where}: is not a list of rows of colours 0-9')
    if not grid or not grid[0]:
        raise PuzzleError(f'{where}: is empty; a grid has at least one row and one column')
    for r, row in enumerate(grid):
        if len(row) != len(grid[0]):
            raise PuzzleError(f'{where}: row {r + 1} has {len(row)} cells, row 1 has {len(grid[0])}')
    if len(grid) > GRID or len(grid[0]) > GRID:
        raise PuzzleError(f'{where}: is {len(grid)}x{len(grid[0])}, over the {GRID}x{GRID} limit of ARC grids')
    for r, row in enumerate(grid):
        for c, x in enumerate(row):
            if type(x) is not int or not 0 <= x <= 9:    # (bool is an int subclass, not a colour)
                raise PuzzleError(f'{where}: row {r + 1} column {c + 1} holds {x!r}, not a colour 0-9')
    return np.array(grid, np.uint8)


def _place(grid, row, col):
    """The 30x30 canvas of one grid at (row, col), with its EOS row and column, flattened."""
    n, m = grid.shape
    if not (0 <= row and 0 <= col and row + n <= GRID and col + m <= GRID):
        raise ValueError(f'a {n}x{m} grid does not fit the {GRID}x{GRID} canvas at ({row}, {col})')
    canvas = np.full((GRID, GRID), PAD, np.uint8)
    canvas[row:row + n, col:col + m] = grid + COLOUR0
    if row + n < GRID:
        canvas[row + n, col:col + m] = EOS
    if col + m < GRID:
        canvas[row:row + n, col + m] = EOS
    return canvas.reshape(-1)


def to_tokens(inp, out, row=0, col=0):
    """(input tokens uint8 [900], output tokens uint8 [900]): both grids at the same (row, col)."""
    return _place(np.asarray(inp, np.uint8), row, col), _place(np.asarray(out, np.uint8), row, col)


def crop(tokens):
    """The grid a token row holds, by the official evaluator's rule: the largest rectangle
    anchored at the top-left corner with only colour tokens, minus 2; uint8 [0, 0] if none."""
    colour = np.asarray(tokens).reshape(GRID, GRID)
    colour = (colour >= COLOUR0) & (colour < VOCAB_SIZE)
    leading = np.where(colour.all(axis=1), GRID, np.argmin(colour, axis=1))
    width = np.minimum.accumulate(leading)
    area = np.arange(1, GRID + 1) * width
    best = int(np.argmax(area))                 # the first of equal areas, as the official scan keeps
    if area[best] == 0:
        return np.zeros((0, 0), np.uint8)
    grid = np.asarray(tokens).reshape(GRID, GRID)[:best + 1, :width[best]]
    return (grid - COLOUR0).astype(np.uint8)


def dihedral(grid, k):
    """Symmetry k of a 2-D grid, numbered as the official dataset/common.py: 0 identity,
    1-3 rotations by 90/180/270 degrees counterclockwise, 4 left-right flip, 5 up-down
    flip, 6 transpose, 7 the anti-diagonal reflection."""
    a = np.asarray(grid)
    if k == 0:
        out = a
    elif k in (1, 2, 3):
        out = np.rot90(a, k)
    elif k == 4:
        out = a[:, ::-1]
    elif k == 5:
        out = a[::-1, :]
    elif k == 6:
        out = a.T
    elif k == 7:
        out = np.rot90(a, 1)[:, ::-1]
    else:
        raise ValueError(f'dihedral transform {k!r} is not one of 0..7')
    return np.ascontiguousarray(out)


def inverse_dihedral(grid, k):
    return dihedral(grid, DIHEDRAL_INVERSE[k])


def augmented_name(name, k, mapping):
    """The official name of task `name` under symmetry k after colour mapping (colour c -> mapping[c])."""
    return f'{name}{SEPARATOR}t{k}{SEPARATOR}{"".join(str(int(c)) for c in mapping)}'


def _augmentation(name):
    """(original task name, symmetry k, colour mapping) a name records; k None without one."""
    if SEPARATOR not in name:
        return name, None, None
    original, symmetry, mapping = name.split(SEPARATOR)[0], *name.split(SEPARATOR)[-2:]
    return original, int(symmetry[1:]), np.array([int(c) for c in mapping], np.uint8)


def inverse(name):
    """(original task name, grid -> grid undoing the augmentation the name records); the
    identity for a name without an augmentation."""
    original, k, mapping = _augmentation(name)
    if k is None:
        return name, lambda grid: np.asarray(grid)
    back = np.argsort(mapping).astype(np.uint8)
    return original, lambda grid: back[inverse_dihedral(grid, k)]


def forward(name):
    """grid -> grid: the augmentation the name records (colours mapped, then the symmetry)."""
    _, k, mapping = _augmentation(name)
    if k is None:
        return lambda grid: np.asarray(grid)
    return lambda grid: dihedral(mapping[np.asarray(grid)], k)


def grid_hash(grid):
    """sha256 hex digest of the grid's shape (a byte a side) then its uint8 cells, as the official."""
    cells = np.ascontiguousarray(grid, np.uint8)
    if cells.ndim != 2:
        raise ValueError(f'a grid has 2 dimensions, got shape {cells.shape}')
    return hashlib.sha256(bytes(cells.shape) + cells.tobytes()).hexdigest()


def render(grid):
    """A grid as lines of digits, a space between cells; '(no grid)' for an empty one."""
    grid = np.asarray(grid)
    if not grid.size:
        return ['(no grid)']
    return [' '.join(str(int(c)) for c in row) for row in grid]
