"""Several task families in one run (data.mixture): one token space, one sequence length,
one global batch of fixed composition. Each member's dataset loads unchanged; its rows are
moved into the mixture's space as batches are made, and its answers moved back for its scorer.

The scheme, and why:
- Tokens: pad 0 is shared; task i's other tokens move up past the tasks before it,
  t -> t + sum_{j<i} (V_j - 1), so the vocabulary is 1 + sum_i (V_i - 1) (Sudoku 11 + Maze 6:
  16). A token means one thing in every row: the model tells the tasks apart from any cell
  without a task token, an embedding row is never shared by two meanings, and a logit of
  another task's token is simply a wrong answer. The cost is a few embedding and output rows.
- Sequences: every row is padded on the right to the longest member's length (pad inputs,
  ignored labels). One shape is one compiled graph on every backend; the padded cells
  cost compute in every network call, and `padding_fraction` says how much (Sudoku's 81
  beside Maze-Hard's 900 at equal weights: 45% of the tokens). Packing several short rows
  into one would waste less, but the token-mixing MLP mixes fixed positions, so a
  packed row would not be the task's row.
- Puzzle identifiers: task i's identifiers move up past the tasks before it (blank
  included), p -> p + sum_{j<i} N_j, so each task keeps its own; with a puzzle embedding a
  task's blank row is a learned embedding of the task.
- Batches: member i fills a fixed share of every global batch, rows
  [sum_{j<i} B_j, sum_{j<=i} B_j) with B_i = the batch split by the weights (largest remainders),
  from its own stream: the rows that task alone trains on at batch B_i (the same seed),
  with its own epochs and resume position. A row position always holds the same task, so
  the ACT carry of an unhalted row never changes task.
"""

import dataclasses

import numpy as np

from trm_spmd.batch import IGNORE_LABEL, host_rows
from trm_spmd.data.errors import DataError
from trm_spmd.data.loader import TrainBatches


@dataclasses.dataclass(frozen=True)
class TokenMap:
    """Where one member task's tokens, puzzle identifiers and sequence sit in the mixture's."""
    name: str
    token_offset: int      # task token t > 0 -> t + token_offset; pad 0 stays 0
    vocab_size: int        # the task's own
    id_offset: int         # puzzle identifier p -> p + id_offset
    num_ids: int           # the task's own identifiers, its blank included
    seq_len: int           # the task's own; rows are padded to mixture_seq_len
    mixture_seq_len: int

    def to_mixture(self, batch):
        """A copy of a host batch (inputs, labels [n, seq_len], puzzle_identifiers [n], ...)
        in the mixture's space."""
        inputs, labels = np.asarray(batch['inputs']), np.asarray(batch['labels'])
        rows = inputs.shape[0]
        moved_inputs = np.zeros((rows, self.mixture_seq_len), np.int32)
        moved_inputs[:, :self.seq_len] = np.where(inputs > 0, inputs + self.token_offset, 0)
        moved_labels = np.full((rows, self.mixture_seq_len), IGNORE_LABEL, np.int32)
        moved_labels[:, :self.seq_len] = np.where(labels > 0, labels + self.token_offset, labels)
        identifiers = np.asarray(batch['puzzle_identifiers'], np.int32) + self.id_offset
        return dict(batch, inputs=moved_inputs, labels=moved_labels, puzzle_identifiers=identifiers)

    def answers(self, tokens):
        """Predicted mixture tokens [n, mixture_seq_len] -> the task's tokens [n, seq_len]; a
        token of another task reads as pad 0 (wrong wherever an answer is expected)."""
        own = np.asarray(tokens)[:, :self.seq_len].astype(np.int64) - self.token_offset
        return np.where((own >= 1) & (own < self.vocab_size), own, 0).astype(np.asarray(tokens).dtype)


