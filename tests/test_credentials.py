"""Credentials in the environment never reach a run's artifacts."""

import os
import subprocess
import sys

from conftest import REPO

SECRETS = {
    'WANDB_API_KEY': 'wandb-secret-0f3a9c51d2e84b7a',
    'HF_TOKEN': 'hf_secretTokenQ8v2LmZr4T',
    'HUGGING_FACE_HUB_TOKEN': 'hf_otherSecretK3p9Xw',
    'AWS_SECRET_ACCESS_KEY': 'aws-secret-7Hq2nB5vR9kL',
    'GOOGLE_APPLICATION_CREDENTIALS': '/secret/path/service-account-4d1e.json',
    'GCS_OAUTH_TOKEN': 'ya29.secret-oauth-token-55e1',
}


def test_no_secret_of_the_environment_is_written_to_the_workdir(tmp_path):
    workdir = tmp_path / 'run'
    env = dict(os.environ, **SECRETS, TRM_SPMD_DATA=str(tmp_path / 'data'), PJRT_DEVICE='CPU', CPU_NUM_DEVICES='8')
    result = subprocess.run([sys.executable, '-m', 'trm_spmd.main', '--config=configs/maze.py:runlocal',
                             f'--workdir={workdir}'], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    files = [os.path.join(d, f) for d, _, names in os.walk(workdir) for f in names]
    assert any(f.endswith('run.json') for f in files) and any('tensorboard' in f for f in files)
    assert any('checkpoints' in f for f in files)
    for path in files:
        with open(path, 'rb') as f:
            data = f.read()
        for name, secret in SECRETS.items():
            assert secret.encode() not in data, f'{name} found in {path}'
    for name, secret in SECRETS.items():
        assert secret not in result.stdout + result.stderr, f'{name} printed'
