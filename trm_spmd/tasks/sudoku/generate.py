"""Random Sudoku puzzles with a unique solution and a chosen number of blanks.

A puzzle is a random complete grid with cells blanked in random order; a blank that would
admit a second solution is put back. Everything draws from the numpy Generator passed in,
so a seed fixes the puzzle.
"""

import numpy as np

from trm_spmd.data.errors import DataError
from trm_spmd.tasks.sudoku import solver

# A unique puzzle needs at least 17 givens; greedy blanking rarely gets past ~60 blanks,
# which the retry limit turns into a clear error rather than an endless loop.
MAX_BLANKS = 64
_ATTEMPTS = 100


def parse_blanks(text):
    """'LO:HI' -> (lo, hi), checked."""
    try:
        lo, hi = (int(x) for x in str(text).split(':'))
    except ValueError:
        raise DataError(f'--blanks={text!r} must be LO:HI, e.g. 30:45') from None
    return check_blanks((lo, hi))


def check_blanks(blanks):
    lo, hi = (int(x) for x in blanks)
    if not 0 <= lo <= hi <= MAX_BLANKS:
        raise DataError(f'blanks range {lo}:{hi} must satisfy 0 <= LO <= HI <= {MAX_BLANKS}')
    return lo, hi


def random_grid(rng):
    """A uniformly shuffled search over the empty grid: a random valid complete grid."""
    return solver.solutions(np.zeros(81, np.uint8), limit=1, rng=rng)[0]


def _blank_cells(solution, order, target):
    """Blanks cells in `order` while the solution stays unique; the puzzle or None."""
    puzzle = solution.copy()
    blanks = 0
    for cell in order.tolist():
        if blanks == target:
            break
        digit = int(puzzle[cell])
        puzzle[cell] = 0
        if solver.has_other_solution(puzzle, cell, digit):
            puzzle[cell] = digit
        else:
            blanks += 1
    return puzzle if blanks == target else None


def generate(rng, blanks):
    """(puzzle, solution) uint8 [81] with a unique solution and blanks in [lo, hi]."""
    lo, hi = check_blanks(blanks)
    target = int(rng.integers(lo, hi + 1))
    for _ in range(_ATTEMPTS):
        solution = random_grid(rng)
        puzzle = _blank_cells(solution, rng.permutation(81), target)
        if puzzle is not None:
            return puzzle, solution
    raise DataError(f'could not blank {target} cells of a grid with a unique solution in '
                    f'{_ATTEMPTS} tries: use fewer blanks (e.g. --blanks=30:45)')
