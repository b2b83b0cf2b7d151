"""The on-disk dataset: the official TinyRecursiveModels npy layout, read and written.

    DIR/identifiers.json                      ["<blank>"]
    DIR/{train,test}/dataset.json             metadata (pad_id, vocab_size, seq_len, ...)
    DIR/{train,test}/all__inputs.npy          uint8 [N, seq_len] tokens
    DIR/{train,test}/all__labels.npy          uint8 [N, seq_len] tokens, ignore_label_id = ignored
    DIR/{train,test}/all__puzzle_identifiers.npy  int32 [P]
    DIR/{train,test}/all__puzzle_indices.npy  int32 [P + 1], examples of puzzle p
    DIR/{train,test}/all__group_indices.npy   int32 [G + 1], puzzles of group g
    DIR/{train,test}/all__ratings.npy         int32 [N], -1 unknown (ours; optional)

The layout knows no task: sequence length, vocabulary and ids come from dataset.json, and
what a task adds (a difficulty measure, the command that builds it) is passed in by the
task (trm_spmd/tasks). Datasets built by the official builders load unchanged. Writing
goes to a temporary directory beside the output that is renamed into place at the end, so
a failed or interrupted build never leaves a directory that looks like a dataset.
"""

import contextlib
import dataclasses
import filecmp
import functools
import json
import os
import shutil
import tempfile

import numpy as np

from trm_spmd.data.errors import DataError

SPLITS = ('train', 'test')
_ARRAYS = ('inputs', 'labels', 'puzzle_identifiers', 'puzzle_indices', 'group_indices')
_METADATA_KEYS = ('pad_id', 'ignore_label_id', 'blank_identifier_id', 'vocab_size', 'seq_len',
                  'num_puzzle_identifiers', 'total_groups', 'mean_puzzle_examples', 'total_puzzles', 'sets')


class DatasetError(DataError):
    """A dataset directory that is missing or does not have the expected layout."""


@dataclasses.dataclass
class Split:
    """One split of a dataset; the arrays may be memory-mapped (read-only)."""
    path: str
    inputs: np.ndarray
    labels: np.ndarray
    puzzle_identifiers: np.ndarray
    puzzle_indices: np.ndarray
    group_indices: np.ndarray
    ratings: np.ndarray | None
    metadata: dict
    difficulty_fn: object = None   # (inputs, labels) -> int32 [N], the task's difficulty measure

    @property
    def num_examples(self):
        return self.inputs.shape[0]

    @property
    def num_groups(self):
        return self.group_indices.shape[0] - 1

    @property
    def epoch_examples(self):
        """Rows one training epoch yields: one puzzle per group with all its examples on
        average (the reference's epoch; the group count where puzzles are single examples)."""
        puzzles = self.puzzle_indices.shape[0] - 1
        return self.num_groups * self.num_examples / max(puzzles, 1)

    @functools.cached_property
    def difficulty(self):
        """int32 [N]: the task's difficulty of each example (zeros when it has none)."""
        if self.difficulty_fn is None:
            return np.zeros(self.num_examples, np.int32)
        return np.asarray(self.difficulty_fn(np.asarray(self.inputs), np.asarray(self.labels)), np.int32)


def _fail(path, problem, build_hint):
    raise DatasetError(f'{path}: {problem}: rebuild it with {build_hint}')


def _check_index(path, index, name, length, end, fail):
    if index.ndim != 1 or index.shape[0] != length or (length and (index[0] != 0 or index[-1] != end)):
        fail(path, f'{name} must be [{length}] running from 0 to {end}, got shape {index.shape}')
    if length and np.any(np.diff(index) <= 0):
        fail(path, f'{name} must be strictly increasing (every puzzle and group non-empty)')


