"""Damaged checkpoints: detected before any value is trusted, reported in one line, moved aside
(never deleted), and the newest good one restored instead; hosts agree on the step."""

import json
import os

import numpy as np
import pytest

from trm_spmd import checksums
from trm_spmd.checkpoint import (DAMAGED, Checkpointer, DamagedCheckpoint, NoReadableCheckpoint, restore_agreed,
                                 resume_decision)
from trm_spmd.errors import UserError

from conftest import run_as_hosts
from test_lifecycle import flatten


def _tree(step):
    rng = np.random.default_rng(step)
    return {'model': {'w': rng.standard_normal((64, 32)).astype(np.float32),
                      'b': rng.standard_normal(32).astype(np.float32)},
            'carry': {'z_L': rng.standard_normal((16, 8, 32)).astype(np.float32),
                      'halted': rng.integers(0, 2, 16).astype(bool)},
            'optim': {'main': {'0': {'step': np.asarray(step)}}, 'puzzle': {}}}


def _checkpointer(workdir, **kw):
    return Checkpointer(str(workdir), keep=kw.pop('keep', 5), keep_best=kw.pop('keep_best', 0), async_save=False,
                        is_main_host=kw.pop('is_main_host', True), **kw)


def _write(workdir, steps=(1, 2, 3), **kw):
    checkpointer = _checkpointer(workdir, **kw)
    for step in steps:
        checkpointer.save(step, _tree(step), {'step': step, 'loader': {'step': step}},
                          {'eval/exact_accuracy': step / 10})
    checkpointer.close()


def _assert_same(a, b):
    a, b = flatten(a), flatten(b)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _largest_data_file(step_dir):
    files = [os.path.join(root, f) for root, _, names in os.walk(os.path.join(step_dir, 'state'))
             for f in names if os.sep + 'd' in root]
    return max(files, key=os.path.getsize)


