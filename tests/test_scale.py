"""A config far outside the planned runs says so, at start and in --dry_run."""

import glob
import os
import subprocess
import sys

import pytest

from trm_spmd import scale
from trm_spmd.config import load_config
from trm_spmd.config.files import load_module

from conftest import REPO


def _planned_specs():
    for path in sorted(glob.glob(os.path.join(REPO, 'configs', '*.py'))):
        module = load_module(path)
        if hasattr(module, 'sweep'):
            for entry in module.sweep():
                yield os.path.join(REPO, entry) if '.py' in entry else f'{path}:{entry}'


def test_no_planned_run_is_warned_about():
    specs = list(_planned_specs())
    assert len(specs) > 30
    for spec in specs:
        assert scale.far_outside_plan(scale.flops_per_step(load_config(spec)), 32, 'TPU v4') is None, spec


def test_a_far_larger_config_gets_its_flops_and_time_on_the_slice():
    config = load_config(os.path.join(REPO, 'configs/tn_sweep.py:t99_n99'))
    ratio = scale.flops_per_step(config) / scale.flops_per_step(load_config(os.path.join(REPO, 'configs/baseline.py')))
    assert ratio == pytest.approx(288.6, rel=1e-3)
    seconds = scale.flops_per_step(config) / (32 * 275e12 * scale.ASSUMED_MFU)
    warning = scale.far_outside_plan(scale.flops_per_step(config), 32, 'TPU v4')
    assert warning.startswith('warning: this config does 9,468 TFLOP per training step, 289x the paper')
    assert f'on these 32 TPU v4 devices a step takes about {seconds:,.2f} s at 30% MFU' in warning
    assert 'no time estimate' in scale.far_outside_plan(scale.flops_per_step(config), 1, 'CPU')


def test_a_tpu_vm_names_its_generation(monkeypatch):
    config = load_config(os.path.join(REPO, 'configs/tn_sweep.py:t99_n99'))
    monkeypatch.setenv('TPU_ACCELERATOR_TYPE', 'v5litepod-16')
    warning = scale.far_outside_plan(scale.flops_per_step(config), 16, 'TPU')
    assert 'on these 16 v5litepod-16 devices a step takes about' in warning


@pytest.mark.slow
def test_dry_run_prints_the_warning_line():
    result = subprocess.run([sys.executable, '-m', 'trm_spmd.main', '--config=configs/tn_sweep.py:t99_n99',
                             '--dry_run'], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [line for line in result.stderr.splitlines() if line.startswith('warning: ')] == [
        line for line in result.stderr.splitlines() if '289x the paper' in line]
    assert '289x' in result.stderr
