"""logging.wandb: the W&B run mirrors metrics.jsonl, carries the config and its hash, and a
resumed workdir continues the same W&B run; without the package, one line before training.

The runs use W&B's offline mode (no network) and the extra as users install it; what was
logged is read back from the run's .wandb file with wandb's own reader (`wandb leet inspect`).
"""

import glob
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import REPO


def _records(wandb_python, env, run_dir):
    result = subprocess.run([wandb_python, '-m', 'wandb', 'leet', 'inspect', '--json', run_dir], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _offline_runs(workdir, wandb_python, env):
    """Each offline run directory's records, oldest first (their names start with the time)."""
    dirs = sorted(glob.glob(os.path.join(workdir, 'wandb', 'offline-run-*')))
    return [_records(wandb_python, env, d) for d in dirs if os.path.isdir(d)]


def _of_type(records, kind):
    return [r[kind] for r in records if r['type'] == kind]


def _config(records):
    config = {}
    for part in _of_type(records, 'run') + _of_type(records, 'config'):
        config.update(part.get('config', part).get('update', {}))
    return {k: v for k, v in config.items() if not k.startswith('_')}


def _same(a, b):
    a, b = float(a), float(b)   # wandb writes NaN as the string "NaN"
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.slow
def test_the_wandb_run_mirrors_metrics_jsonl_with_the_config_and_its_hash(wandb_runs, wandb_python):
    workdir, env, _ = wandb_runs
    runs = _offline_runs(workdir, wandb_python, env)
    assert len(runs) == 2, 'one offline run directory per start of the workdir'
    rows = [h['item'] for records in runs for h in _of_type(records, 'history')]
    with open(workdir / 'metrics.jsonl') as f:
        lines = [json.loads(line) for line in f]
    assert len(rows) == len(lines) == 5   # steps 2, 4, eval 4; resumed: 6, eval 6
    for row, line in zip(rows, lines):
        numbers = {k: v for k, v in line.items() if k not in ('step', 'time') and isinstance(v, (int, float))}
        logged = {k: v for k, v in row.items() if not k.startswith('_') and k != 'step'}
        assert row['step'] == line['step']
        assert logged.keys() == numbers.keys()
        assert all(_same(logged[k], numbers[k]) for k in numbers), (line['step'], logged, numbers)
    assert any(k.startswith('train/') for k in rows[0]) and any(k.startswith('eval/') for k in rows[-1])

    # The W&B config is the resolved config of the start that logged, with its hash.
    config = _config(runs[-1])
    with open(workdir / 'run.json') as f:
        assert config.pop('config_hash') == json.load(f)['config_hash']
    with open(workdir / 'config.json') as f:
        assert config == json.load(f)
    assert config['train']['total_steps'] == 6 and _config(runs[0])['train']['total_steps'] == 4
    [run] = _of_type(runs[0], 'run')
    assert run['project'] == 'trm_spmd' and run['display_name'] == 'tiny_run' and run['tags'] == ['tiny', 'test']


@pytest.mark.slow
def test_a_resumed_workdir_continues_the_same_wandb_run(wandb_runs, wandb_python):
    workdir, env, _ = wandb_runs
    first, resumed = _offline_runs(workdir, wandb_python, env)
    with open(workdir / 'wandb_run.json') as f:
        run_id = json.load(f)['id']
    assert [r['run_id'] for r in _of_type(first, 'run') + _of_type(resumed, 'run')] == [run_id, run_id]
    assert all(r['resume'] for r in _of_type(resumed, 'run'))
    # The resumed start logs only the steps it trained: the chart's x-axis is the training step.
    assert [h['item']['step'] for h in _of_type(resumed, 'history')] == [6, 6]
    assert [e['exit_code'] for e in _of_type(first, 'exit') + _of_type(resumed, 'exit')] == [0, 0]


@pytest.mark.slow
def test_without_the_wandb_package_one_line_and_exit_2_before_training(tmp_path):
    # The default environment, without the extra's directory even when pytest runs through the
    # extra's python: it never holds wandb (requirements.lock leaves it out).
    path = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep)
            if not os.path.isfile(os.path.join(p, 'wandb', '__init__.py'))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), PJRT_DEVICE='CPU', CPU_NUM_DEVICES='8')
    absent = subprocess.run([sys.executable, '-c', 'import importlib.util, sys; '
                             'sys.exit(importlib.util.find_spec("wandb") is not None)'], env=env, timeout=60)
    assert absent.returncode == 0, 'wandb is installed in the default environment'
    workdir = tmp_path / 'run'
    result = subprocess.run([sys.executable, '-m', 'trm_spmd.main', '--config=configs/baseline.py:runlocal',
                             f'--workdir={workdir}', '--config.logging.wandb=True'], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        'error: logging.wandb=True needs the wandb package: install the optional extra with '
        'PY=$(bash launch/setup.sh --wandb) and run with that $PY (README.md: Weights & Biases), '
        'or set logging.wandb=False')
    assert 'Traceback' not in result.stderr
    assert not workdir.exists(), 'nothing is written before the check'
