"""End-to-end training on 8 virtual CPU devices: compile once, metrics, equivalences."""

import json
import os

import numpy as np
import pytest
import torch

from trm_spmd.config import load_config
from trm_spmd.train.loop import train_and_evaluate

from conftest import (REPO, UPDATE_IS_GRADIENT, one_train_step, optimization_barriers, random_host_batch,
                      run_in_subprocess)


def runlocal(**overrides):
    config = load_config(os.path.join(REPO, 'configs/baseline.py:runlocal'))
    config.update_from_flattened_dict(overrides)
    return config


def read_metrics(workdir):
    with open(os.path.join(workdir, 'metrics.jsonl')) as f:
        return [json.loads(line) for line in f]


def train_lines(lines):
    return [r for r in lines if 'train/loss' in r]


@pytest.mark.slow
def test_runlocal_trains_evaluates_and_compiles_nothing_after_warmup(tmp_path):
    workdir = str(tmp_path / 'run')
    config = runlocal(**{'train.total_steps': 26, 'train.eval_every_steps': 5, 'train.log_every_steps': 1,
                         'checkpoint.every_steps': 10})
    final = train_and_evaluate(config, workdir)
    lines = read_metrics(workdir)
    train = train_lines(lines)
    evals = [r for r in lines if 'eval/exact_accuracy' in r]
    assert [r['step'] for r in train] == list(range(1, 27))
    assert [r['step'] for r in evals] == [5, 10, 15, 20, 25, 26]
    for key in ('train/loss', 'train/exact_accuracy', 'train/lr', 'perf/step_ms', 'perf/examples_per_s',
                'xla/uncached_compiles', 'xla/cpu_fallback_ops', 'progress/pflop', 'time'):
        assert key in train[-1], key
    assert 'eval_by_difficulty/blanks_30-34' in evals[-1] or any(k.startswith('eval_by_difficulty/') for k in evals[-1])
    # Warm-up is the first train step and the first evaluation (step 5), read at step 6.
    # After it: 20 train steps, 5 evaluations, checkpoints and logging compile nothing.
    at_warm = next(r for r in train if r['step'] == 6)['xla/uncached_compiles']
    assert all(r['xla/uncached_compiles'] == at_warm for r in train if r['step'] >= 6)
    import torch_xla.debug.metrics as met
    assert met.counter_value('UncachedCompile') == at_warm
    assert all(r['xla/cpu_fallback_ops'] == 0 for r in train)
    # No value is read back to the host inside a step (aten::_local_scalar_dense).
    assert all(r['xla/host_syncs'] == train[0]['xla/host_syncs'] for r in train)
    assert final['eval/count'] == 16
    run = json.load(open(os.path.join(workdir, 'run.json')))
    assert run['status'] == 'done' and run['total_steps'] == 26
    events = os.listdir(os.path.join(workdir, 'tensorboard'))
    assert any(name.startswith('events.out.tfevents') for name in events)


def test_tensorboard_file_holds_the_scalars(tmp_path):
    workdir = str(tmp_path / 'run')
    train_and_evaluate(runlocal(**{'train.total_steps': 2, 'train.log_every_steps': 1}), workdir)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(os.path.join(workdir, 'tensorboard'))
    acc.Reload()
    tags = acc.Tags()['scalars']
    assert {'train/loss', 'train/lr', 'eval/exact_accuracy', 'perf/step_ms'} <= set(tags)
    assert [e.step for e in acc.Scalars('train/loss')] == [1, 2]


# Three logged steps of the runlocal baseline (no EMA: it changes no train/ line), which the
# gradient accumulation and gradient checkpointing runs below must reproduce.
THREE_STEPS = {'train.total_steps': 3, 'train.log_every_steps': 1, 'ema.enabled': False}


@pytest.fixture(scope='module')
def three_steps(tmp_path_factory):
    return train_lines(read_metrics(_run(tmp_path_factory.mktemp('three_steps') / 'run', runlocal(**THREE_STEPS))))


@pytest.mark.slow
def test_gradient_accumulation_matches_the_whole_batch(tmp_path, three_steps):
    config = runlocal(**THREE_STEPS, **{'optim.grad_accum_steps': 2})
    split = train_lines(read_metrics(_run(tmp_path / 'split', config)))
    assert len(split) == len(three_steps) == 3
    for a, b in zip(three_steps, split):
        assert a['train/loss'] == pytest.approx(b['train/loss'], abs=1e-5)
        assert a['train/accuracy'] == pytest.approx(b['train/accuracy'], abs=1e-6)


def _one_update(accum, host_batch):
    """One train step with `accum` micro-batches (conftest.one_train_step)."""
    config = runlocal(**{'optim.grad_accum_steps': accum, 'data.global_batch_size': len(host_batch['inputs']),
                         **UPDATE_IS_GRADIENT})
    return one_train_step(config, host_batch)


