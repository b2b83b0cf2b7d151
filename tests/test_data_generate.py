"""Generated puzzles: unique solution, blanks in range, same seed same puzzle."""

import numpy as np
import pytest

from trm_spmd.tasks.sudoku import generate, solver
from trm_spmd.tasks.sudoku import grid as sudoku
from trm_spmd.data.errors import DataError


@pytest.mark.parametrize('blanks', [(30, 45), (50, 52), (0, 0)])
def test_puzzles_are_unique_and_in_range(blanks):
    for i in range(6):
        puzzle, solution = generate.generate(np.random.default_rng([7, i]), blanks)
        assert blanks[0] <= (puzzle == 0).sum() <= blanks[1]
        assert sudoku.is_solution_grid(solution[None])[0]
        givens = puzzle > 0
        assert (puzzle[givens] == solution[givens]).all()
        found = solver.solutions(puzzle, limit=2)
        assert len(found) == 1 and (found[0] == solution).all()


def test_same_seed_same_puzzle_other_seed_other_puzzle():
    first = generate.generate(np.random.default_rng(3), (40, 50))
    again = generate.generate(np.random.default_rng(3), (40, 50))
    other = generate.generate(np.random.default_rng(4), (40, 50))
    assert all((a == b).all() for a, b in zip(first, again))
    assert not (first[1] == other[1]).all()


def test_random_grids_vary():
    grids = {generate.random_grid(np.random.default_rng(i)).tobytes() for i in range(20)}
    assert len(grids) == 20


@pytest.mark.parametrize('text', ['30', '45:30', 'a:b', '10:70', '-1:5'])
def test_bad_blanks_range(text):
    with pytest.raises(DataError, match='blanks'):
        generate.parse_blanks(text)


def test_parse_blanks():
    assert generate.parse_blanks('30:45') == (30, 45)
