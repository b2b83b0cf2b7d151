"""The native-torch backend (CPU here; CUDA on a GPU): training, torch.compile, resume,
metrics, two processes under torchrun, and checkpoints shared with the XLA backend."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from trm_spmd.train.loop import train_and_evaluate

from conftest import REPO
from test_lifecycle import final_state, flatten
from test_train import read_metrics, runlocal, train_lines


def native(**overrides):
    return runlocal(**{'backend': 'native', **overrides})


@pytest.mark.slow
def test_torch_compiled_run_trains_evaluates_and_logs(tmp_path):
    workdir = tmp_path / 'run'
    final = train_and_evaluate(native(**{'native.compile': 'default', 'train.total_steps': 3,
                                         'train.log_every_steps': 1}), str(workdir))
    lines = read_metrics(workdir)
    assert [r['step'] for r in train_lines(lines)] == [1, 2, 3]
    assert all(np.isfinite(r['train/loss']) for r in train_lines(lines))
    assert final['eval/count'] == 16
    run = json.loads((workdir / 'run.json').read_text())
    assert run['status'] == 'done' and run['backend']['backend'] == 'native'


@pytest.mark.slow
@pytest.mark.parametrize('compile_mode', ['none', 'default'])
def test_resume_continues_exactly(tmp_path, compile_mode):
    # Compiled, this needs deterministic algorithms: inductor otherwise sums the embedding
    # gradient with parallel atomic adds, and two runs part in the last bits within 10 steps.
    common = {'train.log_every_steps': 1, 'checkpoint.every_steps': 3, 'native.compile': compile_mode}
    train_and_evaluate(native(**common, **{'train.total_steps': 6}), str(tmp_path / 'whole'))
    train_and_evaluate(native(**common, **{'train.total_steps': 3}), str(tmp_path / 'split'))
    train_and_evaluate(native(**common, **{'train.total_steps': 6}), str(tmp_path / 'split'))
    whole = {r['step']: r['train/loss'] for r in train_lines(read_metrics(tmp_path / 'whole'))}
    split = {r['step']: r['train/loss'] for r in train_lines(read_metrics(tmp_path / 'split'))}
    assert split == whole
    a, b = flatten(final_state(tmp_path / 'whole')[1]), flatten(final_state(tmp_path / 'split')[1])
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.slow
def test_a_run_started_on_xla_resumes_on_native(tmp_path):
    workdir = tmp_path / 'run'
    common = {'train.log_every_steps': 1, 'checkpoint.every_steps': 3}
    train_and_evaluate(runlocal(**common, **{'train.total_steps': 3}), str(workdir))
    train_and_evaluate(native(**common, **{'train.total_steps': 6}), str(workdir))
    lines = train_lines(read_metrics(workdir))
    assert [r['step'] for r in lines] == [1, 2, 3, 4, 5, 6]
    reference = train_lines(read_metrics(_xla_run(tmp_path / 'xla', common)))
    # Same weights and data: the backends differ only in float rounding.
    for a, b in zip(lines, reference):
        assert a['train/loss'] == pytest.approx(b['train/loss'], rel=1e-3)


def _xla_run(workdir, common):
    train_and_evaluate(runlocal(**common, **{'train.total_steps': 6}), str(workdir))
    return workdir


@pytest.mark.slow
def test_two_processes_under_torchrun_match_one(tmp_path):
    flags = ['--config=configs/baseline.py:runlocal', '--config.backend=native',
             '--config.train.total_steps=3', '--config.train.log_every_steps=1']
    env = dict(os.environ, TRM_SPMD_DATA=str(tmp_path / 'data'), OMP_NUM_THREADS='1')
    env.pop('PJRT_DEVICE', None)
    losses = {}
    for procs in (1, 2):
        workdir = tmp_path / f'p{procs}'
        cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={procs}',
               '-m', 'trm_spmd.main', f'--workdir={workdir}', *flags]
        result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
        losses[procs] = [r['train/loss'] for r in train_lines(read_metrics(workdir))]
    assert len(losses[2]) == 3
    assert losses[2][0] == pytest.approx(losses[1][0], abs=1e-5)
    np.testing.assert_allclose(losses[2], losses[1], rtol=1e-3)


def test_auto_backend_is_xla_only_where_asked_for_or_on_a_tpu(monkeypatch):
    from trm_spmd import runtime
    monkeypatch.setattr(runtime, 'on_tpu_vm', lambda: False)
    assert runtime.select_backend('auto') == 'xla'   # the tests set PJRT_DEVICE=CPU
    monkeypatch.delenv('PJRT_DEVICE')
    assert runtime.select_backend('auto') == 'native'   # a plain CPU: torch.compile beats XLA's CPU backend
    assert runtime.select_backend('native') == 'native'


def test_auto_dtype_is_bfloat16_only_where_the_hardware_has_it(monkeypatch):
    import torch

    from trm_spmd.model.config import TRMConfig
    from trm_spmd.runtime.native import fast_dtype
    for native_bf16, expected in ((False, 'float32'), (True, 'bfloat16')):
        monkeypatch.setattr(torch.cpu, '_is_avx512_bf16_supported', lambda: native_bf16)
        monkeypatch.setattr(torch.cpu, '_is_amx_tile_supported', lambda: False)
        assert fast_dtype(torch.device('cpu')) == expected
        auto = TRMConfig(forward_dtype='auto').with_auto_dtype(fast_dtype(torch.device('cpu')))
        assert auto.forward_dtype == expected
    assert TRMConfig(forward_dtype='float32').with_auto_dtype('bfloat16').forward_dtype == 'float32'
