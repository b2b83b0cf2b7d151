"""Config schema, parsing, validation and every config file's variants."""

import glob
import os

import ml_collections
import pytest

from trm_spmd.config import (ConfigArgError, ConfigError, default_config, expand_sweep, load_config,
                             parse_arg, resolve_mesh_shape, validate)
from trm_spmd.config.validate import config_hash

from conftest import REPO

CONFIG_FILES = sorted(glob.glob(os.path.join(REPO, 'configs', '*.py')))


def all_specs():
    specs = []
    for path in CONFIG_FILES:
        rel = os.path.relpath(path, REPO)
        for spec in expand_sweep(rel) if 'sweeps.py' not in rel else []:
            specs.append(spec)
    return specs


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


@pytest.mark.parametrize('spec', all_specs())
@pytest.mark.parametrize('runlocal', [False, True])
def test_every_variant_loads_validates_and_locks(spec, runlocal):
    config = load_config(spec + (',runlocal' if runlocal else ''))
    validate(config, device_count=8)
    assert config.runlocal == runlocal
    config.lock()
    with pytest.raises(AttributeError, match='Did you mean "hidden_size"'):
        config.model.hiden_size = 3
    assert len(config_hash(config)) == 16


def test_named_variant_and_key_values():
    assert parse_arg('t3_n6', variant='x', runlocal=False).variant == 't3_n6'
    arg = parse_arg('runlocal,variant=t2_n2', variant='x', runlocal=False)
    assert arg.runlocal and arg.variant == 't2_n2'
    arg = parse_arg('lr=0.5,steps=3', lr=1.0, steps=1)
    assert arg.lr == 0.5 and arg.steps == 3


def test_parse_arg_errors_are_one_line():
    with pytest.raises(ConfigArgError, match="unknown config argument 'varient'.*did you mean 'variant'"):
        parse_arg('varient=t3_n6', variant='x', runlocal=False)
    with pytest.raises(ConfigArgError, match='expected int'):
        parse_arg('steps=many', steps=1)


def test_tn_sweep_decodes_variants():
    for spec, (t, n) in [('configs/tn_sweep.py:t2_n2', (2, 2)), ('configs/tn_sweep.py:t4_n6', (4, 6))]:
        config = load_config(spec)
        assert (config.model.H_cycles, config.model.L_cycles) == (t, n)
    with pytest.raises(ConfigArgError, match='not of the form'):
        load_config('configs/tn_sweep.py:deep')
    assert expand_sweep('configs/tn_sweep.py') == [f'configs/tn_sweep.py:{v}' for v in
                                                   ('t2_n2', 't2_n6', 't3_n4', 't3_n6', 't4_n6')]


def test_baseline_matches_the_paper():
    c = load_config('configs/baseline.py')
    assert (c.data.global_batch_size, c.optim.lr, c.optim.weight_decay) == (768, 1e-4, 1.0)
    assert (c.optim.puzzle_emb_lr, c.optim.puzzle_emb_weight_decay, c.optim.warmup_steps) == (1e-4, 1.0, 2000)
    assert (c.model.H_cycles, c.model.L_cycles, c.model.L_layers, c.model.hidden_size) == (3, 6, 2, 512)
    assert c.model.mlp_t and c.ema.enabled and c.ema.decay == 0.999 and c.act.halt_max_steps == 16
    assert (c.train.epochs, c.train.eval_every_epochs) == (50000, 5000)


def _valid():
    c = default_config()
    c.data.path = 'data/x'
    return c


@pytest.mark.parametrize('change, message', [
    (lambda c: setattr(c.model, 'H_cycles', 0), r'model.H_cycles=0 must be >= 1'),
    (lambda c: setattr(c.model, 'L_cycles', 0), r'model.L_cycles=0 must be >= 1'),
    (lambda c: setattr(c.model, 'pos_encodings', 'alibi'), r"model.pos_encodings='alibi' is not one of"),
    (lambda c: setattr(c.optim, 'name', 'sgd'), r"optim.name='sgd' is not one of"),
    (lambda c: setattr(c.data, 'global_batch_size', 100), r'data.global_batch_size / optim.grad_accum_steps=100 '
                                                          r'is not divisible by the data axis \(8 devices\)'),
    (lambda c: setattr(c.eval, 'global_batch_size', 12), r'eval.global_batch_size=12 is not divisible'),
    (lambda c: setattr(c.optim, 'grad_accum_steps', 5), r'not divisible by optim.grad_accum_steps=5'),
    (lambda c: setattr(c.mesh, 'shape', (3, 1)), r'mesh.shape=\(3, 1\) has 3 devices but 8 exist'),
    (lambda c: setattr(c.mesh, 'shape', (-1, 2)), r'model axis=2: only data parallelism'),
    (lambda c: setattr(c.data, 'path', ''), r'no sudoku dataset: set --config.data.path'),
    (lambda c: setattr(c.act, 'exploration_prob', 1.5), r'act.exploration_prob=1.5 must be in \[0, 1\]'),
    (lambda c: (setattr(c.curriculum, 'enabled', True), setattr(c.curriculum, 'H_cycles', (1, 2))),
     r'must have the same, non-zero length'),
])
def test_bad_configs_fail_with_one_line(change, message):
    config = _valid()
    change(config)
    with pytest.raises(ConfigError, match=message) as info:
        validate(config, device_count=8)
    assert '\n' not in str(info.value)


def test_wrong_type_and_unknown_key_are_refused():
    config = default_config()
    config.lock()
    with pytest.raises(TypeError):
        config.model.hidden_size = 'wide'
    with pytest.raises(AttributeError, match='Did you mean "L_cycles"'):
        config.model.L_cycle = 3


@pytest.mark.parametrize('devices', [1, 8, 64])
def test_mesh_shape_fills_the_data_axis(devices):
    assert resolve_mesh_shape((-1, 1), devices) == (devices, 1)
    assert resolve_mesh_shape((devices, 1), devices) == (devices, 1)


def test_config_hash_tracks_values():
    a, b = _valid(), _valid()
    assert config_hash(a) == config_hash(b)
    b.optim.lr = 3e-4
    assert config_hash(a) != config_hash(b)
    assert isinstance(a, ml_collections.ConfigDict)


@pytest.mark.parametrize('override, message', [
    ('--config.optim.lr=abc', "flag --config.optim.lr=abc: could not convert string to float: 'abc'"),
    ('--config.train.total_steps=1.5', 'flag --config.train.total_steps=1.5: invalid literal for int()'),
])
def test_an_override_of_the_wrong_type_is_one_line_and_exit_2(override, message):
    import subprocess
    import sys
    from conftest import REPO
    result = subprocess.run([sys.executable, '-m', 'trm_spmd.main', '--config=configs/baseline.py', override,
                             '--dry_run'], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f'error: {message}'), result.stderr
    assert "a value of its field's type" in lines[0]
