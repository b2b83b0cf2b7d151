"""Parsing and validation of puzzle files: every bad row is reported as FILE:LINE: reason."""

import numpy as np
import pytest

from trm_spmd.tasks.sudoku import grid as sudoku
from trm_spmd.data.errors import DataError, Problems, PuzzleError
from trm_spmd.tasks.sudoku.grid import check_solutions, read_puzzles

PUZZLE = '........8..3...4...9..2..6.....79.......612...6.5.2.7...8...5...1.....2.4.5.....3'
SOLUTION = '621943758783615492594728361142879635357461289869532174238197546916354827475286913'


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text(''.join(line + '\n' for line in lines))
    return str(path)


def _read_checked(path, solutions=None, on_error='fail'):
    problems = Problems(on_error)
    return check_solutions(read_puzzles(path, solutions, problems), problems), problems


def test_tokens_shift_digits_and_blank():
    digits = sudoku.parse_grid(PUZZLE)
    tokens = sudoku.to_tokens(digits)
    assert tokens.dtype == np.uint8
    assert (tokens[digits == 0] == sudoku.BLANK_TOKEN).all()
    assert (tokens[digits > 0] == digits[digits > 0] + 1).all()
    assert sudoku.parse_grid(PUZZLE.replace('.', '0')).tolist() == digits.tolist()


def test_plain_text_with_solutions_and_ratings(tmp_path):
    path = _write(tmp_path, 'p.txt', [PUZZLE, '', PUZZLE])
    solutions = _write(tmp_path, 'p.solutions.txt', [SOLUTION, '', SOLUTION])
    _write(tmp_path, 'p.tdoku_rating.txt', ['28', '', '7'])
    puzzles, _ = _read_checked(path, solutions)
    assert puzzles.lines.tolist() == [1, 3]
    assert puzzles.ratings.tolist() == [28, 7]
    assert sudoku.format_grid(puzzles.solutions[1]) == SOLUTION


def test_csv_reads_answer_and_rating(tmp_path):
    path = _write(tmp_path, 'train.csv', ['source,question,answer,rating', f'src,{PUZZLE},{SOLUTION},12'])
    puzzles, _ = _read_checked(path)
    assert len(puzzles) == 1 and puzzles.lines.tolist() == [2]
    assert puzzles.ratings.tolist() == [12]
    assert sudoku.format_grid(puzzles.puzzles[0]) == PUZZLE


def test_ratings_unknown_without_rating_file(tmp_path):
    puzzles, _ = _read_checked(_write(tmp_path, 'p.txt', [PUZZLE]))
    assert puzzles.ratings.tolist() == [-1]
    assert not puzzles.solutions.any()


WRONG_SOLUTION = SOLUTION[:2] + SOLUTION[3] + SOLUTION[2] + SOLUTION[4:]   # two cells swapped
# A valid grid, but not this puzzle's solution.
OTHER_GRID = '123456789456789123789123456214365897365897214897214365531642978642978531978531642'


@pytest.mark.parametrize('puzzle, solution, file, reason', [
    (PUZZLE[:80], SOLUTION, 'p.txt', 'puzzle has 80 characters, expected 81'),
    (PUZZLE[:5] + 'x' + PUZZLE[6:], SOLUTION, 'p.txt', "puzzle character 'x' at row 1 column 6"),
    (PUZZLE, WRONG_SOLUTION, 's.txt', 'solution is not a valid grid: digit'),
    (PUZZLE, OTHER_GRID, 's.txt', 'solution has 9 at row 1 column 9 but the puzzle gives 8'),
    (PUZZLE, SOLUTION[:40] + '.' + SOLUTION[41:], 's.txt', 'solution has a blank at row 5 column 5'),
])
def test_bad_row_names_file_line_and_reason(tmp_path, puzzle, solution, file, reason):
    path = _write(tmp_path, 'p.txt', [PUZZLE, puzzle, PUZZLE])
    solutions = _write(tmp_path, 's.txt', [SOLUTION, solution, SOLUTION])
    with pytest.raises(PuzzleError) as error:
        _read_checked(path, solutions)
    message = str(error.value)
    assert message.startswith(f'{tmp_path / file}:2: ')
    assert reason in message
    assert '\n' not in message
    puzzles, problems = _read_checked(path, solutions, on_error='skip')
    assert puzzles.lines.tolist() == [1, 3]
    assert len(problems.messages) == 1 and problems.messages[0] == message


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(DataError, match=r'nope\.txt: file not found'):
        read_puzzles(str(tmp_path / 'nope.txt'))
    with pytest.raises(DataError, match=r'empty\.txt: file is empty'):
        read_puzzles(_write(tmp_path, 'empty.txt', ['', '  ']))


def test_misaligned_solutions(tmp_path):
    path = _write(tmp_path, 'p.txt', [PUZZLE])
    with pytest.raises(DataError, match=r's\.txt:2: more lines than'):
        read_puzzles(path, _write(tmp_path, 's.txt', [SOLUTION, SOLUTION]))
    with pytest.raises(PuzzleError, match=r's2\.txt:2: no solution on this line'):
        read_puzzles(_write(tmp_path, 'p2.txt', [PUZZLE, PUZZLE]), _write(tmp_path, 's2.txt', [SOLUTION]))


def test_csv_field_count_and_header(tmp_path):
    with pytest.raises(PuzzleError, match=r'bad\.csv:3: 3 fields, the header has 4'):
        read_puzzles(_write(tmp_path, 'bad.csv', ['source,question,answer,rating',
                                                  f's,{PUZZLE},{SOLUTION},1', f's,{PUZZLE},1']))
    with pytest.raises(DataError, match=r'nohead\.csv:1: CSV header'):
        read_puzzles(_write(tmp_path, 'nohead.csv', ['a,b', '1,2']))


def test_solution_grid_check_is_vectorized_and_exact():
    good = sudoku.parse_grid(SOLUTION)
    bad = sudoku.parse_grid(WRONG_SOLUTION)
    assert sudoku.is_solution_grid(np.stack([good, bad, good])).tolist() == [True, False, True]
    assert sudoku.unit_conflict(good) is None
    assert 'twice' in sudoku.unit_conflict(bad)

