"""The benchmark suite: the projection's floor and verdict, the slice and peak tables, MFU,
config overrides, and the smoke suite end to end on 8 CPU devices (script health, not timing)."""

import glob
import json
import os
import sys

import pytest

from conftest import REPO, run_in_subprocess

if REPO not in sys.path:
    sys.path.insert(0, REPO)   # benchmarks/ is a folder of scripts beside the package, not installed

from benchmarks import peaks, projection  # noqa: E402
from trm_spmd.config import load_config  # noqa: E402
from trm_spmd.errors import UserError  # noqa: E402

BASELINE = os.path.join(REPO, 'configs', 'baseline.py')


def _project(slice_name, batch=6144, mfu=0.5):
    config = load_config(BASELINE)
    config.data.global_batch_size = batch
    return projection.project(projection.flops_per_example(config), batch, projection.parse_slice(slice_name),
                              mfu, projection.run_steps(config, batch))


def test_baseline_on_v4_64_floor_is_30_ms_and_17_ms_is_not_reachable():
    p = _project('v4-64')
    # 6144 x 42.72 GFLOP = 262.5 TFLOP over 32 chips x 275 TFLOP/s = 8.8 PFLOP/s.
    assert p['tflop_per_step'] == pytest.approx(262.5, abs=0.1)
    assert p['floor_ms'] == pytest.approx(29.8, rel=0.05)
    assert p['target_peak_fraction'] == pytest.approx(1.755, abs=0.01)
    assert p['step_ms'] == pytest.approx(2 * p['floor_ms'])
    assert p['total_steps'] == 8138                       # 50,000 epochs x 1,000 puzzles / 6144
    assert not p['target_reachable']
    verdict = projection.verdict(p)
    assert 'needs 175% of peak' in verdict and 'not reachable' in verdict
    assert p['slice_for_target_at_mfu'] == 'v4-256'       # 113 chips at 50% MFU


def test_verdict_distinguishes_reachable_from_needing_more_mfu():
    assert projection.verdict(_project('v6e-256')).endswith('reachable at 50% MFU')
    # v5p-128: 64 x 459 TFLOP/s, floor 8.9 ms: 17 ms needs 53% of peak, more than 50%.
    needs_more = _project('v5p-128')
    assert needs_more['target_peak_fraction'] == pytest.approx(0.525, abs=0.01)
    assert 'not reachable at 50% MFU' in projection.verdict(needs_more)
    assert projection.verdict(_project('v5p-128', mfu=0.6)).endswith('reachable at 60% MFU')


@pytest.mark.parametrize('name, chips, hosts, peak', [
    ('v4-8', 4, 1, 275), ('v4-64', 32, 8, 275), ('v4-256', 128, 32, 275),
    ('v5e-8', 8, 1, 197), ('v5e-64', 64, 16, 197), ('v5litepod-16', 16, 4, 197),
    ('v5p-128', 64, 16, 459), ('v6e-8', 8, 1, 918), ('v6e-256', 256, 64, 918),
])
def test_slice_table(name, chips, hosts, peak):
    s = projection.parse_slice(name)
    assert (s.chips, s.hosts, s.peak_tflops) == (chips, hosts, peak)


@pytest.mark.parametrize('name', ['v4-63', 'v4-4', 'v3-8', 'v5e-10', 'tpu'])
def test_impossible_slices_fail_with_one_line(name):
    with pytest.raises(UserError) as error:
        projection.parse_slice(name)
    assert '\n' not in str(error.value) and name in str(error.value)


def test_mfu_arithmetic():
    # 262.5 TFLOP in 59.7 ms on 32 chips of 275 TFLOP/s: half of peak.
    assert peaks.mfu(262.47e12, 0.05966, 32, 275.0) == pytest.approx(0.5, rel=1e-3)
    assert peaks.mfu(1e12, 2.0, 1, 100.0) == pytest.approx(0.005)
    assert peaks.mfu(1e12, 1.0, 8, None) is None          # CPU: n/a


@pytest.mark.parametrize('description, peak', [
    ('TPU v4', 275), ('v4-64', 275), ('TPU v5 lite', 197), ('v5litepod-16', 197), ('TPU v5', 459),
    ('v5p-128', 459), ('TPU v6 lite', 918), ('v6e-8', 918), ('NVIDIA H100 80GB HBM3', 989),
    ('NVIDIA H100 PCIe', 756), ('NVIDIA H200', 989), ('NVIDIA A100-SXM4-80GB', 312), ('NVIDIA L40S', 362),
    ('CPU', None),
])
def test_peak_table(description, peak):
    assert peaks.peak_tflops(description) == peak


