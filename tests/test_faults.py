"""Failures the library says it survives, each with its exact outcome: the exit code, the one
line, and what is on disk afterwards. README.md's "What survives a failure" table lists every
guarantee and the test that proves it; those proven elsewhere (test_reliability.py,
test_lifecycle.py, test_checkpoint_integrity.py, test_lease.py, test_config.py,
test_quickstart.py) are not run again here.

Full disks are real ones: small tmpfs mounts (conftest.tmpfs).
"""

import gc
import glob
import json
import logging
import os
import re
import shutil

import pytest

from trm_spmd import fs
from trm_spmd.checkpoint import DAMAGED, Checkpointer, CheckpointReader
from trm_spmd.data.dataset import DatasetError, load_split
from trm_spmd.errors import UserError
from trm_spmd.tasks.sudoku.build import build_generated
from trm_spmd.train.loop import train_and_evaluate

from conftest import remount, run_in_subprocess
from test_checkpoint_integrity import DAMAGE, _assert_same, _checkpointer, _truncate, _write
from test_reliability import _fill, _tree
from test_train import runlocal

# A checkpoint at step 2 and at step 4 (the final one, with its best-by-accuracy copy).
RUN = {'train.total_steps': 4, 'checkpoint.every_steps': 2, 'train.eval_every_steps': 100,
       'train.log_every_steps': 2, 'checkpoint.keep_best': 1, 'logging.tensorboard': False}
NOISE = ('Traceback', 'Future exception was never retrieved', 'Event loop is closed')


def train_cli(workdir):
    args = ['-m', 'trm_spmd.main', '--config=configs/baseline.py:runlocal', f'--workdir={workdir}']
    return run_in_subprocess(args + [f'--config.{k}={v}' for k, v in RUN.items()], devices=8)


def complete_steps(directory):
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def orbax_tmp_dirs(workdir):
    return glob.glob(os.path.join(workdir, 'checkpoints*', '*.orbax-checkpoint-tmp*'))


@pytest.fixture(scope='module')
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp('finished') / 'run'
    train_and_evaluate(runlocal(**RUN), str(workdir))
    return workdir


# ---- storage full at the final save ----------------------------------------------------------
@pytest.mark.slow
def test_a_disk_full_at_the_final_save_fails_in_one_line_and_the_rerun_completes_the_run(tmpfs):
    disk = tmpfs('5m')   # the step-2 checkpoint (~3.3 MB) fits, the final one does not
    workdir = disk / 'run'
    failed = train_cli(workdir)
    line = (f'cannot write a checkpoint in {workdir}: No space left on device; free space there (or use a '
            f'--workdir on a larger disk) and rerun the same command: it resumes from the newest complete checkpoint')
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert failed.stderr.splitlines() == [f'error: {line}']
    assert 'eval at step 4' in failed.stdout and 'run done' not in failed.stdout
    run = json.loads((workdir / 'run.json').read_text())
    assert run['status'] == 'failed' and run['message'] == line
    assert complete_steps(workdir / 'checkpoints') == [2] and complete_steps(workdir / 'checkpoints_best') == []
    assert orbax_tmp_dirs(workdir)   # what the failed write left

    remount(disk, 'size=64m')
    rerun = train_cli(workdir)
    assert rerun.returncode == 0 and rerun.stderr == '', rerun.stderr[-3000:]
    assert 'resuming from step 2' in rerun.stdout and 'run done' in rerun.stdout
    assert json.loads((workdir / 'run.json').read_text())['status'] == 'done'
    assert complete_steps(workdir / 'checkpoints') == [2, 4] and complete_steps(workdir / 'checkpoints_best') == [4]
    assert orbax_tmp_dirs(workdir) == []


@pytest.mark.slow
def test_a_best_checkpoint_that_a_full_disk_refused_is_written_by_the_rerun(tmp_path, tmpfs):
    workdir = tmp_path / 'run'
    best = tmpfs('1m', at=workdir / 'checkpoints_best')   # the newest-K copies fit, the best one (~3.3 MB) does not
    failed = train_cli(workdir)
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert failed.stderr.splitlines() == [
        f'error: cannot write a checkpoint in {workdir}: No space left on device; free space there (or use a '
        f'--workdir on a larger disk) and rerun the same command: it resumes from the newest complete checkpoint']
    assert complete_steps(workdir / 'checkpoints') == [2, 4] and complete_steps(best) == []

    remount(best, 'size=64m')
    rerun = train_cli(workdir)
    assert rerun.returncode == 0 and rerun.stderr == '', rerun.stderr[-3000:]
    assert 'resuming from step 4' in rerun.stdout and 'nothing to do' in rerun.stdout
    assert json.loads((workdir / 'run.json').read_text())['status'] == 'done'
    assert complete_steps(best) == [4] and orbax_tmp_dirs(workdir) == []
    copies = []
    for directory in ('checkpoints', 'checkpoints_best'):
        with CheckpointReader(str(workdir), directories=[str(workdir / directory)]) as reader:
            copies.append(reader.restore(4))
    _assert_same(copies[0][0], copies[1][0])
    assert copies[0][1] == copies[1][1]


