"""Builds a Sudoku dataset in the official TinyRecursiveModels layout (trm_spmd/data/dataset.py).

From a file (Sudoku-Extreme CSV, or plain text with an optional line-aligned solutions file):
    python -m trm_spmd.build sudoku --input=train.csv --test_input=test.csv \\
        --subsample=1000 --num_aug=1000 --output_dir=data/sudoku-extreme-1k-aug-1000
    python -m trm_spmd.build sudoku --input=../shared/sudoku_data/forum_hardest_1905_11plus.txt \\
        --solutions=../shared/sudoku_data/forum_hardest_1905_11plus.solutions.txt \\
        --subsample=1000 --num_aug=1000 --output_dir=data/hardest-1k
From the built-in generator (no input file):
    python -m trm_spmd.build sudoku --generate=5000 --test_generate=500 --blanks=30:45 \\
        --output_dir=data/generated-5k

The split is by puzzle, before augmentation: the test split is --test_input, or else an
--eval_fraction of the puzzles. Each training puzzle becomes a group of itself and
--num_aug symmetric variants; test puzzles are not augmented. Every row is checked (format,
valid solution, agreement with the givens, uniqueness when the solver supplied the
solution); a bad row stops the build with FILE:LINE: reason, or with --on_error=skip is
left out and counted. Ratings come from the CSV's rating column or from a line-aligned
X.tdoku_rating.txt beside X.txt (else -1); a variant keeps its original's rating. Same
arguments, same bytes. An input may be `hf://sapientinc/sudoku-extreme/train.csv` (data/source.py).
"""

from absl import app, flags

from trm_spmd.data.errors import DataError
from trm_spmd.data.source import resolve_input
from trm_spmd.tasks.sudoku import generate
from trm_spmd.tasks.sudoku.build import build_from_files, build_generated


def define_flags():
    flags.DEFINE_string('input', None, 'puzzles: Sudoku-Extreme CSV, or text with 81 characters a line')
    flags.DEFINE_string('solutions', None, 'line-aligned solutions of --input (text input only)')
    flags.DEFINE_string('test_input', None, 'held-out puzzles (default: an --eval_fraction of --input)')
    flags.DEFINE_string('test_solutions', None, 'line-aligned solutions of --test_input')
    flags.DEFINE_string('output_dir', None, 'dataset directory to create (must not exist)')
    flags.DEFINE_integer('subsample', 0, 'keep this many training puzzles (0: all)')
    flags.DEFINE_integer('num_aug', 0, 'symmetric variants per training puzzle')
    flags.DEFINE_float('eval_fraction', 0.1, 'fraction of the puzzles held out when there is no test input')
    flags.DEFINE_integer('min_rating', None, 'drop puzzles rated below this (needs ratings)')
    flags.DEFINE_integer('seed', 0, 'seed of every random choice')
    flags.DEFINE_enum('on_error', 'fail', ['fail', 'skip'], 'what to do with a bad row')
    flags.DEFINE_integer('generate', 0, 'generate this many training puzzles instead of reading --input')
    flags.DEFINE_integer('test_generate', 0, 'generated test puzzles (default: --eval_fraction x --generate)')
    flags.DEFINE_string('blanks', '30:45', 'LO:HI blanks per generated puzzle')


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f'unexpected arguments {argv[1:]}')
    f = flags.FLAGS
    if bool(f.input) == bool(f.generate):
        raise DataError('give exactly one of --input=FILE and --generate=N')
    if f.generate:
        if f.solutions or f.test_input or f.test_solutions or f.subsample or f.min_rating is not None:
            raise DataError('--generate takes no input files, --subsample or --min_rating')
        num_test = f.test_generate or max(1, round(f.generate * f.eval_fraction))
        summary = build_generated(f.output_dir, f.generate, num_test, generate.parse_blanks(f.blanks),
                                  f.seed, f.num_aug)
    else:
        summary = build_from_files(f.output_dir, resolve_input(f.input), f.solutions, resolve_input(f.test_input),
                                   f.test_solutions,
                                   f.subsample, f.num_aug, f.eval_fraction, f.min_rating, f.seed, f.on_error)
    print(summary)
