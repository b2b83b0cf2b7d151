"""Training and evaluation batches for one host, and a background prefetcher.

Every host computes the same epoch permutations, and the per-row draws of its own rows
from counter-based streams, so the global batch does not depend on how many hosts share
it, while each host materializes only its rows. All randomness is a pure function of
(seed, epoch) or (seed, step, row): a loader's position is one integer.

Training stream (as the reference): epoch e is a seeded permutation of the groups; the
permutations of epochs 0, 1, 2, ... are laid end to end and consumed by consecutive global
batches; each group slot picks one random puzzle of its group. Where every puzzle is one
example (Sudoku, mazes) a slot is one row: batch s is slots [s*B, (s+1)*B). Where puzzles
have several examples (ARC: a task's demonstration pairs) a slot contributes all its
puzzle's examples in random order, as the reference packs them, and the batch's last puzzle
is cut at the batch's end; the next batch starts at the next slot. Batches straddle epoch
boundaries instead of dropping a remainder, so every group is seen once per epoch, nothing
is wasted when the group count is not a multiple of the batch (1000 groups at batch 768:
1.30 steps per epoch, the reference's 65,104 steps for 50,000 epochs), and a dataset with
fewer groups than one batch still yields full batches without drawing any group twice
within an epoch.
"""

import queue
import threading

import numpy as np

from trm_spmd.batch import IGNORE_LABEL, host_rows
from trm_spmd.data.errors import DataError

# Stream tags keep the random draws for the different purposes independent.
_PERMUTATION, _VARIANT, _AUGMENT, _ORDER = 0, 1, 2, 3


