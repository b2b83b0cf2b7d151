"""Faults a run meets in the wild: a workdir it cannot write, a disk that fills up while it
writes a checkpoint or metrics, a damaged newest checkpoint, a second run in the same
workdir, a config changed between runs. Each ends in one line, keeps what was good, and
leaves nothing half-written that a resume would trust.

Full and read-only filesystems are real ones: small tmpfs mounts (conftest.tmpfs).
"""

import json
import logging
import os
import shutil
import signal
import threading

import numpy as np
import pytest

from trm_spmd import fs, lease
from trm_spmd.checkpoint import DAMAGED, Checkpointer
from trm_spmd.errors import UserError
from trm_spmd.train.metrics import MetricWriter
from trm_spmd.train.loop import train_and_evaluate

from conftest import remount
from test_train import read_metrics, runlocal, train_lines


def _fill(directory, leave_bytes):
    """Fills the filesystem of `directory` until about `leave_bytes` are free; returns the filler."""
    filler = directory / 'filler'
    free = shutil.disk_usage(directory).free - leave_bytes
    with open(filler, 'wb') as f:
        try:
            f.write(b'\0' * max(free, 0))
        except OSError:
            pass
    return filler


def _tree(step, size=40_000):
    return {'w': np.random.default_rng(step).standard_normal(size).astype(np.float32), 'step': np.asarray(step)}


# ---- a workdir that cannot be written -----------------------------------------------------------
def test_a_read_only_workdir_fails_in_one_line_before_anything_is_written(tmpfs):
    mount = tmpfs('1m')
    (mount / 'run').mkdir()
    remount(mount, 'ro')
    with pytest.raises(fs.StorageError) as caught:
        train_and_evaluate(runlocal(), str(mount / 'run'))
    message = str(caught.value)
    assert '\n' not in message and str(mount / 'run') in message
    assert 'Read-only file system; pick a --workdir on a writable filesystem' in message
    assert os.listdir(mount / 'run') == []


def test_a_workdir_under_a_file_fails_in_one_line(tmp_path):
    (tmp_path / 'a_file').write_text('')
    with pytest.raises(fs.StorageError, match=r'cannot create .*a_file/run: Not a directory; a file stands where'):
        train_and_evaluate(runlocal(), str(tmp_path / 'a_file' / 'run'))


def test_a_workdir_that_cannot_be_created_fails_in_one_line(tmpfs):
    parent = tmpfs('1m', read_only=True)
    with pytest.raises(fs.StorageError, match=r'^cannot create .*/run: Read-only file system; pick a --workdir'):
        fs.makedirs(str(parent / 'run'))


# ---- a disk that fills up -----------------------------------------------------------------------
def test_a_full_disk_while_writing_a_checkpoint_stops_in_one_line_and_keeps_the_previous_one(tmpfs, capfd, caplog):
    disk = tmpfs('2m')
    workdir = str(disk / 'run')
    checkpointer = Checkpointer(workdir, keep=3, keep_best=0, async_save=True, is_main_host=True)
    checkpointer.save(1, _tree(1), {'step': 1})
    checkpointer.wait()
    filler = _fill(disk, 40_000)
    with pytest.raises(fs.StorageError) as caught:
        checkpointer.save(2, _tree(2), {'step': 2})
        checkpointer.wait()          # an asynchronous save reports here (or at the next save)
    checkpointer.close()             # already reported: closing adds nothing
    message = str(caught.value)
    assert '\n' not in message
    assert message.startswith(f'cannot write a checkpoint in {workdir}: No space left on device; free space')
    out = capfd.readouterr()
    assert 'Traceback' not in out.out + out.err and 'Event loop is closed' not in out.out + out.err
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

    # The previous checkpoint is whole; the broken write is only orbax's temporary directory.
    reader = Checkpointer(workdir, keep=3, keep_best=0, async_save=False, is_main_host=False)
    assert reader.latest.all_steps() == [1]
    found = reader.restore_newest_good()
    reader.close()
    assert found.step == 1
    np.testing.assert_array_equal(found.tree['w'], _tree(1)['w'])

    # Space freed: the same workdir takes checkpoints again (orbax clears its temporary directory).
    os.remove(filler)
    checkpointer = Checkpointer(workdir, keep=3, keep_best=0, async_save=True, is_main_host=True)
    checkpointer.save(2, _tree(2), {'step': 2})
    checkpointer.close()
    assert not [n for n in os.listdir(disk / 'run' / 'checkpoints') if 'tmp' in n]
    reader = Checkpointer(workdir, keep=3, keep_best=0, async_save=False, is_main_host=False)
    assert reader.restore_newest_good().step == 2
    reader.close()


