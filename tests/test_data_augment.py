"""Symmetry augmentation keeps puzzle/solution pairs valid and matches the reference's map."""

import numpy as np

from trm_spmd.tasks.sudoku import augment, generate, solver
from trm_spmd.tasks.sudoku import grid as sudoku


def _pairs(count):
    pairs = [generate.generate(np.random.default_rng([11, i]), (35, 45)) for i in range(count)]
    puzzles, solutions = (np.stack(x) for x in zip(*pairs))
    return sudoku.to_tokens(puzzles), sudoku.to_tokens(solutions)


def test_augmented_pairs_stay_valid():
    inputs, labels = _pairs(4)
    inputs, labels = np.repeat(inputs, 50, axis=0), np.repeat(labels, 50, axis=0)
    symmetries = augment.random_symmetries(np.random.default_rng(0), len(inputs))
    new_inputs, new_labels = augment.apply(symmetries, inputs), augment.apply(symmetries, labels)
    assert new_inputs.dtype == inputs.dtype
    assert sudoku.is_solution_grid(new_labels - 1).all()
    givens = new_inputs != sudoku.BLANK_TOKEN
    assert (new_inputs[givens] == new_labels[givens]).all()
    assert ((new_inputs == sudoku.BLANK_TOKEN).sum(1) == (inputs == sudoku.BLANK_TOKEN).sum(1)).all()
    for row in range(0, len(inputs), 37):   # a symmetric image of a unique puzzle is unique
        assert solver.count_solutions(new_inputs[row] - 1) == 1
    assert len({x.tobytes() for x in new_labels}) > 190


def test_pad_and_blank_fixed_digits_permuted():
    symmetries = augment.random_symmetries(np.random.default_rng(1), 500)
    assert (symmetries.token_map[:, :2] == [0, 1]).all()
    assert (np.sort(symmetries.token_map[:, 2:], axis=1) == np.arange(2, 11)).all()
    assert (np.sort(symmetries.source, axis=1) == np.arange(81)).all()


def _reference_map(source):
    """Recovers (transposed, row order, column order) of a symmetry from its cell map and
    checks it has the reference's form: bands and rows within bands, stacks and columns."""
    grid = source.reshape(9, 9)
    transposed = bool((grid[0] // 9 != grid[0, 0] // 9).any())   # row 1 reads several source rows
    if transposed:
        grid = grid.T
    rows, cols = grid[:, 0] // 9, grid[0] % 9
    assert (grid == rows[:, None] * 9 + cols[None, :]).all()
    for order in (rows, cols):
        bands = order.reshape(3, 3) // 3
        assert (bands == bands[:, :1]).all() and sorted(bands[:, 0]) == [0, 1, 2]
    return transposed


def test_symmetries_are_band_and_stack_permutations_with_half_transposed():
    symmetries = augment.random_symmetries(np.random.default_rng(2), 2000)
    transposed = [_reference_map(s) for s in symmetries.source]
    assert 0.45 < np.mean(transposed) < 0.55


def test_same_generator_state_same_symmetries():
    a = augment.random_symmetries(np.random.default_rng(5), 10)
    b = augment.random_symmetries(np.random.default_rng(5), 10)
    assert (a.source == b.source).all() and (a.token_map == b.token_map).all()
