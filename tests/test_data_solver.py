"""The exact solver on the real hard puzzle sets (solutions checked against the files).

The full-file timing of forum_hardest_1106 lives in benchmarks/data_throughput.py.
"""

import os

import numpy as np
import pytest

from trm_spmd.tasks.sudoku import solver
from trm_spmd.tasks.sudoku import grid as sudoku

FILES = ['norvig_top95', 'forum_hardest_1106', 'magictour_top1465', 'forum_hardest_1905_11plus', '17_clue']


def _sample(shared_data, name, count):
    puzzles, solutions = (open(os.path.join(shared_data, f'{name}{suffix}.txt')).read().split()
                          for suffix in ('', '.solutions'))
    rows = np.random.default_rng(0).choice(len(puzzles), min(count, len(puzzles)), replace=False)
    return [(puzzles[i], solutions[i]) for i in sorted(rows)]


@pytest.mark.parametrize('name, count', [('norvig_top95', 95)] + [(name, 8) for name in FILES[1:]])
def test_unique_solution_matches_file(shared_data, name, count):
    for puzzle, expected in _sample(shared_data, name, count):
        found = solver.solutions(sudoku.parse_grid(puzzle), limit=2)
        assert len(found) == 1, puzzle
        assert sudoku.format_grid(found[0]) == expected


def test_counts_stop_at_limit_and_detect_no_solution():
    empty = np.zeros(81, np.uint8)
    assert solver.count_solutions(empty, limit=2) == 2
    assert solver.count_solutions(empty, limit=5) == 5
    conflicting = empty.copy()
    conflicting[[0, 1]] = 4          # same digit twice in row 1
    assert solver.count_solutions(conflicting) == 0
    assert solver.solve(conflicting) is None
    # Givens that are consistent locally but leave a cell with no digit: row 1 holds 1..8 in
    # columns 2..9, and column 1 already has a 9.
    dead_end = empty.copy()
    dead_end[1:9] = np.arange(1, 9)
    dead_end[9 * 4] = 9
    assert solver.count_solutions(dead_end) == 0


def test_solve_returns_a_valid_completion():
    solution = solver.solve(np.zeros(81, np.uint8))
    assert sudoku.is_solution_grid(solution[None])[0]


def _swappable_rectangle(grid):
    """Four cells (two rows of one band) holding x y / y x: swapping them gives another solution."""
    for a in range(81):
        for b in range(a + 1, 81):
            r1, c1, r2, c2 = a // 9, a % 9, b // 9, b % 9
            cells = [r1 * 9 + c1, r1 * 9 + c2, r2 * 9 + c1, r2 * 9 + c2]
            if r1 != r2 and c1 != c2 and r1 // 3 == r2 // 3 and \
                    grid[cells[0]] == grid[cells[3]] and grid[cells[1]] == grid[cells[2]]:
                return cells
    raise AssertionError('no swappable rectangle')


def test_has_other_solution_checks_one_cell():
    grid = sudoku.parse_grid('621943758783615492594728361142879635357461289869532174238197546916354827475286913')
    puzzle = grid.copy()
    puzzle[0] = 0
    assert not solver.has_other_solution(puzzle, 0, 6)   # the only digit left for that cell
    cells = _swappable_rectangle(grid)
    puzzle = grid.copy()
    puzzle[cells] = 0
    assert solver.has_other_solution(puzzle, cells[0], int(grid[cells[0]]))
    assert solver.count_solutions(puzzle) == 2
