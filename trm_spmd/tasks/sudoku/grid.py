"""Sudoku rows as numpy arrays: token encoding, file parsing, validation.

Grids are uint8 [81] row-major digits with 0 for a blank. Every problem with a row
is reported as `FILE:LINE: reason`, so a person can open the file at that line.
"""

import dataclasses
import os

import numpy as np

from trm_spmd.data.errors import DataError, Problems
from trm_spmd.data.source import CSV_HEADER, csv_rows, read_lines

SEQ_LEN = 81
VOCAB_SIZE = 11          # pad, blank, digits 1..9
PAD_TOKEN = 0
BLANK_TOKEN = 1          # digit d is token d + 1, so a blank (digit 0) is token 1

_ROW = np.arange(81) // 9
_COL = np.arange(81) % 9
_BOX = (_ROW // 3) * 3 + _COL // 3
UNIT_CELLS = np.array([np.flatnonzero(_ROW == i) for i in range(9)]
                      + [np.flatnonzero(_COL == i) for i in range(9)]
                      + [np.flatnonzero(_BOX == i) for i in range(9)])   # [27, 9]
_UNIT_NAMES = [f'row {i + 1}' for i in range(9)] + [f'column {i + 1}' for i in range(9)] \
    + [f'box {i + 1}' for i in range(9)]
_DIGIT_OF_BYTE = np.full(256, 255, np.uint8)
_DIGIT_OF_BYTE[ord('.')] = 0
_DIGIT_OF_BYTE[ord('0'):ord('9') + 1] = np.arange(10)


def cell_name(cell):
    return f'row {cell // 9 + 1} column {cell % 9 + 1}'


def to_tokens(digits):
    """Digits (0 blank) to model tokens: blank 1, digit d -> d + 1."""
    return np.asarray(digits, np.uint8) + np.uint8(1)


def parse_grid(text, allow_blanks=True):
    """One 81-character grid ('.' or '0' blank) to uint8 digits; ValueError with the reason."""
    text = text.strip()
    if len(text) != SEQ_LEN:
        raise ValueError(f'has {len(text)} characters, expected {SEQ_LEN}')
    raw = text.encode('ascii', errors='replace')
    digits = _DIGIT_OF_BYTE[np.frombuffer(raw, np.uint8)]
    bad = np.flatnonzero(digits == 255)
    if bad.size:
        raise ValueError(f'character {text[bad[0]]!r} at {cell_name(bad[0])} is not a digit, '
                         f"'.' or '0'")
    if not allow_blanks and not digits.all():
        raise ValueError(f'has a blank at {cell_name(int(np.argmin(digits)))}')
    return digits


def format_grid(digits):
    return ''.join('.' if d == 0 else str(d) for d in np.asarray(digits).tolist())


def unit_conflict(digits):
    """Why a grid breaks the rules (a digit twice in a unit), or None if it does not."""
    digits = np.asarray(digits)
    for unit, name in zip(UNIT_CELLS, _UNIT_NAMES):
        values = digits[unit]
        values = values[values > 0]
        counts = np.bincount(values, minlength=10)
        if counts.max(initial=0) > 1:
            return f'digit {int(np.argmax(counts))} appears twice in {name}'
    return None


def is_solution_grid(solutions, chunk=65536):
    """Which complete grids [N, 81] hold each digit 1..9 once in every row, column and box."""
    solutions = np.asarray(solutions)
    ok = np.empty(solutions.shape[0], bool)
    for start in range(0, solutions.shape[0], chunk):   # bounds the [chunk, 27, 9] temporary
        units = np.sort(solutions[start:start + chunk, UNIT_CELLS], axis=2)
        ok[start:start + chunk] = (units == np.arange(1, 10, dtype=units.dtype)).all(axis=(1, 2))
    return ok


@dataclasses.dataclass
class PuzzleSet:
    """Puzzles read from one file, with the line each came from (1-based)."""
    path: str
    lines: np.ndarray            # int64 [N]
    puzzles: np.ndarray          # uint8 [N, 81], 0 = blank
    solutions: np.ndarray        # uint8 [N, 81], all-zero row = not known yet
    ratings: np.ndarray          # int32 [N], -1 = unknown
    solution_path: str           # where the known solutions came from (for messages)

    def __len__(self):
        return len(self.lines)

    def take(self, index):
        index = np.asarray(index, np.int64)
        return dataclasses.replace(self, lines=self.lines[index], puzzles=self.puzzles[index],
                                   solutions=self.solutions[index], ratings=self.ratings[index])

    def where(self, row):
        return f'{self.path}:{self.lines[row]}'


def _aligned(path, companion, count):
    """Lines of a line-aligned companion file (solutions, ratings), padded to `count`."""
    lines = read_lines(companion)
    extra = [i + 1 for i in range(count, len(lines)) if lines[i].strip()]
    if extra:
        raise DataError(f'{companion}:{extra[0]}: more lines than {path} has ({count}): '
                        f'the files must be line-aligned')
    return lines + [''] * (count - len(lines))


def ratings_path_for(path):
    """The tdoku rating file that sits next to a plain-text puzzle file, if any."""
    stem = path[:-4] if path.endswith('.txt') else path
    candidate = stem + '.tdoku_rating.txt'
    return candidate if os.path.isfile(candidate) else None


def _is_csv(path, first_line):
    return path.endswith('.csv') or first_line.strip().startswith(','.join(CSV_HEADER[:2]))


def read_puzzles(path, solutions_path=None, problems=None):
    """Reads a Sudoku-Extreme CSV or a plain-text file (81 characters a line).

    Plain text may come with a line-aligned solutions file; a line-aligned
    `X.tdoku_rating.txt` next to `X.txt` supplies ratings. Rows with a bad format go to
    `problems`; solutions are checked later by `check_solutions`.
    """
    problems = problems or Problems('fail')
    errors = {}
    lines = read_lines(path)
    first = next(line for line in lines if line.strip())
    if _is_csv(path, first):
        if solutions_path:
            raise DataError(f'--solutions={solutions_path}: a CSV input carries its own answer column')
        rows = csv_rows(path, lines, errors)
        solution_path = path
    else:
        solution_lines = _aligned(path, solutions_path, len(lines)) if solutions_path else None
        rating_file = ratings_path_for(path)
        rating_lines = _aligned(path, rating_file, len(lines)) if rating_file else None
        rows = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            rows.append((i + 1, line, solution_lines[i] if solution_lines else '',
                         rating_lines[i] if rating_lines else '', rating_file or path))
        solution_path = solutions_path or path
    return _parse_rows(path, solution_path, rows, problems, errors)


def _decode(texts, allow_blanks):
    """Grid texts -> (uint8 digits [n, 81], {row: reason} for the rows that are no grid).

    Vectorized: a Sudoku-Extreme CSV has millions of rows.
    """
    texts = [t.strip() for t in texts]
    digits = np.zeros((len(texts), SEQ_LEN), np.uint8)
    sized = np.array([len(t) == SEQ_LEN for t in texts], bool)
    if sized.any():
        # 'replace' keeps one byte per character, so rows stay SEQ_LEN bytes long.
        raw = ''.join(t for t, ok in zip(texts, sized) if ok).encode('ascii', errors='replace')
        digits[sized] = _DIGIT_OF_BYTE[np.frombuffer(raw, np.uint8)].reshape(-1, SEQ_LEN)
    bad = ~sized | (digits == 255).any(axis=1)
    if not allow_blanks:
        bad |= (digits == 0).any(axis=1)
    reasons = {}
    for row in np.flatnonzero(bad).tolist():
        try:
            parse_grid(texts[row], allow_blanks)
        except ValueError as e:
            reasons[row] = str(e)
    return digits, reasons


def _parse_rows(path, solution_path, rows, problems, errors):
    """(line, puzzle text, solution text or '', rating text or '', rating file) -> PuzzleSet.

    `errors` ({line: message}) holds problems found earlier; all are reported in line order.
    """
    puzzles, puzzle_errors = _decode([row[1] for row in rows], allow_blanks=True)
    with_solution = np.flatnonzero([bool(row[2].strip()) for row in rows])
    solutions = np.zeros_like(puzzles)
    solutions[with_solution], reasons = _decode([rows[i][2] for i in with_solution], allow_blanks=False)
    solution_errors = {int(with_solution[i]): reason for i, reason in reasons.items()}
    ratings = np.full(len(rows), -1, np.int32)
    errors = dict(errors)
    for i, (line, _, solution_text, rating_text, rating_file) in enumerate(rows):
        if i in puzzle_errors:
            errors[line] = f'{path}:{line}: puzzle {puzzle_errors[i]}'
        elif i in solution_errors:
            errors[line] = f'{solution_path}:{line}: solution {solution_errors[i]}'
        elif solution_path != path and not solution_text.strip():
            errors[line] = (f'{solution_path}:{line}: no solution on this line: '
                            f'the solutions file must be line-aligned with {path}')
        elif rating_text.strip():
            try:
                ratings[i] = int(rating_text)
            except ValueError:
                errors[line] = f'{rating_file}:{line}: rating {rating_text.strip()!r} is not an integer'
    for line in sorted(errors):
        problems.report(errors[line])
    lines = np.array([row[0] for row in rows], np.int64)
    keep = np.flatnonzero(~np.isin(lines, list(errors)))
    return PuzzleSet(path=path, lines=lines[keep], puzzles=puzzles[keep], solutions=solutions[keep],
                     ratings=ratings[keep], solution_path=solution_path)


def check_solutions(puzzles, problems):
    """Keeps the rows whose known solution is a valid grid that agrees with the givens.

    Rows without a solution pass through (the solver fills them in later).
    """
    known = puzzles.solutions.any(axis=1)
    valid = is_solution_grid(puzzles.solutions)
    givens = puzzles.puzzles > 0
    agrees = ((puzzles.puzzles == puzzles.solutions) | ~givens).all(axis=1)
    good = ~known | (valid & agrees)
    for row in np.flatnonzero(~good):
        where = f'{puzzles.solution_path}:{puzzles.lines[row]}'
        if not valid[row]:
            problems.report(f'{where}: solution is not a valid grid: {unit_conflict(puzzles.solutions[row])}')
        else:
            cell = int(np.argmax(givens[row] & (puzzles.puzzles[row] != puzzles.solutions[row])))
            problems.report(f'{where}: solution has {puzzles.solutions[row, cell]} at {cell_name(cell)} '
                            f'but the puzzle gives {puzzles.puzzles[row, cell]}')
    return puzzles.take(np.flatnonzero(good))