@pytest.mark.slow
def test_benchmarks_take_the_trainers_config_overrides(tmp_path):
    args = ['benchmarks/projection.py', '--config=configs/baseline.py', '--config.model.hidden_size=256',
            '--config.model.mlp_t=false', "--config.mesh.shape=(8, 1)", '--config.optim.lr=3e-4', f'--out={tmp_path}']
    result = run_in_subprocess(args, 1, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    [path] = glob.glob(str(tmp_path / 'projection_v4-64_*.json'))
    with open(path) as f:
        record = json.load(f)
    assert record['config']['overrides'] == {'model.hidden_size': 256, 'model.mlp_t': False, 'mesh.shape': [8, 1],
                                             'optim.lr': 3e-4, 'data.global_batch_size': 6144}
    config = load_config(BASELINE)
    config.model.hidden_size, config.model.mlp_t = 256, False
    assert record['results']['gflop_per_example_step'] * 1e9 == pytest.approx(projection.flops_per_example(config))

    for bad, message in (('--config.model.hiden_size=3', 'did you mean "model.hidden_size"'),
                         ('--config.model.hidden_size=wide', 'hidden_size')):
        result = run_in_subprocess(['benchmarks/projection.py', bad, f'--out={tmp_path}'], 1, timeout=120)
        assert result.returncode != 0 and message in result.stderr and 'Traceback' not in result.stderr, \
            result.stderr[-2000:]


def _results_listing():
    return sorted(os.listdir(os.path.join(REPO, 'benchmarks', 'results')))


@pytest.mark.slow
def test_smoke_suite_runs_end_to_end(tmp_path):
    before = _results_listing()
    result = run_in_subprocess(['benchmarks/run_suite.py', '--smoke', f'--out={tmp_path}'], 8, timeout=600)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    assert _results_listing() == before                   # tests never write into benchmarks/results

    def one(pattern):
        found = glob.glob(str(tmp_path / pattern))
        assert len(found) == 1, (pattern, os.listdir(tmp_path))
        if found[0].endswith('.json'):
            assert os.path.exists(found[0][:-len('.json')] + '.md')
        return found[0]

    with open(one('step_time_cpu-xla-x8_*.json')) as f:
        step = json.load(f)
    r = step['results']
    assert step['device']['devices'] == 8 and step['device']['peak_tflops'] is None
    assert r['mfu'] is None and r['step_ms']['median'] > 0 and r['step_ms']['p90'] >= r['step_ms']['median']
    assert r['uncached_compiles_warmup'] >= 1 and r['uncached_compiles_timed'] == 0
    assert step['environment']['torch_xla'] and step['projection']['slice'] == 'v4-64'

    with open(one('projection_v4-64_*.json')) as f:
        p = json.load(f)['results']
    assert p['floor_ms'] == pytest.approx(29.8, rel=0.05) and not p['target_reachable']

    with open(one('eval_throughput_cpu-xla-x8_*.json')) as f:
        assert json.load(f)['results']['examples_per_s'] > 0
    with open(one('checkpoint_overhead_cpu-xla-x8_*.json')) as f:
        ckpt = json.load(f)['results']
    assert ckpt['state_mib'] > 0 and ckpt['blocking_ms'] > 0 and ckpt['background_write_ms'] > 0
    assert 'TrainBatches' in open(one('data_throughput_*.txt')).read()
    assert 'not reachable' in result.stdout and 'FAILED' not in result.stdout


def test_the_checkpoint_benchmark_refuses_a_runs_workdir(tmp_path):
    (tmp_path / 'checkpoints' / '4').mkdir(parents=True)
    result = run_in_subprocess(['benchmarks/checkpoint_overhead.py', '--config=configs/baseline.py:runlocal',
                                f'--workdir={tmp_path}'], 1, timeout=120)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f'error: --workdir={tmp_path} holds a run: the benchmark writes checkpoints '
                                          f'there and deletes older ones; pass a new directory']
    assert os.listdir(tmp_path) == ['checkpoints'] and os.listdir(tmp_path / 'checkpoints') == ['4']
