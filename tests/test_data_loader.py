"""Per-host training and eval batches, resumable positions and the prefetcher."""

import json

import numpy as np
import pytest

from trm_spmd.data import EvalBatches, Prefetcher, TrainBatches, load_split
from trm_spmd.tasks.sudoku import TASK as SUDOKU, grid as sudoku

AUGMENT = SUDOKU.augmentation
from trm_spmd.tasks.sudoku.build import build_generated
from trm_spmd.data.dataset import DatasetError, Split
from trm_spmd.batch import IGNORE_LABEL
from trm_spmd.data.errors import DataError
from trm_spmd.errors import UserError


@pytest.fixture(scope='module')
def generated(tmp_path_factory):
    path = tmp_path_factory.mktemp('data') / 'gen'
    build_generated(path, num_train=40, num_test=21, blanks=(30, 40), seed=0, num_aug=2, progress=False)
    return path


def _tagged_split(group_sizes, puzzle_sizes):
    """A split whose rows say where they came from: puzzle_identifiers = puzzle index, and
    input token 0 of every example = its group (mod 10); groups and puzzles of mixed sizes."""
    group_indices = np.concatenate([[0], np.cumsum(group_sizes)])
    puzzle_indices = np.concatenate([[0], np.cumsum(puzzle_sizes)])
    examples = puzzle_indices[-1]
    group_of_puzzle = np.repeat(np.arange(len(group_sizes)), group_sizes)
    inputs = np.ones((examples, 81), np.uint8)
    inputs[:, 0] = group_of_puzzle[np.repeat(np.arange(len(puzzle_sizes)), puzzle_sizes)] % 10
    labels = np.zeros((examples, 81), np.uint8)
    labels[:, 1:] = 5
    return Split(path='tagged', inputs=inputs, labels=labels,
                 puzzle_identifiers=np.arange(len(puzzle_sizes)), puzzle_indices=puzzle_indices,
                 group_indices=group_indices, ratings=None, metadata={'ignore_label_id': 0})


def _groups_of(batch, split):
    puzzles = batch['puzzle_identifiers']
    return np.searchsorted(split.group_indices, puzzles, side='right') - 1


def test_batch_format(generated):
    split = load_split(generated, 'train')
    batch = TrainBatches(split, 16, seed=0).batch_at(0)
    assert sorted(batch) == ['inputs', 'labels', 'puzzle_identifiers']
    assert all(v.dtype == np.int32 for v in batch.values())
    assert batch['inputs'].shape == batch['labels'].shape == (16, 81)
    assert ((batch['labels'] >= 2) & (batch['labels'] <= 10)).all()   # no ignored cell in Sudoku
    assert sudoku.is_solution_grid(batch['labels'] - 1).all()


def test_ignored_labels_become_minus_100():
    split = _tagged_split([1] * 8, [1] * 8)
    batch = TrainBatches(split, 4, seed=0).batch_at(0)
    assert (batch['labels'][:, 0] == IGNORE_LABEL).all() and (batch['labels'][:, 1:] == 5).all()