def token_maps(names, sizes):
    """[TokenMap] of the members `names` with sizes [{'seq_len', 'vocab_size',
    'num_puzzle_identifiers' (default 1)}], in order."""
    seq_len = max(int(s['seq_len']) for s in sizes)
    maps, token_offset, id_offset = [], 0, 0
    for name, s in zip(names, sizes):
        num_ids = int(s.get('num_puzzle_identifiers', 1))
        maps.append(TokenMap(name, token_offset, int(s['vocab_size']), id_offset, num_ids, int(s['seq_len']), seq_len))
        token_offset += int(s['vocab_size']) - 1
        id_offset += num_ids
    return maps


def planned_maps(members, data_config):
    """[TokenMap] of the member Tasks (anything with a name and sizes(data_config)), in order,
    from the sizes data_config implies: for what runs without the datasets (--dry_run,
    validation, the TPU compiler)."""
    return token_maps([task.name for task in members], [task.sizes(data_config) for task in members])


def mixture_sizes(maps):
    """The sizes the model of a mixture takes."""
    return {'seq_len': maps[0].mixture_seq_len,
            'vocab_size': 1 + sum(m.vocab_size - 1 for m in maps),
            'num_puzzle_identifiers': sum(m.num_ids for m in maps)}


def member_rows(global_batch_size, weights):
    """Rows of every global batch per member: the batch split in proportion to `weights`
    (largest remainders, so they sum to the batch); a member left with none is an error."""
    weights = np.asarray(weights, np.float64)
    exact = global_batch_size * weights / weights.sum()
    rows = np.floor(exact).astype(np.int64)
    for i in np.argsort(-(exact - rows), kind='stable')[:global_batch_size - int(rows.sum())]:
        rows[i] += 1
    return [int(r) for r in rows]


def batch_rows(data_config):
    """member_rows of a config's data section (no weights: equal shares)."""
    weights = tuple(data_config.mixture_weights) or (1.0,) * len(data_config.mixture)
    return member_rows(data_config.global_batch_size, weights)


def padding_fraction(maps, rows):
    """The share of a batch's token positions that are padding."""
    return sum(n * (m.mixture_seq_len - m.seq_len) for m, n in zip(maps, rows)) / (
        sum(rows) * maps[0].mixture_seq_len)


def describe(maps, rows):
    """One line: the batch's composition and what its padding costs."""
    shares = ', '.join(f'{m.name} {n} rows of {m.seq_len} tokens' for m, n in zip(maps, rows))
    return (f'a mixture of {len(maps)} tasks, per batch {shares}, padded to {maps[0].mixture_seq_len}: '
            f'{100 * padding_fraction(maps, rows):.1f}% of its tokens are padding')


class MixtureTrainBatches:
    """This host's rows of the mixture's global batches: member by member, each member's
    part of the host's rows from that member's own TrainBatches stream. The same interface
    as TrainBatches (batch_at, position, check_position)."""

    def __init__(self, maps, splits, rows, seed, augments, process_index=0, process_count=1):
        start, stop = host_rows(sum(rows), process_index, process_count)
        self.members, first = [], 0
        for token_map, split, count, augment in zip(maps, splits, rows, augments):
            own = (min(max(start - first, 0), count), min(max(stop - first, 0), count))
            self.members.append((token_map, TrainBatches(split, count, seed, augment=augment, rows=own)))
            first += count

    def batch_at(self, step):
        parts = [token_map.to_mixture(stream.batch_at(step)) for token_map, stream in self.members]
        return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}

    def position(self, step):
        return {token_map.name: stream.position(step) for token_map, stream in self.members}

    def check_position(self, position):
        names = [token_map.name for token_map, _ in self.members]
        if not isinstance(position, dict) or sorted(position) != sorted(names):
            raise DataError(f'the data position was saved with another data set than the mixture of '
                            f'{", ".join(names)}: resume with the same data')
        for token_map, stream in self.members:
            stream.check_position(position[token_map.name])