def _truncate(step_dir):
    path = _largest_data_file(step_dir)
    os.truncate(path, os.path.getsize(path) // 2)


def _delete(step_dir):
    os.remove(_largest_data_file(step_dir))


def _garble(step_dir):
    path = _largest_data_file(step_dir)
    data = bytearray(open(path, 'rb').read())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    open(path, 'wb').write(bytes(data))   # same size


def _remove_checkpoint_metadata(step_dir):
    os.remove(os.path.join(step_dir, '_CHECKPOINT_METADATA'))


def _remove_array_metadata(step_dir):
    os.remove(os.path.join(step_dir, 'state', '_METADATA'))


def _change_meta(step_dir):
    # Valid JSON that orbax reads without complaint: only the checksum can tell.
    path = os.path.join(step_dir, 'meta', 'metadata')
    meta = json.loads(open(path).read())
    meta['loader']['step'] += 1
    open(path, 'w').write(json.dumps(meta))


DAMAGE = {'truncate': _truncate, 'delete': _delete, 'garble': _garble,
          'no_checkpoint_metadata': _remove_checkpoint_metadata, 'no_array_metadata': _remove_array_metadata,
          'changed_meta': _change_meta}


@pytest.mark.parametrize('kind', sorted(DAMAGE))
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one_exactly(tmp_path, kind):
    _write(tmp_path)
    reference = _checkpointer(tmp_path)
    direct_tree, direct_meta = reference.restore(2)
    reference.close()
    DAMAGE[kind](str(tmp_path / 'checkpoints' / '3'))
    files_before = sorted(os.path.relpath(os.path.join(r, f), tmp_path / 'checkpoints' / '3')
                          for r, _, fs_ in os.walk(tmp_path / 'checkpoints' / '3') for f in fs_)

    lines = []
    checkpointer = _checkpointer(tmp_path)
    found = checkpointer.restore_newest_good(report=lines.append)
    checkpointer.close()

    assert found.step == 2 and found.meta == direct_meta == {'step': 2, 'loader': {'step': 2}}
    _assert_same(found.tree, direct_tree)
    assert len(lines) == 1 and '\n' not in lines[0]
    assert lines[0].startswith(f'checkpoint {tmp_path}/checkpoints/3 is unreadable: ')
    # Moved aside with every file it had, never deleted; the step is gone from the managed list.
    [moved] = checkpointer.moved_aside
    assert moved.step == 3 and os.path.dirname(moved.destination) == str(tmp_path / DAMAGED)
    assert moved.destination in lines[0]
    files_after = sorted(os.path.relpath(os.path.join(r, f), moved.destination)
                         for r, _, fs_ in os.walk(moved.destination) for f in fs_)
    assert files_after == sorted(files_before + ['DAMAGED.json'])
    assert json.loads(open(os.path.join(moved.destination, 'DAMAGED.json')).read())['step'] == 3
    assert not (tmp_path / 'checkpoints' / '3').exists()
    again = _checkpointer(tmp_path)
    assert again.latest_step() == 2
    again.close()


def test_a_value_that_does_not_match_its_checksum_is_damage(tmp_path, monkeypatch):
    _write(tmp_path, steps=(1,))
    real = checksums.record

    def wrong(tree, meta):
        record = real(tree, meta)
        record['arrays']['model/w'] = '0' * 64
        return record

    monkeypatch.setattr(checksums, 'record', wrong)
    _write(tmp_path, steps=(2,))
    monkeypatch.undo()
    checkpointer = _checkpointer(tmp_path)
    with pytest.raises(DamagedCheckpoint, match='array model/w does not match its checksum'):
        checkpointer.restore(2)
    assert checkpointer.restore_newest_good(report=lambda line: None).step == 1
    checkpointer.close()


def test_the_best_copy_of_the_same_step_is_used_before_an_older_step(tmp_path):
    _write(tmp_path, keep_best=1)
    _truncate(str(tmp_path / 'checkpoints' / '3'))
    checkpointer = _checkpointer(tmp_path, keep_best=1)
    found = checkpointer.restore_newest_good(report=lambda line: None)
    checkpointer.close()
    assert found.step == 3 and found.path == f'{tmp_path}/checkpoints_best/3'
    _assert_same(found.tree, _tree(3))


def test_nothing_readable_stops_in_one_line_and_keeps_everything(tmp_path):
    _write(tmp_path)
    for step in (1, 2, 3):
        _truncate(str(tmp_path / 'checkpoints' / str(step)))
    checkpointer = _checkpointer(tmp_path)
    with pytest.raises(NoReadableCheckpoint) as caught:
        checkpointer.restore_newest_good(report=lambda line: None)
    checkpointer.close()
    message = str(caught.value)
    assert '\n' not in message and 'step(s) 3, 2, 1 are damaged' in message and str(tmp_path / DAMAGED) in message
    assert len(os.listdir(tmp_path / DAMAGED)) == 3
    # Rerunning the same command must not silently start over in this workdir.
    checkpointer = _checkpointer(tmp_path)
    with pytest.raises(NoReadableCheckpoint, match='none is left'):
        checkpointer.restore_newest_good(report=lambda line: None)
    checkpointer.close()


def test_an_empty_workdir_is_a_fresh_start(tmp_path):
    checkpointer = _checkpointer(tmp_path)
    assert checkpointer.restore_newest_good() is None
    checkpointer.close()


def test_a_checkpoint_written_without_checksums_is_still_restored(tmp_path, monkeypatch):
    monkeypatch.setattr(checksums, 'attach', lambda tree, meta: meta)
    _write(tmp_path, steps=(1,))
    monkeypatch.undo()
    checkpointer = _checkpointer(tmp_path)
    found = checkpointer.restore_newest_good()
    checkpointer.close()
    assert found.step == 1
    _assert_same(found.tree, _tree(1))


def test_storage_that_cannot_be_reached_is_not_damage(tmp_path, monkeypatch):
    _write(tmp_path, steps=(1,))
    checkpointer = _checkpointer(tmp_path)

    def unavailable(*args, **kwargs):
        raise ValueError('UNAVAILABLE: connection reset by peer')

    monkeypatch.setattr(checkpointer.latest, 'restore', unavailable)
    with pytest.raises(UserError, match=r'cannot read checkpoint .*/checkpoints/1: UNAVAILABLE.*left in place'):
        checkpointer.restore_newest_good()
    checkpointer.close()
    assert checkpointer.moved_aside == [] and (tmp_path / 'checkpoints' / '1').exists()


def test_a_host_that_does_not_write_never_moves_anything(tmp_path):
    _write(tmp_path)
    _truncate(str(tmp_path / 'checkpoints' / '3'))
    reader = _checkpointer(tmp_path, is_main_host=False, shared_filesystem=True)
    lines = []
    assert reader.restore_newest_good(report=lines.append).step == 2
    reader.close()
    assert (tmp_path / 'checkpoints' / '3').exists() and not (tmp_path / DAMAGED).exists()
    assert 'skipped' in lines[0]


# ---- hosts agree on the step -----------------------------------------------------------------
def test_resume_decision():
    assert resume_decision([{'step': 9}]) == ('resume', 9)
    assert resume_decision([{'step': None}]) == ('resume', None)
    assert resume_decision([{'step': 9}, {'follow': True}, {'follow': True}]) == ('resume', 9)
    assert resume_decision([{'step': 9}, {'step': 6}, {'step': 9}]) == ('retry', 6)
    assert resume_decision([{'error': 'disk on fire'}]) == ('error', 'disk on fire')
    assert resume_decision([{'step': 9}, {'error': 'disk on fire'}]) == ('error', 'host 1: disk on fire')
    kind, line = resume_decision([{'step': 9}, {'step': 9}, {'step': None}])
    assert kind == 'error' and line.startswith('host 2 has no readable checkpoint while host 0 has step 9')
    assert resume_decision([{'follow': True}])[0] == 'error'


def _run_hosts(checkpointers):
    results = run_as_hosts(len(checkpointers), lambda i, exchange: restore_agreed(
        checkpointers[i], exchange, report=lambda line: None))
    for c in checkpointers:
        c.close()
    return results


def test_hosts_with_their_own_disks_agree_on_the_newest_step_good_on_all(tmp_path):
    disks = [tmp_path / f'host{i}' for i in range(3)]
    for disk in disks:
        _write(disk)
    _garble(str(disks[1] / 'checkpoints' / '3'))
    results = _run_hosts([_checkpointer(d, is_main_host=(i == 0)) for i, d in enumerate(disks)])
    assert [r.step for r in results] == [2, 2, 2]
    for r in results:
        _assert_same(r.tree, _tree(2))
    assert (disks[1] / DAMAGED).exists() and not (disks[0] / DAMAGED).exists()
    # Only the damaged copy moved: the good step 3 of the other hosts stays (a later save replaces it).
    assert (disks[0] / 'checkpoints' / '3').exists()


def test_hosts_sharing_a_workdir_follow_host_0(tmp_path):
    _write(tmp_path)
    _delete(str(tmp_path / 'checkpoints' / '3'))
    hosts = [_checkpointer(tmp_path, is_main_host=(i == 0), shared_filesystem=True) for i in range(3)]
    results = _run_hosts(hosts)
    assert [r.step for r in results] == [2, 2, 2]
    assert len(os.listdir(tmp_path / DAMAGED)) == 1


def test_a_host_without_checkpoints_stops_every_host(tmp_path):
    _write(tmp_path / 'host0')
    results = _run_hosts([_checkpointer(tmp_path / 'host0'), _checkpointer(tmp_path / 'host1', is_main_host=False)])
    for r in results:
        assert isinstance(r, UserError) and str(r).startswith('host 1 has no readable checkpoint while host 0 has step 3')
