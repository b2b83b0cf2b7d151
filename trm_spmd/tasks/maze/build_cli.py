"""Builds a Maze-Hard dataset in the official TinyRecursiveModels layout (trm_spmd/data/dataset.py).

From the official CSVs (source,question,answer,rating; a maze is side^2 characters of '#',
' ', 'S', 'G', with 'o' on the answer's path), local or on the Hugging Face Hub:
    python -m trm_spmd.build maze --input=train.csv --test_input=test.csv --num_aug=7 \\
        --output_dir=data/maze-30x30-hard-1k-aug
    python -m trm_spmd.build maze --input=hf://sapientinc/maze-30x30-hard-1k/train.csv \\
        --test_input=hf://sapientinc/maze-30x30-hard-1k/test.csv --output_dir=data/maze-30x30-hard-1k
From the built-in generator (offline; HRM's recipe, data/README.md):
    python -m trm_spmd.build maze --generate --num_train=1000 --num_test=1000 --size=30 \\
        --output_dir=data/maze-30x30-generated-1k

The official builder writes 1 (default) or 8 (aug=True) examples per training maze;
--num_aug=7 is its aug=True, and 1..6 keep the first transforms of its order. Every row is
checked (one S and one G, the answer a shortest S->G path by an independent search); a
bad row stops the build with FILE:LINE: reason and nothing is written, or with
--on_error=skip is left out and counted. Same arguments, same bytes.
"""

from absl import app, flags

from trm_spmd.data.errors import DataError
from trm_spmd.data.source import resolve_input
from trm_spmd.tasks.maze.build import build_from_files, build_generated


def define_flags():
    flags.DEFINE_string('input', None, 'training mazes: an official Maze-Hard CSV, local or hf://OWNER/NAME/FILE')
    flags.DEFINE_string('test_input', None, 'test mazes, in the same format')
    flags.DEFINE_string('output_dir', None, 'dataset directory to create (must not exist)')
    flags.DEFINE_integer('subsample', 0, 'keep this many training mazes (0: all)')
    flags.DEFINE_integer('num_aug', 0, 'dihedral copies per training maze, 0..7 (7: the official aug=True)')
    flags.DEFINE_integer('seed', 0, 'seed of every random choice')
    flags.DEFINE_enum('on_error', 'fail', ['fail', 'skip'], 'what to do with a bad row')
    flags.DEFINE_bool('generate', False, 'generate mazes instead of reading --input')
    flags.DEFINE_integer('num_train', 1000, 'generated training mazes')
    flags.DEFINE_integer('num_test', 1000, 'generated test mazes')
    flags.DEFINE_integer('size', 30, 'side of the generated mazes')
    flags.DEFINE_integer('min_path', None, 'keep generated mazes whose shortest path has more moves '
                         '(default 110 at 30x30, scaled with the area)')


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f'unexpected arguments {argv[1:]}')
    f = flags.FLAGS
    if bool(f.input) == f.generate:
        raise DataError('give exactly one of --input=FILE (with --test_input) and --generate')
    if f.generate:
        if f.test_input or f.subsample:
            raise DataError('--generate takes no input files or --subsample (use --num_train)')
        summary = build_generated(f.output_dir, f.num_train, f.num_test, f.size, f.min_path, f.seed, f.num_aug)
    else:
        summary = build_from_files(f.output_dir, resolve_input(f.input), resolve_input(f.test_input),
                                   f.subsample, f.num_aug, f.seed, f.on_error)
    print(summary)