@pytest.mark.parametrize('groups, batch', [(40, 8), (37, 8), (5, 16)])
def test_every_group_once_per_epoch_and_variant_from_its_group(groups, batch):
    rng = np.random.default_rng(0)
    group_sizes = rng.integers(1, 4, groups)
    split = _tagged_split(group_sizes, np.ones(group_sizes.sum(), int))
    loader = TrainBatches(split, batch, seed=3)
    seen = np.concatenate([_groups_of(loader.batch_at(s), split) for s in range(groups * 3 // np.gcd(groups, batch))])
    for epoch in np.split(seen[:len(seen) // groups * groups], len(seen) // groups):
        assert sorted(epoch.tolist()) == list(range(groups))
    assert loader.steps_per_epoch == groups / batch
    for step in range(5):
        b = loader.batch_at(step)
        assert ((_groups_of(b, split) % 10) == b['inputs'][:, 0]).all()   # the example is from the group


def _packed_split(groups, seed=0):
    """Groups of 1-3 puzzles of 1-5 examples; input token 1 of an example = its index."""
    rng = np.random.default_rng(seed)
    group_sizes = rng.integers(1, 4, groups)
    split = _tagged_split(group_sizes, rng.integers(1, 6, group_sizes.sum()))
    split.inputs[:, 1] = np.arange(split.num_examples) % 256
    return split


def _runs(values):
    """values with consecutive repeats collapsed, and the length of each run."""
    starts = np.flatnonzero(np.diff(values, prepend=values[0] - 1))
    return values[starts], np.diff(np.append(starts, values.size))


@pytest.mark.parametrize('groups, batch', [(40, 8), (7, 16)])
def test_packed_batches_take_every_example_of_a_puzzle_and_every_group_once_per_epoch(groups, batch):
    split = _packed_split(groups)
    loader = TrainBatches(split, batch, seed=3)
    assert loader.steps_per_epoch == pytest.approx(split.epoch_examples / batch)
    slots, cut = [], 0
    for step in range(60):
        first, (_, _, after) = loader._cursor(step), loader._packed_batch(step)
        assert first == len(slots)   # each batch starts at the slot after the last one's
        slots += loader._groups(first, after - first).tolist()
        b = loader.batch_at(step)
        row_groups = _runs(np.searchsorted(split.group_indices, b['puzzle_identifiers'], side='right') - 1)[0]
        assert (row_groups == _runs(np.array(slots[first:]))[0]).all()   # rows come from the slots in order
        puzzles, rows = _runs(b['puzzle_identifiers'])
        sizes = np.diff(split.puzzle_indices)[puzzles]
        assert (rows[:-1] % sizes[:-1] == 0).all() and rows[-1] <= sizes[-1] * 2   # whole puzzles but the last
        cut += rows[-1] % sizes[-1] != 0
    for epoch in range(len(slots) // groups):
        assert sorted(slots[epoch * groups:(epoch + 1) * groups]) == list(range(groups))
    assert 0 < cut < 60
    for step in range(6):
        b = loader.batch_at(step)
        puzzles, rows = _runs(b['puzzle_identifiers'])
        start = 0
        for p, r in zip(puzzles, rows):
            size = split.puzzle_indices[p + 1] - split.puzzle_indices[p]
            for chunk in np.split(b['inputs'][start:start + r, 1], range(size, r, size)):
                own = np.arange(split.puzzle_indices[p], split.puzzle_indices[p + 1]) % 256
                assert set(chunk.tolist()) <= set(own.tolist()) and len(set(chunk.tolist())) == len(chunk)
            start += r


def test_packed_stream_resumes_from_its_position_on_any_host_count():
    split = _packed_split(23, seed=1)
    straight = TrainBatches(split, 12, seed=4)
    expected = [straight.batch_at(s) for s in range(15)]
    position = json.loads(json.dumps(straight.position(9)))
    resumed = TrainBatches(split, 12, seed=4, process_index=2, process_count=3)
    resumed.check_position(position)
    assert min(resumed._cursors) == 0 and 9 in resumed._cursors   # no replay of batches 0-8 needed
    with Prefetcher(resumed.batch_at, start=9, depth=2) as batches:
        for step in range(9, 15):
            got = next(batches)
            for key in got:
                assert (got[key] == expected[step][key][8:]).all()
    assert not (expected[3]['inputs'] == TrainBatches(split, 12, seed=5).batch_at(3)['inputs']).all()


def test_variants_are_all_drawn():
    split = _tagged_split([3, 3], [1] * 6)
    loader = TrainBatches(split, 2, seed=0)
    drawn = {int(p) for s in range(60) for p in loader.batch_at(s)['puzzle_identifiers']}
    assert drawn == set(range(6))


def test_seed_determines_the_stream(generated):
    split = load_split(generated, 'train')
    a, b, c = ([loader.batch_at(s) for s in range(6)] for loader in
               (TrainBatches(split, 8, seed=1), TrainBatches(split, 8, seed=1), TrainBatches(split, 8, seed=2)))
    assert all((x['inputs'] == y['inputs']).all() for x, y in zip(a, b))
    assert any((x['inputs'] != y['inputs']).any() for x, y in zip(a, c))


@pytest.mark.parametrize('augment', [False, True])
def test_host_slices_partition_the_global_batch(generated, augment):
    split = load_split(generated, 'train')
    reference = TrainBatches(split, 16, seed=5, augment=AUGMENT if augment else None)
    full = [reference.batch_at(s) for s in range(7)]
    for hosts in (2, 4, 8):
        loaders = [TrainBatches(split, 16, seed=5, process_index=i, process_count=hosts,
                                augment=AUGMENT if augment else None) for i in range(hosts)]
        for step in range(7):
            parts = [loader.batch_at(step) for loader in loaders]
            assert all(len(p['inputs']) == 16 // hosts for p in parts)
            for key in full[step]:
                assert (np.concatenate([p[key] for p in parts]) == full[step][key]).all()


def test_augmented_batches_are_valid_and_fresh(generated):
    split = load_split(generated, 'train')
    plain = TrainBatches(split, 32, seed=0)
    augmented = TrainBatches(split, 32, seed=0, augment=AUGMENT)
    for step in range(3):
        p, a = plain.batch_at(step), augmented.batch_at(step)
        assert sudoku.is_solution_grid(a['labels'] - 1).all()
        givens = a['inputs'] != sudoku.BLANK_TOKEN
        assert (a['inputs'][givens] == a['labels'][givens]).all()
        assert ((a['inputs'] == 1).sum(1) == (p['inputs'] == 1).sum(1)).all()   # same rows, moved
        assert (a['inputs'] != p['inputs']).any(axis=1).mean() > 0.9


def test_batch_size_must_divide_by_hosts(generated):
    split = load_split(generated, 'train')
    with pytest.raises(UserError, match='not divisible by the 3 hosts'):
        TrainBatches(split, 16, seed=0, process_count=3)
    with pytest.raises(UserError, match='not divisible by the 3 hosts'):
        EvalBatches(load_split(generated, 'test'), 16, process_count=3)


@pytest.mark.parametrize('augment', [False, True])
def test_a_resumed_position_gives_the_same_batches_on_any_host_count(generated, augment):
    split = load_split(generated, 'train')
    straight = TrainBatches(split, 16, seed=9, augment=AUGMENT if augment else None)
    expected = [straight.batch_at(s) for s in range(12)]
    position = json.loads(json.dumps(straight.position(5)))      # survives a checkpoint file
    assert position['step'] == 5 and (position['epoch'], position['offset']) == divmod(5 * 16, 40)
    resumed = TrainBatches(split, 16, seed=9, process_index=1, process_count=2, augment=AUGMENT if augment else None)
    resumed.check_position(position)
    with Prefetcher(resumed.batch_at, start=position['step'], depth=3) as batches:
        for step in range(5, 12):
            assert (next(batches)['inputs'] == expected[step]['inputs'][8:]).all()


def test_resume_refuses_other_seed_or_batch(generated):
    split = load_split(generated, 'train')
    position = TrainBatches(split, 16, seed=9).position(3)
    with pytest.raises(DataError, match='seed=9'):
        TrainBatches(split, 16, seed=1).check_position(position)
    with pytest.raises(DataError, match='global_batch_size=16'):
        TrainBatches(split, 8, seed=9).check_position(position)


def test_prefetcher_reraises_the_producers_error():
    def batch_at(index):
        if index == 2:
            raise RuntimeError('broken source')
        return index

    batches = Prefetcher(batch_at, depth=2)
    assert [next(batches), next(batches)] == [0, 1]
    with pytest.raises(RuntimeError, match='broken source'):
        next(batches)
    batches.close()


def test_prefetcher_close_stops_an_endless_producer(generated):
    batches = Prefetcher(TrainBatches(load_split(generated, 'train'), 8, seed=0).batch_at, depth=2)
    next(batches)
    batches.close()
    assert batches._thread is None


def test_eval_batches_pad_the_last_batch(generated):
    split = load_split(generated, 'test', difficulty=SUDOKU.difficulty)   # 21 examples
    batches = EvalBatches(split, 8)
    assert batches.num_batches == len(batches) == 3
    out = list(batches)
    assert [b['valid'].sum() for b in out] == [8, 8, 5]
    last = out[-1]
    assert (last['index'] == [16, 17, 18, 19, 20, -1, -1, -1]).all()
    assert (last['inputs'][5:] == 0).all() and (last['labels'][5:] == IGNORE_LABEL).all()
    assert (last['puzzle_identifiers'][5:] == 0).all() and (last['rating'] == -1).all()
    index = np.concatenate([b['index'] for b in out])
    assert (index[:21] == np.arange(21)).all()
    inputs = np.concatenate([b['inputs'] for b in out])[:21]
    assert (inputs == np.asarray(split.inputs)).all()
    assert (np.concatenate([b['difficulty'] for b in out])[:21] == (inputs == 1).sum(1)).all()
    assert all((a['inputs'] == b['inputs']).all() for a, b in zip(out, batches))   # re-iterable


@pytest.mark.parametrize('hosts', [1, 2, 4, 8])
def test_eval_host_slices_are_disjoint_and_complete(generated, hosts):
    split = load_split(generated, 'test')
    full = list(EvalBatches(split, 8))
    parts = [list(EvalBatches(split, 8, process_index=i, process_count=hosts)) for i in range(hosts)]
    for step, batch in enumerate(full):
        for key in batch:
            assert (np.concatenate([p[step][key] for p in parts]) == batch[key]).all()
    valid = np.concatenate([b['index'][b['valid']] for p in parts for b in p])
    assert sorted(valid.tolist()) == list(range(21))


def test_eval_max_examples(generated):
    batches = EvalBatches(load_split(generated, 'test'), 8, max_examples=10)
    out = list(batches)
    assert batches.num_batches == 2 and out[-1]['valid'].sum() == 2


def test_load_split_errors_name_path_and_fix(generated, tmp_path):
    with pytest.raises(DatasetError, match=r'dataset not found at .*missing: build it with python -m '
                                           r'trm_spmd\.build sudoku'):
        load_split(tmp_path / 'missing', 'train', build_hint=SUDOKU.build_hint())
    broken = tmp_path / 'broken'
    broken.mkdir()
    (broken / 'train').symlink_to(generated / 'train')
    with pytest.raises(DatasetError, match=r"broken/test: split 'test' is missing"):
        load_split(broken, 'test')
    copy = tmp_path / 'copy' / 'train'
    copy.mkdir(parents=True)
    for f in (generated / 'train').iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    np.save(copy / 'all__labels.npy', np.zeros((3, 81), np.uint8))
    with pytest.raises(DatasetError, match=r'all__labels\.npy has shape \(3, 81\)'):
        load_split(tmp_path / 'copy', 'train')
    (copy / 'all__labels.npy').unlink()
    with pytest.raises(DatasetError, match=r'all__labels\.npy: missing: rebuild it with'):
        load_split(tmp_path / 'copy', 'train')


def test_official_dataset_without_ratings_loads(generated, tmp_path):
    official = tmp_path / 'official' / 'test'
    official.mkdir(parents=True)
    for f in (generated / 'test').iterdir():
        if f.name != 'all__ratings.npy':
            (official / f.name).write_bytes(f.read_bytes())
    split = load_split(tmp_path / 'official', 'test')
    assert split.ratings is None
    assert (next(iter(EvalBatches(split, 4)))['rating'] == -1).all()