def test_a_save_that_fails_while_the_checkpointer_closes_is_raised_in_one_line(tmpfs, capfd):
    disk = tmpfs('2m')
    workdir = str(disk / 'run')
    checkpointer = Checkpointer(workdir, keep=3, keep_best=1, async_save=True, is_main_host=True)
    checkpointer.save(1, _tree(1), {'step': 1})
    checkpointer.wait()
    _fill(disk, 40_000)
    checkpointer.save(2, _tree(2), {'step': 2}, {'eval/exact_accuracy': 0.5})   # newest and best copies
    with pytest.raises(fs.StorageError) as caught:
        checkpointer.close()
    assert str(caught.value).startswith(f'cannot write a checkpoint in {workdir}: No space left on device; ')
    out, err = capfd.readouterr()
    assert not any(noise in out + err for noise in NOISE)
    assert complete_steps(disk / 'run' / 'checkpoints') == [1] and orbax_tmp_dirs(workdir)
    # When an exception already ends the run, a failed save adds no second line at close.
    again = Checkpointer(workdir, keep=3, keep_best=1, async_save=True, is_main_host=True)
    again.save(3, _tree(3), {'step': 3})
    again.close(reported=True)


# ---- damaged checkpoints ---------------------------------------------------------------------
@pytest.mark.slow
def test_a_damaged_newest_checkpoint_is_set_aside_in_one_line_without_tracebacks(finished_run, tmp_path):
    workdir = tmp_path / 'run'
    shutil.copytree(finished_run, workdir)
    for directory in ('checkpoints', 'checkpoints_best'):   # both copies of step 4
        data = [os.path.join(r, f) for r, _, names in os.walk(workdir / directory / '4' / 'state')
                for f in names if os.path.basename(r) == 'd']
        for file in data:
            os.truncate(file, os.path.getsize(file) // 2)
    result = train_cli(workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == '' and not any(noise in result.stdout for noise in NOISE)
    lines = [line for line in result.stdout.splitlines() if 'is unreadable' in line]
    assert [line.split(' is unreadable')[0] for line in lines] == [
        f'checkpoint {workdir}/checkpoints/4', f'checkpoint {workdir}/checkpoints_best/4']
    assert 'resuming from step 2' in result.stdout and 'run done' in result.stdout
    moved = sorted(re.sub(r'-\d{8}T\d{6}Z$', '', name) for name in os.listdir(workdir / DAMAGED))
    assert moved == ['4', 'best-4']
    assert complete_steps(workdir / 'checkpoints') == [2, 4]


@pytest.mark.parametrize('kind', sorted(DAMAGE))
def test_setting_a_damaged_checkpoint_aside_says_one_line_and_nothing_else(tmp_path, kind, capfd, caplog):
    _write(tmp_path)
    DAMAGE[kind](str(tmp_path / 'checkpoints' / '3'))
    capfd.readouterr()
    checkpointer = _checkpointer(tmp_path)
    found = checkpointer.restore_newest_good()
    checkpointer.close()
    gc.collect()   # a future whose exception nobody read complains when it is collected
    out, err = capfd.readouterr()
    assert found.step == 2 and err == ''
    assert len(out.splitlines()) == 1 and out.startswith(f'checkpoint {tmp_path}/checkpoints/3 is unreadable: ')
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_damaged_best_checkpoint_is_set_aside_and_the_newest_good_one_restored(tmp_path):
    _write(tmp_path, keep_best=1)   # steps 1, 2, 3; the best copy holds step 3
    _truncate(str(tmp_path / 'checkpoints_best' / '3'))
    (tmp_path / 'checkpoints' / '3').rename(tmp_path / 'elsewhere')   # the best copy is the newest left
    lines = []
    checkpointer = _checkpointer(tmp_path, keep_best=1)
    found = checkpointer.restore_newest_good(report=lines.append)
    checkpointer.close()
    assert found.step == 2 and len(lines) == 1
    assert lines[0].startswith(f'checkpoint {tmp_path}/checkpoints_best/3 is unreadable: ')
    [moved] = os.listdir(tmp_path / DAMAGED)
    assert moved.startswith('best-3-') and os.listdir(tmp_path / 'checkpoints_best') == []


# ---- an eval run whose source cannot be used --------------------------------------------------
SOURCE_OF_ANOTHER_MODEL = (r"^init_from=(?P<source>.*): its checkpoint '[^']+' has shape \([\d, ]+\), this model "
                           r"\([\d, ]+\): it was trained with another model: use the config it was trained with "
                           r"\(its config.json\)$")


@pytest.mark.parametrize('source,overrides,line', [
    ('finished', {'model.hidden_size': 48}, SOURCE_OF_ANOTHER_MODEL),
    ('nowhere', {}, r'^init_from=(?P<source>.*): no such directory: pass a run directory, a checkpoint directory or '
                    r'official:PATH$'),
    ('empty', {}, r'^init_from=(?P<source>.*): no checkpoint there: pass a run directory with checkpoints, a '
                  r'checkpoint directory or official:PATH$'),
    (None, {}, r"^mode=eval evaluates config.init_from, or the workdir's newest checkpoint, and (?P<workdir>.*) "
               r"has none: pass --config.init_from=RUN_DIR \(or official:PATH\)$"),
])
def test_an_eval_run_whose_source_cannot_be_used_says_why_and_leaves_nothing(finished_run, tmp_path, source,
                                                                             overrides, line):
    paths = {'finished': str(finished_run), 'nowhere': str(tmp_path / 'nowhere'), None: ''}
    (tmp_path / 'empty').mkdir()
    paths['empty'] = str(tmp_path / 'empty')
    workdir = tmp_path / 'eval'
    config = runlocal(**RUN, mode='eval', init_from=paths[source], **overrides)
    with pytest.raises(UserError) as caught:
        train_and_evaluate(config, str(workdir))
    match = re.match(line, str(caught.value))
    assert match, str(caught.value)
    assert match.groupdict() in ({'source': paths[source]}, {'workdir': str(workdir)})
    assert not workdir.exists()


# ---- data files that cannot be read ----------------------------------------------------------
def _garbage(path):
    path.write_bytes(b'\x93NUMPY not really' + bytes(range(256)))


def _truncated(path):
    os.truncate(path, os.path.getsize(path) // 2)


@pytest.mark.parametrize('damage', [_garbage, _truncated])
def test_an_unreadable_data_file_is_one_line_naming_it_and_the_rebuild(tmp_path, damage):
    dataset = tmp_path / 'data'
    build_generated(dataset, num_train=8, num_test=4, blanks=(30, 34), seed=0, num_aug=0, progress=False)
    damage(dataset / 'train' / 'all__inputs.npy')
    with pytest.raises(DatasetError) as caught:
        load_split(dataset, 'train', build_hint='python -m trm_spmd.build sudoku --output_dir=DIR')
    message = str(caught.value)
    assert '\n' not in message
    assert message.startswith(f'{dataset}/train/all__inputs.npy: unreadable (')
    assert message.endswith('rebuild it with python -m trm_spmd.build sudoku --output_dir=DIR')


# ---- puzzles without an answer ----------------------------------------------------------------
@pytest.mark.slow
def test_puzzles_without_an_answer_are_refused_each_with_its_reason(finished_run, tmp_path):
    clash = '55' + '.' * 79
    unsolvable = '12345678.' + '........9' + '.' * 63   # row 1 needs a 9 where column 9 already has one
    puzzles = tmp_path / 'puzzles.txt'
    puzzles.write_text(f'{clash}\n{unsolvable}\n')
    result = run_in_subprocess(['-m', 'trm_spmd.solve', f'--checkpoint={finished_run}', f'--file={puzzles}'],
                               devices=1)
    assert result.returncode == 2 and result.stdout == ''
    assert result.stderr.splitlines() == [
        f'error: no puzzle can be solved: {puzzles}:1: the givens clash: digit 5 appears twice in row 1; '
        f'{puzzles}:2: the puzzle has no solution']


# ---- overrides ----------------------------------------------------------------------------------
def test_an_unknown_override_key_is_one_line_and_exit_2_before_anything_is_written(tmp_path):
    result = run_in_subprocess(['-m', 'trm_spmd.main', '--config=configs/baseline.py:runlocal',
                                f'--workdir={tmp_path / "run"}', '--config.model.hiden_size=8'], devices=8)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        'error: unknown config key "model.hiden_size" in --config.model.hiden_size: did you mean "model.hidden_size"?']
    assert not (tmp_path / 'run').exists()