@pytest.mark.slow
def test_accumulated_micro_batches_update_as_the_whole_batch_one_at_a_time():
    batch = random_host_batch(runlocal(), 32)
    before, whole, proto = _one_update(1, batch)
    assert optimization_barriers(proto) == 0
    for accum in (4,):
        start, split, proto = _one_update(accum, batch)
        # Micro-batch i + 1 waits behind a barrier for micro-batch i's gradients: XLA then
        # frees one micro-batch's activations before the next starts (benchmarks/README.md).
        assert optimization_barriers(proto) == accum - 1
        for name, p in whole.items():
            torch.testing.assert_close(start[name], before[name], rtol=0, atol=0)
            delta, delta_split = p - before[name], split[name] - before[name]
            assert delta.abs().max() > 0, name
            torch.testing.assert_close(delta_split, delta, rtol=1e-3, atol=1e-3 * float(delta.abs().max()))


@pytest.mark.slow
def test_gradient_checkpointing_changes_memory_not_numbers(tmp_path, three_steps):
    config = runlocal(**THREE_STEPS, **{'model.grad_checkpointing': True})
    remat = train_lines(read_metrics(_run(tmp_path / 'remat', config)))
    assert len(remat) == 3
    for a, b in zip(three_steps, remat):
        assert a['train/loss'] == pytest.approx(b['train/loss'], abs=1e-5)


@pytest.mark.slow
def test_evaluation_at_other_depths_matches_separate_evaluations(tmp_path):
    source = str(tmp_path / 'source')
    train_and_evaluate(runlocal(**{'train.total_steps': 3}), source)   # runlocal trains with 2 ACT steps
    evaluate = lambda name, **changes: train_and_evaluate(   # noqa: E731
        runlocal(**{'mode': 'eval', 'init_from': source, **changes}), str(tmp_path / name))
    curve = evaluate('curve', **{'eval.report_act_steps': (1, 4)})
    for depth in (1, 4):
        alone = evaluate(f'depth{depth}', **{'eval.act_steps': depth})
        assert alone['eval/steps'] == depth
        for key in ('exact_accuracy', 'accuracy'):
            assert curve[f'eval_at_act_steps/{depth}/{key}'] == pytest.approx(alone[f'eval/{key}'], abs=1e-6)
    assert curve['eval/steps'] == 2


def test_a_run_stops_at_its_target_accuracy_with_a_checkpoint(tmp_path, monkeypatch):
    from trm_spmd.train import evaluate
    monkeypatch.setattr(evaluate.Evaluator, 'run', lambda self, step, depths=(), interrupt=None: {
        'eval/exact_accuracy': 0.5 if step < 4 else 0.95, 'eval/accuracy': 0.99})
    workdir = tmp_path / 'run'
    final = train_and_evaluate(runlocal(**{'train.total_steps': 10, 'train.eval_every_steps': 2,
                                           'train.stop_at_exact_accuracy': 0.9}), str(workdir))
    assert final['eval/exact_accuracy'] == 0.95
    assert max(r['step'] for r in read_metrics(workdir)) == 4
    assert sorted(int(d) for d in os.listdir(workdir / 'checkpoints') if d.isdigit())[-1] == 4
    assert json.load(open(workdir / 'run.json'))['status'] == 'done'


def _run(workdir, config):
    train_and_evaluate(config, str(workdir))
    return str(workdir)


@pytest.mark.slow
def test_loss_trajectory_is_the_same_on_1_and_8_devices(tmp_path):
    """The first step's loss agrees to 1e-5; the 5-step trajectory to 1e-3 relative.

    Summing over 8 devices changes only the order of float additions (~1e-7 relative), but an
    Adam-style update turns the sign of a near-zero gradient element into a full +-lr step,
    so after the first update the runs drift apart by ~1e-4, as any reduction order would.
    """
    # 8 devices in this process, then 1 in its own, on the same generated dataset (TRM_SPMD_DATA).
    _run(tmp_path / 'd8', runlocal(**{'train.total_steps': 5, 'train.log_every_steps': 1}))
    result = run_in_subprocess(['-m', 'trm_spmd.main', '--config=configs/baseline.py:runlocal',
                                f'--workdir={tmp_path / "d1"}', '--config.train.total_steps=5',
                                '--config.train.log_every_steps=1'], 1)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = {devices: [r['train/loss'] for r in train_lines(read_metrics(tmp_path / f'd{devices}'))]
              for devices in (1, 8)}
    assert len(losses[1]) == 5
    assert losses[1][0] == pytest.approx(losses[8][0], abs=1e-5)
    np.testing.assert_allclose(losses[1], losses[8], rtol=1e-3, atol=0)
