"""The XLA runtime: mesh from the device count, batch sharding along `data`, dry runs."""

import os

import numpy as np
import pytest

from trm_spmd.config import default_config, load_config
from trm_spmd.dry_run import dry_run
from trm_spmd.runtime import create_runtime

from conftest import REPO, run_in_subprocess


@pytest.fixture(scope='module')
def runtime():
    config = default_config()
    config.backend = 'xla'
    return create_runtime(config)


def test_mesh_covers_the_eight_test_devices(runtime):
    assert runtime.name == 'xla'
    assert runtime.device_count == 8 and runtime.mesh_shape == (8, 1)
    assert runtime.process_count == 1 and runtime.process_index == 0


def test_batch_is_sharded_along_data(runtime):
    host = {'inputs': np.arange(16 * 81, dtype=np.int32).reshape(16, 81),
            'puzzle_identifiers': np.arange(16, dtype=np.int32)}
    batch = runtime.put_batch(host)
    assert runtime.sharding_spec(batch['inputs']) == '{devices=[8,1]0,1,2,3,4,5,6,7}'
    assert runtime.sharding_spec(batch['puzzle_identifiers']) == '{devices=[8]0,1,2,3,4,5,6,7}'
    np.testing.assert_array_equal(batch['inputs'].cpu().numpy(), host['inputs'])
    np.testing.assert_array_equal(batch['puzzle_identifiers'].cpu().numpy(), host['puzzle_identifiers'])


def dry_run_output(devices):
    """What `python -m trm_spmd.main --config=configs/tn_sweep.py:t3_n6 --dry_run` prints on
    `devices` CPU devices: in this process for its 8, else in a process of its own."""
    if devices == 8:
        lines = []
        dry_run(load_config(os.path.join(REPO, 'configs/tn_sweep.py:t3_n6')), {}, print_fn=lines.append)
        return '\n'.join(lines)
    result = run_in_subprocess(['-m', 'trm_spmd.main', '--config=configs/tn_sweep.py:t3_n6', '--dry_run'],
                               devices, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.parametrize('devices', [pytest.param(1, marks=pytest.mark.slow), 8,
                                     pytest.param(64, marks=pytest.mark.slow)])
def test_dry_run_shows_the_mesh(devices):
    out = dry_run_output(devices)
    assert f"({devices}, 1) axes ('data', 'model')" in out
    assert f'{devices} total, {devices} per host, 1 host(s)' in out
    assert f'per-device batch                      {768 // devices}' in out
    assert 'trainable parameters                  5,028,866' in out
    assert 'config hash' in out


@pytest.mark.slow
def test_dry_run_rejects_an_impossible_mesh():
    result = run_in_subprocess(['-m', 'trm_spmd.main', '--config=configs/baseline.py', '--dry_run',
                                '--config.data.global_batch_size=100'], 8, timeout=300)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith('error: data.global_batch_size / optim.grad_accum_steps=100 is not divisible '
                           'by the data axis (8 devices)'), last
    assert REPO  # the subprocess ran from the repository root
