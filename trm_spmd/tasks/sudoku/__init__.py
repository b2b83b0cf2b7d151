"""Sudoku (Sudoku-Extreme): 9x9 grids, 81 cells, tokens 0 pad, 1 blank, 2..10 digits 1..9.

  grid.py      parsing, token encoding, the rules; reading CSV and text files
  solver.py    exact solver (uniqueness, missing solutions, givens that cannot be solved)
  generate.py  random puzzles with a unique solution and a chosen number of blanks
  augment.py   the reference's symmetries (digit relabelling, transposition, band moves)
  build.py     datasets from files or the generator
  build_cli.py its flags: python -m trm_spmd.build sudoku
"""

import numpy as np

from trm_spmd.tasks.base import Augmentation, Task, side_by_side
from trm_spmd.tasks.sudoku import augment, build, grid, solver


def _augment(u, inputs, labels):
    symmetries = augment.from_uniform(u)
    return augment.apply(symmetries, inputs), augment.apply(symmetries, labels)


def _box_rows(digits):
    rows = []
    for r in range(9):
        cells = ['.' if d == 0 else str(d) for d in digits[r * 9:(r + 1) * 9]]
        rows.append(' '.join(cells[0:3]) + ' | ' + ' '.join(cells[3:6]) + ' | ' + ' '.join(cells[6:9]))
        if r in (2, 5):
            rows.append('------+-------+------')
    return rows


class Sudoku(Task):
    name = 'sudoku'
    generate_example = '--generate=5000 --blanks=30:45'
    difficulty_name = 'blanks'
    rating_edges = (0, 1, 4, 16)     # tdoku backtracks: none, a few, some, many
    augmentation = Augmentation(draws=augment.DRAWS, apply=staticmethod(_augment))

    def sizes(self, data_config):
        return {'seq_len': grid.SEQ_LEN, 'vocab_size': grid.VOCAB_SIZE}

    def check_metadata(self, metadata, path):
        if (metadata['seq_len'], metadata['vocab_size']) != (grid.SEQ_LEN, grid.VOCAB_SIZE):
            return (f'seq_len {metadata["seq_len"]} and vocab_size {metadata["vocab_size"]} are not Sudoku\'s '
                    f'({grid.SEQ_LEN}, {grid.VOCAB_SIZE})')
        return None

    def difficulty(self, inputs, labels):
        return np.count_nonzero(inputs == grid.BLANK_TOKEN, axis=1).astype(np.int32)

    def difficulty_edges(self, seq_len):
        return tuple(range(0, 85, 5))

    def generated_name(self, data_config, seed):
        d = data_config
        lo, hi = d.generate_blanks
        aug = f'-aug{d.generate_num_aug}' if d.generate_num_aug else ''
        return f'generated-train{d.generate_train}-test{d.generate_test}-blanks{lo}-{hi}{aug}-seed{seed}'

    def build_generated(self, output_dir, data_config, seed, progress=True):
        d = data_config
        return build.build_generated(output_dir, d.generate_train, d.generate_test, tuple(d.generate_blanks), seed,
                               num_aug=d.generate_num_aug, progress=progress)

    def describe_generated(self, data_config):
        d = data_config
        return (f'{d.generate_train} train + {d.generate_test} test puzzles, '
                f'{d.generate_blanks[0]}-{d.generate_blanks[1]} blanks')

    def parse(self, text):
        return grid.to_tokens(grid.parse_grid(text))

    def check_input(self, inputs):
        digits = self._digits(inputs)
        clash = grid.unit_conflict(digits)
        if clash:
            return f'the givens clash: {clash}', None
        found = solver.solutions(digits, limit=2)
        if not found:
            return 'the puzzle has no solution', None
        return None, ('the puzzle has more than one solution: any of them counts as valid'
                      if len(found) > 1 else None)

    def verdict(self, inputs, prediction):
        puzzle, digits = self._digits(inputs), self._digits(prediction)
        if (digits == 0).any():
            return False, 'not a complete grid'
        given = puzzle > 0
        if (digits[given] != puzzle[given]).any():
            return False, 'invalid: changes a given digit'
        conflict = grid.unit_conflict(digits)
        return (False, f'invalid: {conflict}') if conflict else (True, 'valid')

    def render(self, inputs, prediction):
        return side_by_side(_box_rows(self._digits(inputs)), _box_rows(self._digits(prediction)))

    @staticmethod
    def _digits(tokens):
        """Tokens -> digits 0..9 (pad and blank -> 0)."""
        return np.clip(np.asarray(tokens, np.int64) - 1, 0, 9).astype(np.uint8)


TASK = Sudoku()
