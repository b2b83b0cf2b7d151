"""Run lifecycle: exact resume after SIGKILL, SIGTERM checkpoints, checkpoint retention,
host agreement, NaN guard, bad inputs."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch.multiprocessing as mp

from trm_spmd.checkpoint import Checkpointer
from trm_spmd.config import load_config
from trm_spmd.data.dataset import DatasetError
from trm_spmd.errors import UserError
from trm_spmd.train.loop import train_and_evaluate

from conftest import REPO
from test_train import read_metrics, runlocal, train_lines

# 12 steps, a checkpoint every 3, an evaluation every 6, a log line every step.
RUN_FLAGS = ['--config=configs/baseline.py:runlocal', '--config.train.total_steps=12',
             '--config.checkpoint.every_steps=3', '--config.train.eval_every_steps=6',
             '--config.train.log_every_steps=1']


def start(workdir, data_dir, extra=()):
    env = dict(os.environ, PJRT_DEVICE='CPU', CPU_NUM_DEVICES='8', TRM_SPMD_DATA=str(data_dir))
    return subprocess.Popen([sys.executable, '-m', 'trm_spmd.main', f'--workdir={workdir}', *RUN_FLAGS, *extra],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process, timeout=300):
    out, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, out[-3000:]
    return out


def by_step(lines):
    """The last record of each step (a resumed run logs the steps after its checkpoint again)."""
    train, evals = {}, {}
    for record in lines:
        (train if 'train/loss' in record else evals)[record['step']] = record
    return train, evals


def final_state(workdir):
    checkpointer = Checkpointer(str(workdir), keep=3, keep_best=0, async_save=False, is_main_host=True)
    try:
        step = checkpointer.latest_step()
        state, meta = checkpointer.restore(step)
    finally:
        checkpointer.close()
    return step, state, meta


def copy_before_last_checkpoint(workdir, copy, step):
    """A copy of a finished run directory that resumes from its checkpoint before `step`:
    checkpoint `step` and the best-kept ones (else the best copy of `step` is resumed) are
    left out, and the lease, which belongs to the original directory."""
    shutil.copytree(workdir, copy)
    shutil.rmtree(os.path.join(copy, 'checkpoints', str(step)))
    shutil.rmtree(os.path.join(copy, 'checkpoints_best'), ignore_errors=True)
    for name in ('lease.json', '.lease.lock'):
        if os.path.exists(os.path.join(copy, name)):
            os.remove(os.path.join(copy, name))
    return copy


def assert_resume_is_exact(workdir, copy, step, train):
    """Resumes a copy of the finished run `workdir` from its checkpoint before `step` with
    train(copy_dir); its final state and data position must equal the straight run's.
    Returns (meta, flattened state) of the straight run."""
    resumed = copy_before_last_checkpoint(workdir, copy, step)
    train(str(resumed))
    step_a, state_a, meta_a = final_state(workdir)
    step_b, state_b, meta_b = final_state(resumed)
    assert step_a == step_b == step and meta_a['loader'] == meta_b['loader']
    flat_a, flat_b = flatten(state_a), flatten(state_b)
    assert flat_a.keys() == flat_b.keys()
    for key in flat_a:
        np.testing.assert_array_equal(flat_a[key], flat_b[key], err_msg=key)
    return meta_a, flat_a


def flatten(tree, prefix=''):
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f'{prefix}{key}/'))
        else:
            out[prefix + key] = np.asarray(value)
    return out


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f'timed out waiting for {what}')


@pytest.mark.slow
def test_sigkill_then_restart_ends_exactly_like_an_uninterrupted_run(tmp_path):
    data = os.environ['TRM_SPMD_DATA']     # the session's generated dataset, as this process uses it
    # The uninterrupted run in this process (its 8 devices), the killed one in its own.
    train_and_evaluate(runlocal(**{'train.total_steps': 12, 'checkpoint.every_steps': 3, 'train.eval_every_steps': 6,
                                   'train.log_every_steps': 1}), str(tmp_path / 'whole'))

    killed = start(tmp_path / 'killed', data)
    first = tmp_path / 'killed' / 'checkpoints' / '3'
    wait_for(first.exists, 240, 'the first checkpoint')
    time.sleep(random.uniform(0.0, 1.5))
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    resumed_out = finish(start(tmp_path / 'killed', data))
    assert 'resuming from step' in resumed_out

    whole_train, whole_eval = by_step(read_metrics(tmp_path / 'whole'))
    killed_train, killed_eval = by_step(read_metrics(tmp_path / 'killed'))
    resume_step = int(resumed_out.split('resuming from step ')[1].split()[0])
    assert 3 <= resume_step < 12
    for step in range(resume_step + 1, 13):
        assert killed_train[step]['train/loss'] == whole_train[step]['train/loss'], step
        assert killed_train[step]['train/exact_accuracy'] == whole_train[step]['train/exact_accuracy'], step
    for step in (6, 12):
        for key, value in whole_eval[step].items():
            if key.startswith('eval'):
                assert killed_eval[step][key] == value, (step, key)

    step_a, state_a, _ = final_state(tmp_path / 'whole')
    step_b, state_b, _ = final_state(tmp_path / 'killed')
    assert step_a == step_b == 12
    flat_a, flat_b = flatten(state_a), flatten(state_b)
    assert flat_a.keys() == flat_b.keys()
    assert any(k.startswith('model/') for k in flat_a) and any(k.startswith('ema/') for k in flat_a)
    for key in flat_a:
        np.testing.assert_array_equal(flat_a[key], flat_b[key], err_msg=key)


@pytest.mark.slow
def test_sigterm_checkpoints_the_current_step_and_the_restart_continues(tmp_path):
    data = tmp_path / 'data'
    workdir = tmp_path / 'run'
    process = start(workdir, data, ['--config.checkpoint.every_steps=100', '--config.train.total_steps=40',
                                    '--config.train.eval_every_steps=100'])
    metrics = workdir / 'metrics.jsonl'
    wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 2, 240, 'two log lines')
    process.send_signal(signal.SIGTERM)
    sent = time.time()
    out = finish(process, timeout=60)
    assert time.time() - sent < 30
    run = json.loads((workdir / 'run.json').read_text())
    assert run['status'] == 'preempted' and run['message'] == 'SIGTERM'
    last_logged = max(r['step'] for r in train_lines(read_metrics(workdir)))
    step, _, meta = final_state(workdir)
    assert step == last_logged == meta['step'] and 2 <= step < 40, out[-2000:]
    assert meta['loader']['step'] == step

    out = finish(start(workdir, data, ['--config.checkpoint.every_steps=100', '--config.train.total_steps=40',
                                       '--config.train.eval_every_steps=100']))
    assert f'resuming from step {step}' in out
    steps_after = [r['step'] for r in train_lines(read_metrics(workdir))][last_logged:]
    assert steps_after[0] == step + 1 and steps_after[-1] == 40
    assert json.loads((workdir / 'run.json').read_text())['status'] == 'done'


def _state(value):
    return {'w': np.full((4,), value, np.float32), 'step': np.asarray(value)}


def test_newest_checkpoint_survives_when_older_ones_scored_better(tmp_path):
    checkpointer = Checkpointer(str(tmp_path), keep=2, keep_best=1, async_save=True, is_main_host=True)
    for step, accuracy in [(1, 0.9), (2, 0.5), (3, 0.4), (4, 0.3)]:
        checkpointer.save(step, _state(step), {'step': step}, {'eval/exact_accuracy': accuracy})
    checkpointer.wait()
    assert checkpointer.latest_step() == 4
    assert sorted(checkpointer.latest.all_steps()) == [3, 4]
    assert checkpointer.best.all_steps() == [1]
    state, meta = checkpointer.restore()
    assert meta['step'] == 4 and np.asarray(state['w'])[0] == 4
    checkpointer.close()


def test_a_checkpoint_whose_write_was_interrupted_is_never_resumed(tmp_path):
    checkpointer = Checkpointer(str(tmp_path), keep=3, keep_best=0, async_save=False, is_main_host=True)
    checkpointer.save(5, _state(5), {'step': 5})
    checkpointer.wait()
    # What a write killed half-way leaves: orbax's temporary directory, never renamed.
    partial = tmp_path / 'checkpoints' / '9.orbax-checkpoint-tmp-1763800000'
    (partial / 'state').mkdir(parents=True)
    (partial / 'state' / 'junk').write_bytes(b'\0' * 64)
    assert checkpointer.latest_step() == 5
    _, meta = checkpointer.restore()
    assert meta['step'] == 5
    checkpointer.close()


class _Host:
    def __init__(self, count):
        self.process_count = count


def _agreement_worker(rank, world, port, variant_of_rank, results):
    import torch.distributed as dist
    from trm_spmd import hosts
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world)
    config = load_config(os.path.join(REPO, f'configs/tn_sweep.py:{variant_of_rank[rank]}'))
    try:
        hosts.check_agreement(_Host(world), config, group=dist.group.WORLD)
        results.put((rank, 'ok'))
    except UserError as e:
        results.put((rank, str(e)))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_hosts_with_different_configs_refuse_to_start_and_name_the_odd_host():
    ctx = mp.get_context('spawn')
    results = ctx.Queue()
    port = random.randint(20000, 40000)
    variants = ['t3_n6', 't3_n6', 't2_n2']
    procs = [ctx.Process(target=_agreement_worker, args=(r, 3, port, variants, results)) for r in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    messages = dict(results.get(timeout=10) for _ in range(3))
    for rank in range(3):
        assert messages[rank].startswith('hosts disagree on the resolved config: host 2 ('), messages[rank]


def test_agreeing_hosts_start():
    from trm_spmd import hosts
    same = {'config': 'a', 'code': 'b'}
    assert hosts.compare([same, same, same]) is None
    assert 'trm_spmd source: host 1' in hosts.compare([same, {'config': 'a', 'code': 'c'}])


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    workdir = tmp_path / 'run'
    # lr 1e30 blows the weights up at the first updates; the checkpoint of step 1 is good.
    config = runlocal(**{'optim.lr': 1e30, 'optim.warmup_steps': 0, 'train.total_steps': 8,
                         'train.log_every_steps': 1, 'checkpoint.every_steps': 1, 'train.eval_every_steps': 100})
    with pytest.raises(UserError, match='non-finite loss before step'):
        train_and_evaluate(config, str(workdir))
    run = json.loads((workdir / 'run.json').read_text())
    assert run['status'] == 'nan'
    step, state, _ = final_state(workdir)
    for key, value in flatten(state).items():
        if value.dtype.kind == 'f':
            assert np.isfinite(value).all(), (step, key)


@pytest.mark.slow
def test_nan_policy_skip_leaves_the_weights_finite(tmp_path):
    workdir = tmp_path / 'run'
    config = runlocal(**{'optim.lr': 1e30, 'optim.warmup_steps': 0, 'train.total_steps': 6,
                         'train.log_every_steps': 1, 'train.nan_policy': 'skip', 'train.eval_every_steps': 100})
    train_and_evaluate(config, str(workdir))
    lines = train_lines(read_metrics(workdir))
    assert sum(r['train/nonfinite_steps'] for r in lines) >= 1
    _, state, _ = final_state(workdir)
    for key, value in flatten(state).items():
        if key.startswith('model/'):
            assert np.isfinite(value).all(), key


def test_missing_dataset_names_the_build_command_and_writes_nothing(tmp_path):
    workdir = tmp_path / 'run'
    config = runlocal(**{'data.generate': False, 'data.path': str(tmp_path / 'nowhere')})
    with pytest.raises(DatasetError, match=r'dataset not found at .*nowhere: build it with python -m '
                                           r'trm_spmd.build sudoku'):
        train_and_evaluate(config, str(workdir))
    assert not workdir.exists()


@pytest.mark.slow
def test_eval_mode_and_init_from_reproduce_a_runs_final_evaluation(tmp_path):
    source = tmp_path / 'source'
    final = train_and_evaluate(runlocal(**{'train.total_steps': 3}), str(source))
    again = train_and_evaluate(runlocal(**{'mode': 'eval', 'init_from': str(source)}), str(tmp_path / 'eval'))
    assert again['eval/exact_accuracy'] == final['eval/exact_accuracy']
    assert again['eval/accuracy'] == final['eval/accuracy']
