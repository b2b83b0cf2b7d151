"""The training progress line: its ETA counts training steps and evaluations apart, so it
converges instead of jumping with each evaluation pause."""

import types

import pytest

from trm_spmd.train import metrics


class Clock:
    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now


@pytest.fixture
def log(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(metrics.time, 'time', clock.time)
    monkeypatch.setattr(metrics, 'train_scalars', lambda window, batch: {key: 0.0 for key, _ in metrics._PROGRESS})
    runtime = types.SimpleNamespace(is_main_host=False, counters=dict)
    writer = types.SimpleNamespace(write=lambda step, scalars: None)
    train_log = metrics.TrainLog(writer, runtime, 64, total_steps=1000, epoch_examples=5000, flops_per_example=1.0,
                                 stages=[(0, 1, 2)], eval_every=200)
    train_log.clock = clock
    return train_log


def run(log, step_seconds=0.1, eval_seconds=20.0, compile_seconds=30.0):
    """Logs every 100 steps and evaluates every 200 of a 1,000-step run; returns
    [(step, ETA, the true time left)]."""
    clock = log.clock
    log.start(0)
    start = clock.now
    etas, eval_seconds_left = [], lambda step: (1000 // 200 - step // 200) * eval_seconds
    for step in range(100, 1001, 100):
        clock.now += 100 * step_seconds + (compile_seconds if step == 100 else 0.0)
        log.write(step, [{}])
        eta = log.remaining_seconds(step, None)
        if step % 200 == 0:   # the loop evaluates after the log line of that step
            clock.now += eval_seconds
            log.paused(eval_seconds, evaluation=True)
        etas.append((step, eta, (1000 - step) * step_seconds + eval_seconds_left(step)))
    assert clock.now - start == pytest.approx(1000 * step_seconds + 5 * eval_seconds + compile_seconds)
    return etas


def test_eta_converges_on_the_true_time_left(log):
    etas = run(log)
    # From the first evaluation on, the ETA is the time left, exactly.
    for step, eta, truth in etas[2:]:
        assert eta == pytest.approx(truth), (step, eta, truth)
    # ...and it only goes down: no jump at an evaluation once one has been timed.
    values = [eta for _, eta, _ in etas[2:]]
    assert values == sorted(values, reverse=True)


def test_the_step_rate_leaves_evaluation_pauses_out(log):
    log.start(0)
    log.clock.now += 10.0
    log.write(100, [{}])
    log.clock.now += 25.0        # a 15 s evaluation, then 100 steps in 10 s
    log.paused(15.0, evaluation=True)
    step_ms = []
    log.writer.write = lambda step, scalars: step_ms.append(scalars['perf/step_ms'])
    log.write(200, [{}])
    assert step_ms == [pytest.approx(100.0)]
