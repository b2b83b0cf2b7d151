"""Builds Maze-Hard datasets in the official TinyRecursiveModels layout (trm_spmd/data/dataset.py):
from the official CSVs or from the built-in generator. The command line is
build_cli.py (python -m trm_spmd.build maze).

What the official builder (dataset/build_maze_dataset.py) writes for the same CSVs: tokens
PAD 0, '#' 1, ' ' 2, 'S' 3, 'G' 4, 'o' 5 (vocab 6, seq_len = side^2); each training maze is
a group of itself and its dihedral copies (--num_aug=7 is the official `aug=True`: the 8
transforms in its order), each copy its own puzzle; test mazes are not augmented; one blank
puzzle identifier. Ours adds all__ratings.npy (the CSV's rating column, -1 when absent),
which the official loader does not read.
"""

import numpy as np

from trm_spmd.data import dataset
from trm_spmd.data.errors import DataError, Problems
from trm_spmd.data.source import csv_rows, read_lines
from trm_spmd.tasks.base import draw_unique
from trm_spmd.tasks.maze import generate, grid

MAX_AUG = 7   # the dihedral group has 8 elements, the identity included
# Tags of the independent random streams drawn from --seed.
_SUBSAMPLE, _GENERATE_TRAIN, _GENERATE_TEST = range(3)
# Random mazes drawn for one kept maze before giving up: at 30x30 with paths over 110 moves
# about 1 in 79,000 is kept, so 10^8 fails by chance about once in 10^550.
_MAX_ATTEMPTS = 10 ** 8


def read_mazes(path, problems):
    """(questions, answers uint8 [N, L], ratings int32 [N]) of an official Maze-Hard CSV;
    every row checked (format, one S and G, the answer a shortest path), a bad one reported
    to `problems` as FILE:LINE: reason."""
    errors = {}
    rows = csv_rows(path, read_lines(path, 'a CSV with a header line source,question,answer,rating'), errors)
    good, ratings = [], []
    length = None
    for line, question_text, answer_text, rating_text, _ in rows:
        where = f'{path}:{line}'
        try:
            question, answer = grid.encode_one(question_text), grid.encode_one(answer_text)
        except ValueError as e:
            errors[line] = f'{where}: {e}'
            continue
        length = length or len(question)
        problem = grid.check_example(question, answer)
        if len(question) != length or len(answer) != length:
            problem = f'has {len(question)} cells, the first maze of the file {length}'
        if problem is None and rating_text.strip():
            try:
                int(rating_text)
            except ValueError:
                problem = f'rating {rating_text.strip()!r} is not an integer'
        if problem:
            errors[line] = f'{where}: {problem}'
            continue
        good.append((question, answer))
        ratings.append(int(rating_text) if rating_text.strip() else -1)
    for line in sorted(errors):
        problems.report(errors[line])
    if not good:
        raise DataError(f'{path}: no valid maze in the file ({len(errors)} bad rows): check the file')
    questions, answers = (np.stack(part) for part in zip(*good))
    return questions, answers, np.asarray(ratings, np.int32)


def _augmented(questions, answers, num_aug):
    """Each maze followed by its dihedral transforms 1..num_aug, as the official builder orders them."""
    group = 1 + num_aug
    inputs = np.empty((len(questions) * group, questions.shape[1]), np.uint8)
    labels = np.empty_like(inputs)
    for k in range(group):
        inputs[k::group] = grid.dihedral(questions, k)
        labels[k::group] = grid.dihedral(answers, k)
    return inputs, labels


def write(output_dir, train, test, num_aug):
    """train/test: (questions, answers, ratings); writes the dataset, returns a summary line."""
    if train[0].shape[1] != test[0].shape[1]:
        raise DataError(f'the training mazes have {train[0].shape[1]} cells and the test mazes '
                        f'{test[0].shape[1]}: use one size')
    inputs, labels = _augmented(train[0], train[1], num_aug)
    splits = {
        'train': dataset.split_arrays(inputs, labels, 1 + num_aug, np.repeat(train[2], 1 + num_aug),
                                      grid.VOCAB_SIZE),
        'test': dataset.split_arrays(test[0], test[1], 1, test[2], grid.VOCAB_SIZE),
    }
    dataset.write_dataset(output_dir, splits)
    side = grid.side(inputs.shape[1])
    return (f'wrote {output_dir}: {side}x{side} mazes, train {len(train[0])} x {1 + num_aug} = '
            f'{len(inputs)} examples, test {len(test[0])} examples; {statistics(train[0], train[1])}')