def row_uniforms(entropy, start, stop, per_row):
    """Uniform numbers [stop - start, per_row] for rows [start, stop) of a batch.

    Row i always gets draws i * per_row ... of one counter-based Philox stream keyed by
    `entropy`, so a host jumps straight to its rows: the same numbers on any host count,
    at a cost proportional to the host's rows only. per_row must be a multiple of 4
    (Philox makes 4 numbers per counter step).
    """
    bits = np.random.Philox(np.random.SeedSequence(entropy))
    bits.advance(start * per_row // 4)
    return np.random.Generator(bits).random((stop - start, per_row))


def _labels(tokens, ignore_label_id):
    labels = tokens.astype(np.int32)
    if ignore_label_id is not None:
        labels[tokens == ignore_label_id] = IGNORE_LABEL
    return labels


class TrainBatches:
    """Endless iterator of this host's training rows: dicts of int32 numpy arrays
    'inputs' [b, L], 'labels' [b, L] (ignored cells -100), 'puzzle_identifiers' [b],
    with b = global_batch_size / process_count, or the global rows [start, stop) that `rows`
    names (a mixture's member gives each host the part of its rows that falls in the host's).

    With an `augment` (the task's Augmentation: draws per row, apply(uniforms, inputs, labels))
    every row gets its own random symmetry of the task.
    """

    def __init__(self, split, global_batch_size, seed, process_index=0, process_count=1, augment=None, rows=None):
        self._start, self._stop = rows or host_rows(global_batch_size, process_index, process_count)
        if split.num_groups < 1:
            raise DataError(f'{split.path}: the training split has no groups: rebuild the dataset')
        self.split = split
        self.global_batch_size = global_batch_size
        self.seed = int(seed)
        self.augment = augment
        self._ignore = split.metadata.get('ignore_label_id')
        self._group_start = split.group_indices[:-1]
        self._group_size = np.diff(split.group_indices)
        self._puzzle_start = split.puzzle_indices[:-1]
        self._puzzle_size = np.diff(split.puzzle_indices)
        self._permutations = {}
        self._packed = bool(self._puzzle_size.max() > 1)
        self._cursors = {0: 0}

    @property
    def num_groups(self):
        return self.split.num_groups

    @property
    def steps_per_epoch(self):
        """Batches per pass over the groups; fractional, batches straddle epochs."""
        return self.split.epoch_examples / self.global_batch_size

    def _permutation(self, epoch):
        if epoch not in self._permutations:
            if len(self._permutations) > 8:
                self._permutations.clear()
            rng = np.random.default_rng([self.seed, _PERMUTATION, epoch])
            self._permutations[epoch] = rng.permutation(self.num_groups)
        return self._permutations[epoch]

    def _groups(self, first, count):
        """Groups at stream positions [first, first + count)."""
        groups = np.empty(count, np.int64)
        done = 0
        while done < count:
            epoch, offset = divmod(first + done, self.num_groups)
            take = min(count - done, self.num_groups - offset)
            groups[done:done + take] = self._permutation(epoch)[offset:offset + take]
            done += take
        return groups

    def _pick(self, groups, u):
        """A random puzzle of each group, by one uniform number each."""
        sizes = self._group_size[groups]
        return self._group_start[groups] + np.minimum((u * sizes).astype(np.int64), sizes - 1)

    def _packed_batch(self, step):
        """(examples, puzzles, next slot) of global batch `step`, packed from slot cursor(step)."""
        first = self._cursor(step)
        # Every slot gives at least one row: B slots always fill the batch.
        slots = self._groups(first, self.global_batch_size)
        puzzles = self._pick(slots, row_uniforms([self.seed, _VARIANT], first, first + slots.size, 4)[:, 0])
        sizes = self._puzzle_size[puzzles]
        used = int(np.searchsorted(np.cumsum(sizes), self.global_batch_size)) + 1
        puzzles, sizes = puzzles[:used], sizes[:used]
        # Each puzzle's examples in a random order (the reference's draw without replacement).
        owner = np.repeat(np.arange(used), sizes)
        keys = np.random.default_rng([self.seed, _ORDER, step]).random(owner.size)
        order = np.lexsort((keys, owner))
        offsets = order - np.repeat(np.cumsum(sizes) - sizes, sizes)
        examples = self._puzzle_start[puzzles][owner] + offsets
        return examples[:self.global_batch_size], puzzles[owner][:self.global_batch_size], first + used

    def _cursor(self, step):
        """The first group slot of packed batch `step`: where batch step - 1 stopped."""
        known = max(s for s in self._cursors if s <= step)
        while known < step:
            self._cursors[known + 1] = self._packed_batch(known)[2]
            known += 1
            if len(self._cursors) > 4096:   # keep the start, the recent ones and every 1024th
                self._cursors = {s: c for s, c in self._cursors.items() if s % 1024 == 0 or s > known - 64}
        return self._cursors[step]

    def batch_at(self, step):
        """This host's rows of global batch `step` (a pure function of seed and step)."""
        if self._packed:
            examples, puzzles, _ = self._packed_batch(step)
            examples, puzzles = examples[self._start:self._stop], puzzles[self._start:self._stop]
        else:
            u = row_uniforms([self.seed, _VARIANT, step], self._start, self._stop, 4)
            puzzles = self._pick(self._groups(step * self.global_batch_size + self._start, self._stop - self._start),
                                 u[:, 0])
            sizes = self._puzzle_size[puzzles]
            examples = self._puzzle_start[puzzles] + np.minimum((u[:, 1] * sizes).astype(np.int64), sizes - 1)
        inputs = self.split.inputs[examples]
        labels = self.split.labels[examples]
        if self.augment is not None:
            u = row_uniforms([self.seed, _AUGMENT, step], self._start, self._stop, self.augment.draws)
            inputs, labels = self.augment.apply(u, inputs, labels)
        return {'inputs': inputs.astype(np.int32),
                'labels': _labels(labels, self._ignore),
                'puzzle_identifiers': self.split.puzzle_identifiers[puzzles].astype(np.int32)}

    def position(self, step):
        """Where batch `step` starts in the stream; host-independent, so any host count can resume it."""
        slot = self._cursor(step) if self._packed else step * self.global_batch_size
        epoch, offset = divmod(slot, self.num_groups)
        return {'step': int(step), 'epoch': epoch, 'offset': offset, 'seed': self.seed,
                'global_batch_size': self.global_batch_size, 'num_groups': self.num_groups}

    def check_position(self, position):
        """Refuses to resume a position saved with another stream (seed, batch, groups); a
        packed stream continues from the saved slot instead of replaying the batches before it."""
        for key in ('seed', 'global_batch_size', 'num_groups'):
            if int(position[key]) != getattr(self, key):
                raise DataError(f'the data position was saved with {key}={int(position[key])} but this run has '
                                f'{getattr(self, key)}: resume with the same data, seed and batch size')
        if self._packed:
            self._cursors[int(position['step'])] = int(position['epoch']) * self.num_groups + int(position['offset'])


class EvalBatches:
    """The split in order, in global batches; the last one padded (inputs 0, labels -100,
    identifiers 0). Each host gets its rows as dicts with 'inputs', 'labels',
    'puzzle_identifiers', 'valid' (bool), 'rating' (int32, -1 unknown), 'difficulty' (int32,
    the task's measure) and 'index' (int64 example index, -1 for padding). Re-iterable from the start.
    max_examples > 0 keeps only the first max_examples examples.
    """

    def __init__(self, split, global_batch_size, process_index=0, process_count=1, max_examples=0):
        self._start, self._stop = host_rows(global_batch_size, process_index, process_count)
        self.split = split
        self.global_batch_size = global_batch_size
        self.num_examples = split.num_examples if max_examples <= 0 else min(max_examples, split.num_examples)
        self.num_batches = -(-self.num_examples // global_batch_size)
        self._ignore = split.metadata.get('ignore_label_id')
        self._pad = int(split.metadata['pad_id'])
        self._puzzle_of_example = np.repeat(np.arange(len(split.puzzle_indices) - 1),
                                            np.diff(split.puzzle_indices))

    def __len__(self):
        return self.num_batches

    def batch_at(self, index):
        first = index * self.global_batch_size
        positions = np.arange(first + self._start, first + self._stop, dtype=np.int64)
        valid = positions < self.num_examples
        rows = positions[valid]
        size = positions.shape[0]
        inputs = np.full((size, self.split.inputs.shape[1]), self._pad, np.int32)
        labels = np.full(inputs.shape, IGNORE_LABEL, np.int32)
        identifiers = np.zeros(size, np.int32)
        rating = np.full(size, -1, np.int32)
        difficulty = np.zeros(size, np.int32)
        count = rows.shape[0]
        if count:
            inputs[:count] = self.split.inputs[rows[0]:rows[-1] + 1]
            labels[:count] = _labels(np.asarray(self.split.labels[rows[0]:rows[-1] + 1]), self._ignore)
            identifiers[:count] = self.split.puzzle_identifiers[self._puzzle_of_example[rows]]
            difficulty[:count] = self.split.difficulty[rows]
            if self.split.ratings is not None:
                rating[:count] = self.split.ratings[rows]
        return {'inputs': inputs, 'labels': labels, 'puzzle_identifiers': identifiers, 'valid': valid,
                'rating': rating, 'difficulty': difficulty, 'index': np.where(valid, positions, -1)}

    def __iter__(self):
        for index in range(self.num_batches):
            yield self.batch_at(index)

    def examples(self, rows):
        """'inputs', 'labels' (ignored cells -100) and 'puzzle_identifiers' of the split's
        examples `rows` (any host reads any row: every host holds the whole split)."""
        rows = np.asarray(rows, np.int64)
        return {'inputs': np.asarray(self.split.inputs[rows], np.int32),
                'labels': _labels(np.asarray(self.split.labels[rows]), self._ignore),
                'puzzle_identifiers': np.asarray(self.split.puzzle_identifiers[self._puzzle_of_example[rows]],
                                                 np.int32)}


class Prefetcher:
    """batch_at(start), batch_at(start + 1), ... made on a background thread, up to `depth`
    ahead. An exception in the producer is raised in the consumer; close() stops the thread."""

    def __init__(self, batch_at, start=0, depth=2):
        if depth < 1:
            raise DataError(f'prefetch depth {depth} must be >= 1')
        self._batch_at = batch_at
        self._queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(start,), name='trm-data-prefetch', daemon=True)
        self._thread.start()

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                pass

    def _produce(self, index):
        try:
            while not self._stop.is_set():
                self._put(self._batch_at(index))
                index += 1
        except BaseException as e:  # handed to the consumer, which re-raises it
            self._put(e)

    def __iter__(self):
        return self

    def __next__(self):
        item = self._queue.get()
        if isinstance(item, BaseException):
            self.close()
            raise item
        return item

    def close(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