def test_a_full_disk_while_writing_metrics_stops_in_one_line_and_leaves_whole_lines(tmpfs):
    disk = tmpfs('1m')
    writer = MetricWriter(str(disk), tensorboard=False)
    filler = _fill(disk, 12_000)   # three pages
    written = 0
    with pytest.raises(fs.StorageError) as caught:
        for step in range(1, 10_000):
            writer.write(step, {'train/loss': 1.0 / step, 'pad': 'x' * 200})
            written = step
    assert str(caught.value).startswith(f'cannot append to {disk}/metrics.jsonl: No space left on device')
    text = (disk / 'metrics.jsonl').read_text()
    assert written > 10 and text.endswith('\n')
    assert [json.loads(line)['step'] for line in text.splitlines()] == list(range(1, written + 1))
    # After space is freed the next record follows the last whole one.
    os.remove(filler)
    writer.write(written + 1, {'train/loss': 0.5})
    lines = (disk / 'metrics.jsonl').read_text().splitlines()
    assert [json.loads(line)['step'] for line in lines] == list(range(1, written + 2))
    writer.close()


def test_a_full_disk_under_tensorboard_stops_in_one_line_instead_of_hanging(tmp_path, tmpfs):
    # Only the event files' filesystem is full: metrics.jsonl goes on, the events writer fails.
    disk = tmpfs('1m', at=tmp_path / 'run' / 'tensorboard')
    writer = MetricWriter(str(tmp_path / 'run'), tensorboard=True)
    _fill(disk, 40_000)
    outcome = []

    def log():
        try:
            for step in range(1, 100_000):
                writer.write(step, {f'train/x{i}': float(i) for i in range(20)})
        except fs.StorageError as e:
            outcome.append(str(e))

    thread = threading.Thread(target=log, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), 'writing metrics hung on a full disk'
    assert outcome and outcome[0].startswith(f'cannot write {disk}: No space left on device')


@pytest.mark.slow
def test_a_run_whose_disk_fills_stops_in_one_line_and_resumes_once_space_is_freed(tmpfs, capfd):
    disk = tmpfs('6m')   # one checkpoint of this run (~3.3 MB) fits, a second one does not
    workdir = str(disk / 'run')
    flags = {'train.total_steps': 12, 'checkpoint.every_steps': 3, 'train.eval_every_steps': 100,
             'train.log_every_steps': 1, 'checkpoint.keep_best': 0, 'logging.tensorboard': False}
    with pytest.raises(fs.StorageError, match=r'^cannot write a checkpoint in .*: No space left on device'):
        train_and_evaluate(runlocal(**flags), workdir)
    out = capfd.readouterr()
    assert 'Event loop is closed' not in out.out + out.err and 'Traceback' not in out.out + out.err
    run = json.loads((disk / 'run' / 'run.json').read_text())
    assert run['status'] == 'failed' and 'No space left on device' in run['message']
    lines = read_metrics(workdir)      # every line parses
    assert lines
    checkpointer = Checkpointer(workdir, keep=3, keep_best=0, async_save=False, is_main_host=False)
    assert checkpointer.restore_newest_good().step == 3
    checkpointer.close()

    remount(disk, 'size=32m')
    final = train_and_evaluate(runlocal(**flags), workdir)
    assert 'resuming from step 3' in capfd.readouterr().out
    assert 'eval/exact_accuracy' in final
    assert [r['step'] for r in train_lines(read_metrics(workdir))][-9:] == list(range(4, 13))
    assert json.loads((disk / 'run' / 'run.json').read_text())['status'] == 'done'


# ---- a damaged newest checkpoint, through the training entry point -----------------------------
def _final_state(workdir):
    checkpointer = Checkpointer(workdir, keep=3, keep_best=0, async_save=False, is_main_host=False)
    try:
        found = checkpointer.restore_newest_good()
    finally:
        checkpointer.close()
    return found