def statistics(questions, answers):
    """Shortest-path moves (10th/50th/90th percentile, mean) and wall fraction of mazes: the
    figures that compare a generated set with the published one (data/README.md)."""
    moves = grid.path_lengths(answers)
    p10, p50, p90 = np.percentile(moves, (10, 50, 90))
    return (f'shortest path moves p10/p50/p90 {p10:.0f}/{p50:.0f}/{p90:.0f} (mean {moves.mean():.1f}), '
            f'walls {np.mean(questions == grid.WALL):.1%}')


def _check_args(output_dir, num_aug):
    dataset.check_new_output_dir(output_dir)
    if not 0 <= num_aug <= MAX_AUG:
        raise DataError(f'--num_aug={num_aug} must be in 0..{MAX_AUG} (7: all 8 dihedral transforms, '
                        f'the official builder\'s aug=True)')


def build_from_files(output_dir, input_file, test_file, subsample=0, num_aug=0, seed=0, on_error='fail'):
    """Builds from official Maze-Hard CSVs (--input, --test_input); returns a summary line."""
    _check_args(output_dir, num_aug)
    if not test_file:
        raise DataError('--test_input=test.csv is required: Maze-Hard comes with its own test split')
    if subsample < 0:
        raise DataError(f'--subsample={subsample} must be >= 0')
    problems = Problems(on_error)
    train, test = read_mazes(input_file, problems), read_mazes(test_file, problems)
    if subsample:
        if subsample > len(train[0]):
            raise DataError(f'--subsample={subsample} but {input_file} has {len(train[0])} valid mazes')
        chosen = np.sort(np.random.default_rng([seed, _SUBSAMPLE]).choice(len(train[0]), subsample, replace=False))
        train = tuple(part[chosen] for part in train)
    summary = write(output_dir, train, test, num_aug)
    if problems.messages:
        summary += f'; skipped {len(problems.messages)} bad rows, the first: {problems.messages[0]}'
    return summary


def _generate_unique(count, size, min_path, seed, stream, taken, progress, label):
    """`count` mazes not in `taken`, from one random stream: the first k of a longer run are
    the same k mazes."""
    rng = np.random.default_rng([seed, stream])

    def draw():
        try:
            return generate.generate(rng, size, min_path, max_attempts=_MAX_ATTEMPTS)[:2]
        except ValueError as e:
            raise DataError(f'{e}: lower --min_path') from None
    return draw_unique(count, draw, taken, progress, label, 'mazes')


def build_generated(output_dir, num_train, num_test, size=30, min_path=None, seed=0, num_aug=0, progress=True):
    """Builds a generated Maze-Hard-like dataset (HRM's recipe, data/README.md); the label of
    each maze is a shortest path. min_path None: 110 moves scaled to the size. Ratings are
    the shortest path's moves. Returns a summary line."""
    _check_args(output_dir, num_aug)
    if num_train < 1 or num_test < 1:
        raise DataError(f'generating needs >= 1 training and test mazes, got {num_train} and {num_test}')
    if size < 4:
        raise DataError(f'--size={size} must be >= 4')
    min_path = generate.default_min_path(size) if min_path is None else min_path
    if not 0 <= min_path < size * size // 2:
        raise DataError(f'--min_path={min_path} must be in [0, {size * size // 2}) for {size}x{size} mazes')
    taken = set()
    train = _generate_unique(num_train, size, min_path, seed, _GENERATE_TRAIN, taken, progress, 'generating train')
    test = _generate_unique(num_test, size, min_path, seed, _GENERATE_TEST, taken, progress, 'generating test')
    ratings = [grid.path_lengths(answers) for _, answers in (train, test)]
    return write(output_dir, (*train, ratings[0]), (*test, ratings[1]), num_aug)