def load_split(dataset_dir, split, mmap=True, build_hint='the builder of its task (README)', difficulty=None):
    """Loads and checks DIR/split; a DatasetError names the problem and `build_hint`, the
    command that builds such a dataset (DIR stands for the directory). `difficulty`: the
    task's (inputs, labels) -> int32 [N] measure behind Split.difficulty."""
    dataset_dir = os.fspath(dataset_dir)
    path = os.path.join(dataset_dir, split)
    fail = functools.partial(_fail, build_hint=build_hint)
    if not os.path.isdir(dataset_dir):
        raise DatasetError(f'dataset not found at {dataset_dir}: build it with '
                           f'{build_hint.replace("DIR", dataset_dir)}')
    if not os.path.isdir(path):
        fail(path, f'split {split!r} is missing')
    meta_path = os.path.join(path, 'dataset.json')
    try:
        with open(meta_path) as f:
            metadata = json.load(f)
    except FileNotFoundError:
        fail(meta_path, 'missing')
    except (OSError, ValueError) as e:
        fail(meta_path, f'unreadable ({e})')
    missing = [k for k in _METADATA_KEYS if k not in metadata]
    if missing:
        fail(meta_path, f'missing fields {", ".join(missing)}')
    if 'all' not in metadata['sets']:
        fail(meta_path, f'sets {metadata["sets"]} has no "all" set')

    arrays = {}
    for name in _ARRAYS + ('ratings',):
        file = os.path.join(path, f'all__{name}.npy')
        if name == 'ratings' and not os.path.exists(file):
            arrays[name] = None
            continue
        try:
            arrays[name] = np.load(file, mmap_mode='r' if mmap else None)
        except FileNotFoundError:
            fail(file, 'missing')
        except (OSError, ValueError) as e:
            fail(file, f'unreadable ({e})')
        if arrays[name].dtype.kind not in 'iu':
            fail(file, f'dtype {arrays[name].dtype} is not an integer type')

    inputs, labels = arrays['inputs'], arrays['labels']
    seq_len = metadata['seq_len']
    if inputs.ndim != 2 or inputs.shape[1] != seq_len:
        fail(path, f'all__inputs.npy has shape {inputs.shape}, expected [N, {seq_len}]')
    if labels.shape != inputs.shape:
        fail(path, f'all__labels.npy has shape {labels.shape}, all__inputs.npy {inputs.shape}')
    puzzles = arrays['puzzle_identifiers'].shape[0]
    _check_index(path, arrays['puzzle_indices'], 'all__puzzle_indices.npy', puzzles + 1, inputs.shape[0], fail)
    _check_index(path, arrays['group_indices'], 'all__group_indices.npy',
                 metadata['total_groups'] + 1, puzzles, fail)
    if arrays['ratings'] is not None and arrays['ratings'].shape != (inputs.shape[0],):
        fail(path, f'all__ratings.npy has shape {arrays["ratings"].shape}, expected [{inputs.shape[0]}]')
    # The index arrays are small and read on every batch: keep them in memory.
    for name in ('puzzle_identifiers', 'puzzle_indices', 'group_indices'):
        arrays[name] = np.asarray(arrays[name], np.int64)
    return Split(path=path, metadata=metadata, difficulty_fn=difficulty, **arrays)


def split_arrays(inputs, labels, group_size, ratings, vocab_size):
    """Arrays and metadata of a split whose examples are each their own puzzle and come in
    consecutive groups of `group_size` (an original and its augmentations), as the official
    Sudoku and Maze builders write them: pad 0, label 0 ignored, one blank identifier."""
    count = inputs.shape[0]
    groups = count // group_size
    assert groups * group_size == count, 'examples must fill whole groups'
    metadata = dict(pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=int(vocab_size),
                    seq_len=int(inputs.shape[1]), num_puzzle_identifiers=1, total_groups=groups,
                    mean_puzzle_examples=1, total_puzzles=groups, sets=['all'])
    arrays = dict(inputs=np.asarray(inputs, np.uint8), labels=np.asarray(labels, np.uint8),
                  puzzle_identifiers=np.zeros(count, np.int32),
                  puzzle_indices=np.arange(count + 1, dtype=np.int32),
                  group_indices=np.arange(0, count + 1, group_size, dtype=np.int32),
                  ratings=np.asarray(ratings, np.int32))
    return arrays, metadata


def check_new_output_dir(output_dir):
    """A builder's --output_dir must be given and not exist yet: checked before any work."""
    if not output_dir:
        raise DataError('--output_dir is required')
    if os.path.exists(output_dir):
        raise DataError(f'{output_dir} already exists: remove it or choose another --output_dir')


@contextlib.contextmanager
def staged(output_dir):
    """A temporary directory beside output_dir to write a dataset into; renamed into place when
    the block ends without an error, removed in every case."""
    output_dir = os.path.abspath(os.fspath(output_dir))
    if os.path.exists(output_dir):
        raise DatasetError(f'{output_dir} already exists: remove it or choose another output directory')
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f'.{os.path.basename(output_dir)}.partial-', dir=parent)
    try:
        os.chmod(tmp, 0o755)   # mkdtemp's 0700 would hide the dataset from other users
        yield tmp
        try:
            os.rename(tmp, output_dir)
        except OSError:
            # Runs on one machine sharing a dataset cache can race to build it; builds are
            # deterministic, so the winner's bytes are ours and the loser just steps aside.
            if not os.path.isdir(output_dir):
                raise
            if not _same_files(tmp, output_dir):
                raise DatasetError(f'{output_dir} appeared during the build with other contents: '
                                   f'remove it and build again') from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)   # nothing left after a successful rename


def write_json(path, value):
    """JSON as the official builders write it (json.dump's default separators)."""
    with open(path, 'w') as f:
        json.dump(value, f)


def write_dataset(output_dir, splits, identifiers=('<blank>',)):
    """Writes {split: (arrays, metadata)} and identifiers.json (names by puzzle identifier,
    0 the blank) to output_dir atomically."""
    with staged(output_dir) as tmp:
        write_json(os.path.join(tmp, 'identifiers.json'), list(identifiers))
        for split, (arrays, metadata) in splits.items():
            os.mkdir(os.path.join(tmp, split))
            for name, array in arrays.items():
                np.save(os.path.join(tmp, split, f'all__{name}.npy'), array)
            write_json(os.path.join(tmp, split, 'dataset.json'), metadata)


def _same_files(a, b):
    def listing(root):
        return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)
    names = listing(a)
    return names == listing(b) and all(
        filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)
