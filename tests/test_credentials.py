"""Credentials in the environment never reach a run's artifacts."""

import os
import subprocess
import sys

import pytest

from conftest import REPO, SECRETS


def _files(workdir):
    return [os.path.join(d, f) for d, _, names in os.walk(workdir) for f in names]


def _assert_no_secret(files, output):
    for path in files:
        with open(path, 'rb') as f:
            data = f.read()
        for name, secret in SECRETS.items():
            assert secret.encode() not in data, f'{name} found in {path}'
    for name, secret in SECRETS.items():
        assert secret not in output, f'{name} printed'


@pytest.mark.slow
def test_no_secret_of_the_environment_is_written_to_the_workdir(tmp_path):
    workdir = tmp_path / 'run'
    env = dict(os.environ, **SECRETS, TRM_SPMD_DATA=str(tmp_path / 'data'), PJRT_DEVICE='CPU', CPU_NUM_DEVICES='8')
    result = subprocess.run([sys.executable, '-m', 'trm_spmd.main', '--config=configs/maze.py:runlocal',
                             f'--workdir={workdir}'], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    files = _files(workdir)
    assert any(f.endswith('run.json') for f in files) and any('tensorboard' in f for f in files)
    assert any('checkpoints' in f for f in files)
    _assert_no_secret(files, result.stdout + result.stderr)


@pytest.mark.slow
def test_no_secret_reaches_the_wandb_run(wandb_runs):
    # WANDB_API_KEY is the credential wandb itself reads: its run files (the .wandb log, its
    # debug logs, the captured console) are in the workdir and must not hold it either.
    workdir, _, outputs = wandb_runs
    files = _files(workdir)
    assert any(f.endswith('.wandb') for f in files) and any(f.endswith('debug-internal.log') for f in files)
    _assert_no_secret(files, ''.join(outputs))