@pytest.mark.slow
def test_a_run_whose_newest_checkpoint_is_damaged_resumes_from_the_previous_one_exactly(tmp_path, capfd):
    flags = {'train.total_steps': 12, 'checkpoint.every_steps': 3, 'train.eval_every_steps': 100,
             'train.log_every_steps': 1, 'checkpoint.keep_best': 0, 'logging.tensorboard': False}
    first = tmp_path / 'first'
    train_and_evaluate(runlocal(**flags), str(first))
    assert sorted(int(s) for s in os.listdir(first / 'checkpoints')) == [6, 9, 12]
    damaged, direct = tmp_path / 'damaged', tmp_path / 'direct'
    shutil.copytree(first, damaged)
    shutil.copytree(first, direct)
    # `direct` resumes from step 9 because 12 is not there; `damaged` because 12 is unreadable.
    shutil.rmtree(direct / 'checkpoints' / '12')
    step_dir = damaged / 'checkpoints' / '12' / 'state'
    data = max((os.path.join(r, f) for r, _, names in os.walk(step_dir) for f in names if os.sep + 'd' in r),
               key=os.path.getsize)
    os.truncate(data, os.path.getsize(data) // 2)
    capfd.readouterr()

    train_and_evaluate(runlocal(**flags), str(damaged))
    out = capfd.readouterr().out
    report = [line for line in out.splitlines() if 'is unreadable' in line]
    assert len(report) == 1 and report[0].startswith(f'checkpoint {damaged}/checkpoints/12 is unreadable: ')
    assert 'resuming from step 9' in out and 'Traceback' not in out
    [moved] = os.listdir(damaged / DAMAGED)
    assert moved.startswith('12-') and os.path.exists(os.path.join(damaged, DAMAGED, moved, 'state'))

    train_and_evaluate(runlocal(**flags), str(direct))
    assert 'resuming from step 9' in capfd.readouterr().out
    a, b = _final_state(str(damaged)), _final_state(str(direct))
    assert a.step == b.step == 12 and a.meta == b.meta

    def flat(tree, prefix=''):
        out = {}
        for key, value in tree.items():
            out.update(flat(value, f'{prefix}{key}/') if isinstance(value, dict) else {prefix + key: value})
        return out

    fa, fb = flat(a.tree), flat(b.tree)
    assert fa.keys() == fb.keys()
    for key in fa:
        np.testing.assert_array_equal(fa[key], fb[key], err_msg=key)
    losses = {r['step']: r['train/loss'] for r in train_lines(read_metrics(str(damaged)))}
    direct_losses = {r['step']: r['train/loss'] for r in train_lines(read_metrics(str(direct)))}
    assert all(losses[s] == direct_losses[s] for s in range(10, 13))


# ---- one run per workdir, and a config that may not change: the training loop's part ----------
def test_a_second_run_in_a_leased_workdir_is_refused_and_a_finished_run_frees_it(tmp_path):
    workdir = tmp_path / 'run'
    workdir.mkdir()
    holder = lease.acquire(str(workdir))
    with pytest.raises(lease.LeaseHeld, match=f'^workdir {workdir} is in use by another run .*pid {os.getpid()}'):
        train_and_evaluate(runlocal(), str(workdir))
    assert sorted(os.listdir(workdir)) == ['.lease.lock', 'lease.json']
    holder.release()
    train_and_evaluate(runlocal(), str(workdir))
    lease.acquire(str(workdir)).release()   # the run gave its lease back when it ended


@pytest.mark.slow
def test_a_refused_config_change_stops_the_resumed_run_in_one_line(tmp_path):
    workdir = str(tmp_path / 'run')
    train_and_evaluate(runlocal(), workdir)
    before = (tmp_path / 'run' / 'config.json').read_text()
    with pytest.raises(UserError, match=r'^--config\.optim\.lr changed from 0\.0001 to 0\.001 since'):
        train_and_evaluate(runlocal(**{'optim.lr': 1e-3, 'train.total_steps': 8}), workdir)
    assert (tmp_path / 'run' / 'config.json').read_text() == before
    # An allowed change (a longer run at a constant learning rate, another log cadence) resumes.
    train_and_evaluate(runlocal(**{'train.total_steps': 8, 'train.log_every_steps': 1}), workdir)
    assert json.loads((tmp_path / 'run' / 'config.json').read_text())['train']['total_steps'] == 8


# ---- a preemption during an evaluation --------------------------------------------------------
@pytest.mark.slow
def test_sigterm_during_an_evaluation_checkpoints_at_once_and_the_resume_evaluates_first(tmp_path, monkeypatch):
    from trm_spmd.data.loader import EvalBatches
    common = {'train.total_steps': 6, 'train.eval_every_steps': 4, 'train.log_every_steps': 1,
              'eval.global_batch_size': 8, 'checkpoint.every_steps': 100}
    train_and_evaluate(runlocal(**common), str(tmp_path / 'whole'))

    batches = EvalBatches.__iter__

    def preempted_after_one_batch(self):
        for i, batch in enumerate(batches(self)):
            if i == 1:
                os.kill(os.getpid(), signal.SIGTERM)   # the TPU VM's preemption notice
            yield batch

    workdir = tmp_path / 'preempted'
    with monkeypatch.context() as patch:
        patch.setattr(EvalBatches, '__iter__', preempted_after_one_batch)
        train_and_evaluate(runlocal(**common), str(workdir))
    run = json.loads((workdir / 'run.json').read_text())
    assert run['status'] == 'preempted' and run['message'] == 'SIGTERM'
    assert [r['step'] for r in read_metrics(workdir) if 'eval/exact_accuracy' in r] == []
    assert sorted(int(d) for d in os.listdir(workdir / 'checkpoints') if d.isdigit()) == [4]

    train_and_evaluate(runlocal(**common), str(workdir))
    whole = {r['step']: r for r in read_metrics(tmp_path / 'whole') if 'eval/exact_accuracy' in r}
    resumed = {r['step']: r for r in read_metrics(workdir) if 'eval/exact_accuracy' in r}
    assert sorted(resumed) == sorted(whole) == [4, 6]
    for step in (4, 6):
        for key, value in whole[step].items():
            if key.startswith('eval'):
                assert resumed[step][key] == value, (step, key)
