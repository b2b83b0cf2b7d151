"""Builds Sudoku datasets in the official TinyRecursiveModels layout (trm_spmd/data/dataset.py):
from puzzle files or from the built-in generator. The command line is build_cli.py."""

import itertools
import os

import numpy as np

from trm_spmd.progress import Progress
from trm_spmd.data import dataset
from trm_spmd.data.errors import DataError, Problems
from trm_spmd.tasks.base import draw_unique
from trm_spmd.tasks.sudoku import augment, generate, solver
from trm_spmd.tasks.sudoku.grid import VOCAB_SIZE, PuzzleSet, check_solutions, read_puzzles, to_tokens

# Tags of the independent random streams drawn from --seed.
_SPLIT, _SUBSAMPLE, _AUGMENT, _GENERATE_TRAIN, _GENERATE_TEST = range(5)


def solve_missing(puzzles, problems, progress=True):
    """Fills in unknown solutions, keeping only puzzles with exactly one."""
    todo = np.flatnonzero(~puzzles.solutions.any(axis=1))
    keep = np.ones(len(puzzles), bool)
    bar = Progress(f'solving {os.path.basename(puzzles.path)}', len(todo), progress, unit='puzzles')
    for done, row in enumerate(todo.tolist()):
        found = solver.solutions(puzzles.puzzles[row], limit=2)
        if len(found) == 1:
            puzzles.solutions[row] = found[0]
        else:
            keep[row] = False
            problems.report(f'{puzzles.where(row)}: puzzle has '
                            f'{"no solution" if not found else "more than one solution"}')
        bar.update(done + 1)
    bar.close()
    return puzzles.take(np.flatnonzero(keep))


def _augmented_groups(puzzles, solutions, num_aug, seed):
    """Tokens [N * (1 + num_aug), 81]: each puzzle followed by its variants."""
    count, group = puzzles.shape[0], 1 + num_aug
    inputs = np.empty((count * group, 81), np.uint8)
    labels = np.empty_like(inputs)
    inputs[::group], labels[::group] = to_tokens(puzzles), to_tokens(solutions)
    for i in range(count if num_aug else 0):
        symmetries = augment.random_symmetries(np.random.default_rng([seed, _AUGMENT, i]), num_aug)
        rows = slice(i * group + 1, (i + 1) * group)
        inputs[rows] = augment.apply(symmetries, np.repeat(inputs[i * group][None], num_aug, axis=0))
        labels[rows] = augment.apply(symmetries, np.repeat(labels[i * group][None], num_aug, axis=0))
    return inputs, labels


def _write(output_dir, train, test, num_aug, seed):
    """train/test: (puzzles, solutions, ratings) in digits; writes and returns a summary."""
    inputs, labels = _augmented_groups(train[0], train[1], num_aug, seed)
    splits = {
        'train': dataset.split_arrays(inputs, labels, 1 + num_aug, np.repeat(train[2], 1 + num_aug), VOCAB_SIZE),
        'test': dataset.split_arrays(to_tokens(test[0]), to_tokens(test[1]), 1, test[2], VOCAB_SIZE),
    }
    dataset.write_dataset(output_dir, splits)
    return (f'wrote {output_dir}: train {len(train[0])} puzzles x {1 + num_aug} = {len(inputs)} examples, '
            f'test {len(test[0])} examples')


def build_from_files(output_dir, input_file, solutions_file=None, test_file=None, test_solutions_file=None,
                     subsample=0, num_aug=0, eval_fraction=0.1, min_rating=None, seed=0,
                     on_error='fail', progress=True):
    """Builds a dataset from puzzle files (the CLI's --input, --solutions, --test_input,
    --test_solutions); returns a one-line summary. Raises DataError."""
    dataset.check_new_output_dir(output_dir)
    if num_aug < 0 or subsample < 0:
        raise DataError('--num_aug and --subsample must be >= 0')
    if test_solutions_file and not test_file:
        raise DataError('--test_solutions needs --test_input')
    problems = Problems(on_error)
    train = check_solutions(read_puzzles(input_file, solutions_file, problems), problems)
    test = None
    if test_file:
        test = check_solutions(read_puzzles(test_file, test_solutions_file, problems), problems)
    if min_rating is not None:
        train, test = (_at_least(p, min_rating) if p is not None else None for p in (train, test))
    if test is None:
        if not 0 < eval_fraction < 1:
            raise DataError(f'--eval_fraction={eval_fraction} must be in (0, 1) when there is no --test_input')
        order = np.random.default_rng([seed, _SPLIT]).permutation(len(train))
        held_out = min(len(train) - 1, max(1, round(eval_fraction * len(train))))
        test, train = train.take(np.sort(order[:held_out])), train.take(np.sort(order[held_out:]))
    if subsample:
        if subsample > len(train):
            raise DataError(f'--subsample={subsample} but only {len(train)} training puzzles are left')
        chosen = np.random.default_rng([seed, _SUBSAMPLE]).choice(len(train), subsample, replace=False)
        train = train.take(np.sort(chosen))
    train, test = solve_missing(train, problems, progress), solve_missing(test, problems, progress)
    for name, part in (('training', train), ('test', test)):
        if len(part) == 0:
            raise DataError(f'no {name} puzzles left ({len(problems.messages)} bad rows skipped): '
                            f'check the input files')
    summary = _write(output_dir, (train.puzzles, train.solutions, train.ratings),
                     (test.puzzles, test.solutions, test.ratings), num_aug, seed)
    if problems.messages:
        summary += f'; skipped {len(problems.messages)} bad rows, the first: {problems.messages[0]}'
    return summary


def _at_least(puzzles: PuzzleSet, min_rating):
    if (puzzles.ratings < 0).all():
        raise DataError(f'--min_rating needs ratings but {puzzles.path} has none: use a CSV with a '
                        f'rating column or put X.tdoku_rating.txt next to X.txt')
    return puzzles.take(np.flatnonzero(puzzles.ratings >= min_rating))


def _generate_unique(count, blanks, seed, stream, taken, progress, label):
    """`count` puzzles not in `taken`; puzzle i draws from (seed, stream, i) alone."""
    attempts = itertools.count()
    return draw_unique(count, lambda: generate.generate(np.random.default_rng([seed, stream, next(attempts)]), blanks),
                       taken, progress, label, 'puzzles')


def build_generated(output_dir, num_train, num_test, blanks, seed, num_aug=0, progress=True):
    """Builds a dataset of generated puzzles (unique solutions, blanks in [lo, hi]).

    Test puzzles never repeat a training puzzle. Ratings are unknown (-1). Returns a summary.
    """
    dataset.check_new_output_dir(output_dir)
    if num_train < 1 or num_test < 1 or num_aug < 0:
        raise DataError(f'generate needs >= 1 training and test puzzles and num_aug >= 0, got '
                        f'{num_train}, {num_test}, {num_aug}')
    blanks = generate.check_blanks(blanks)
    taken = set()
    train = _generate_unique(num_train, blanks, seed, _GENERATE_TRAIN, taken, progress, 'generating train')
    test = _generate_unique(num_test, blanks, seed, _GENERATE_TEST, taken, progress, 'generating test')
    return _write(output_dir, (*train, np.full(num_train, -1, np.int32)),
                  (*test, np.full(num_test, -1, np.int32)), num_aug, seed)
