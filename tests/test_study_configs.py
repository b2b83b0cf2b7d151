"""The study's config families: each variant is what its file says, runs on 8 CPU devices and a v4-64, and trains."""

import json
import math
import os
import re

import pytest
import yaml

from trm_spmd.config import ConfigArgError, default_config, expand_sweep, load_config, validate
from trm_spmd.dry_run import dry_run
from trm_spmd.train.loop import schedule_steps, train_and_evaluate

from conftest import REPO

FAMILIES = {
    'configs/baseline.py': ('e1_1_baseline',),
    'configs/batch_scaling.py': ('b256', 'b512', 'b1024', 'b2048', 'b6144'),
    'configs/ablations.py': ('ema_off', 'attention', 'nsup_8'),
    'configs/tn_sweep.py': ('t2_n2', 't2_n6', 't3_n4', 't3_n6', 't4_n6'),
    'configs/scaling.py': ('large_model', 'deeper', 'more_data'),
    'configs/advanced.py': ('lr_3e-5', 'lr_1e-4', 'lr_3e-4', 'lr_1e-3', 'longer', 'no_warmup', 'larger_batch'),
    'configs/contributions.py': ('curriculum_recursion', 'adaptive_halting', 'grad_checkpointing', 'lion',
                                 'sparse_attention', 'multi_task'),
}
SPECS = [f'{path}:{variant}' for path, variants in FAMILIES.items() for variant in variants]
BASELINE = 'configs/baseline.py:e1_1_baseline'

# v4-64: 32 chips, each one device (megacore), on 8 hosts of 4.
V4_64 = {'device_count': 32, 'process_count': 8}

# Trainable parameters (TRM_SPEC.md: 5,028,866 MLP, 6,828,034 attention; the others by the same
# arithmetic: per layer 148,992 token-mix + 3 * hidden * swiglu_width(hidden) channel-mix).
PARAMS = {
    'configs/ablations.py:attention': 6_828_034,
    'configs/contributions.py:sparse_attention': 6_828_034,    # the mask is no parameter
    'configs/contributions.py:multi_task': 6_828_034 + 2 * 5 * 512,   # 5 maze tokens in the embedding and the head
    'configs/scaling.py:large_model': 35_223_554,
    'configs/scaling.py:deeper': 10_045_442,
}
BASELINE_PARAMS = 5_028_866


def _batch_fields(batch):
    """batch_scaling.py's rule, written out independently: sqrt lrs, warmup and EMA horizon in examples."""
    k = batch / 768
    return {'data.global_batch_size': batch, 'optim.lr': 1e-4 * math.sqrt(k),
            'optim.puzzle_emb_lr': 1e-4 * math.sqrt(k), 'optim.warmup_steps': round(2000 / k),
            'ema.decay': 0.999 ** k}


# What each variant changes from the baseline, as the printed config must show it.
DISTINCT = {
    BASELINE: {},
    **{f'configs/batch_scaling.py:b{b}': _batch_fields(b) for b in (256, 512, 1024, 2048, 6144)},
    'configs/ablations.py:ema_off': {'ema.enabled': False},
    'configs/ablations.py:attention': {'model.mlp_t': False, 'model.pos_encodings': 'rope'},
    'configs/ablations.py:nsup_8': {'act.halt_max_steps': 8},
    'configs/tn_sweep.py:t2_n2': {'model.H_cycles': 2, 'model.L_cycles': 2},
    'configs/tn_sweep.py:t2_n6': {'model.H_cycles': 2},
    'configs/tn_sweep.py:t3_n4': {'model.L_cycles': 4},
    'configs/tn_sweep.py:t3_n6': {},
    'configs/tn_sweep.py:t4_n6': {'model.H_cycles': 4},
    'configs/scaling.py:large_model': {'model.hidden_size': 1024, 'model.L_layers': 4, 'model.puzzle_emb_ndim': 1024},
    'configs/scaling.py:deeper': {'model.L_layers': 4},
    'configs/scaling.py:more_data': {'data.path': 'data/sudoku-extreme-5k-aug-1000', 'train.epochs': 10000,
                                     'train.eval_every_epochs': 1000},
    'configs/advanced.py:lr_3e-5': {'optim.lr': 3e-5, 'optim.puzzle_emb_lr': 3e-5},
    'configs/advanced.py:lr_1e-4': {},
    'configs/advanced.py:lr_3e-4': {'optim.lr': 3e-4, 'optim.puzzle_emb_lr': 3e-4},
    'configs/advanced.py:lr_1e-3': {'optim.lr': 1e-3, 'optim.puzzle_emb_lr': 1e-3},
    'configs/advanced.py:longer': {'train.epochs': 100000},
    'configs/advanced.py:no_warmup': {'optim.warmup_steps': 0},
    'configs/advanced.py:larger_batch': {**_batch_fields(6144), 'optim.grad_accum_steps': 8},
    'configs/contributions.py:curriculum_recursion': {
        'curriculum.enabled': True, 'curriculum.start_fractions': (0.0, 0.3, 0.6),
        'curriculum.H_cycles': (1, 2, 3), 'curriculum.L_cycles': (2, 4, 6)},
    'configs/contributions.py:adaptive_halting': {'act.exploration_prob_final': 0.0},
    'configs/contributions.py:grad_checkpointing': {'model.grad_checkpointing': True},
    'configs/contributions.py:lion': {'optim.name': 'lion', 'optim.lr': 2e-5, 'optim.weight_decay': 5.0,
                                      'optim.beta2': 0.99},
    'configs/contributions.py:sparse_attention': {'model.mlp_t': False, 'model.pos_encodings': 'rope',
                                                  'model.attention_mask': 'sudoku'},
    'configs/contributions.py:multi_task': {
        'data.mixture': ('sudoku', 'maze'), 'data.mixture_weights': (1.0, 1.0),
        'data.mixture_paths': ('data/sudoku-extreme-1k-aug-1000', 'data/maze-30x30-hard-1k-aug-8'),
        'model.mlp_t': False, 'model.pos_encodings': 'rope', 'model.L_cycles': 4},
}


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)   # config specs are relative to the repository root, as on the command line


def _get(config, dotted):
    node = config
    for part in dotted.split('.'):
        node = node[part]
    return node


def _same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12)
    return a == b


# ---- files, variants, errors ------------------------------------------------------

def test_every_family_lists_its_variants():
    assert sorted(DISTINCT) == sorted(SPECS)
    for path, variants in FAMILIES.items():
        assert expand_sweep(path) == [f'{path}:{v}' for v in variants]


@pytest.mark.parametrize('path', [p for p in FAMILIES if p != 'configs/baseline.py'])
def test_unknown_variant_is_one_line_naming_the_known_ones(path):
    with pytest.raises(ConfigArgError) as info:
        load_config(f'{path}:no_such_variant')
    message = str(info.value)
    assert '\n' not in message and 'no_such_variant' in message
    assert all(v in message for v in FAMILIES[path])


@pytest.mark.parametrize('path', list(FAMILIES) + ['configs/sweeps.py'])
def test_docstring_gives_the_run_command(path):
    module_text = open(path).read()
    docstring = re.match(r'"""(.*?)"""', module_text, re.S).group(1)
    assert 'launch/tpu.py sweep' in docstring or '--config=configs/' in docstring


@pytest.mark.parametrize('spec', SPECS)
def test_variant_loads_and_validates_on_8_devices_and_a_v4_64(spec):
    path, variant = spec.split(':')
    config = load_config(spec)
    assert config.variant == variant and not config.runlocal
    assert config.name == os.path.splitext(os.path.basename(path))[0]
    validate(config, device_count=8)
    validate(config, **V4_64)
    for key, value in DISTINCT[spec].items():
        assert _same(_get(config, key), value), key
        assert not _same(_get(default_config(), key), value), f'{key} is the baseline value: not distinguishing'
    local = load_config(spec + ',runlocal')
    assert local.runlocal and local.variant == variant and local.name == config.name
    validate(local, device_count=8)


# ---- dry run on the 8 CPU devices --------------------------------------------------

def _summary(lines):
    rows = {}
    for line in lines[1:]:
        match = re.fullmatch(r'(\S.*?)\s{2,}(.*)', line)
        assert match, line
        rows[match.group(1)] = match.group(2)
    return rows


def _tn_gflop(T, n):
    """Train FLOPs per example per ACT step, MLP baseline width (DESIGN.md cost model)."""
    call = 1_220_542_464                                    # one network call, hidden 512, 97 positions
    heads = 2 * 81 * 512 * 11 + 2 * 512 * 2                 # lm_head on 81 cells + q_head
    return (T * (n + 1) * call + 2 * (n + 1) * call + 3 * heads) / 1e9


@pytest.mark.parametrize('spec', SPECS)
def test_dry_run_shows_the_mesh_and_the_variant(spec):
    config = load_config(spec)
    lines = []
    dry_run(config, {'config_file': spec}, print_fn=lines.append)
    summary = _summary(lines)
    assert summary['config'] == spec
    assert summary['mesh'].startswith('(8, 1)')
    assert summary['devices'].startswith('8 total')
    batch = DISTINCT[spec].get('data.global_batch_size', 768)
    assert summary['global batch'] == str(batch)
    assert summary['per-device batch'] == str(batch // 8)          # b6144 and larger_batch: 768
    assert summary['micro-batches per step'] == str(DISTINCT[spec].get('optim.grad_accum_steps', 1))
    assert summary['trainable parameters'] == f'{PARAMS.get(spec, BASELINE_PARAMS):,}'
    if spec.startswith('configs/tn_sweep.py') or spec == BASELINE:
        T, n = _get(config, 'model.H_cycles'), _get(config, 'model.L_cycles')
        assert summary['train FLOPs per example per ACT step'] == f'{_tn_gflop(T, n):.2f} GFLOP'
    printed = yaml.unsafe_load(lines[0])                          # the config as the dry run prints it
    assert printed.variant == config.variant
    for key, value in DISTINCT[spec].items():
        assert _same(_get(printed, key), value), key


# ---- the rules the docstrings state ------------------------------------------------

def test_batch_scaling_rule_holds_for_every_variant():
    base = load_config(BASELINE)
    base_steps, _ = schedule_steps(base, 1000)
    for variant in FAMILIES['configs/batch_scaling.py'] + ('b768',):
        c = load_config(f'configs/batch_scaling.py:{variant}')
        batch = int(variant[1:])
        k = batch / 768
        assert c.data.global_batch_size == batch
        assert c.optim.lr == pytest.approx(base.optim.lr * math.sqrt(k), rel=1e-12)           # sqrt scaling
        assert c.optim.puzzle_emb_lr == pytest.approx(base.optim.puzzle_emb_lr * math.sqrt(k), rel=1e-12)
        assert c.optim.warmup_steps * batch == base.optim.warmup_steps * 768                  # same warmup examples
        assert c.ema.decay ** (1 / k) == pytest.approx(base.ema.decay, rel=1e-12)              # same EMA horizon
        assert c.optim.weight_decay == base.optim.weight_decay
        assert c.optim.puzzle_emb_weight_decay == base.optim.puzzle_emb_weight_decay
        # Same epochs and eval cadence in epochs: the same examples, evaluated at the same points.
        assert (c.train.epochs, c.train.eval_every_epochs, c.train.total_steps) == (50000, 5000, 0)
        steps, every = schedule_steps(c, 1000)
        assert abs(steps * batch - base_steps * 768) < batch
        assert steps // every == 10
    assert load_config('configs/batch_scaling.py:b768').optim.lr == base.optim.lr
    b6144 = load_config('configs/batch_scaling.py:b6144')
    assert (b6144.data.global_batch_size // 32, b6144.data.global_batch_size // 8) == (192, 768)   # device, host


def test_larger_batch_is_b6144_in_8_micro_batches_of_the_papers_768():
    larger, b6144 = load_config('configs/advanced.py:larger_batch'), load_config('configs/batch_scaling.py:b6144')
    for key in ('data.global_batch_size', 'optim.lr', 'optim.puzzle_emb_lr', 'optim.warmup_steps', 'ema.decay'):
        assert _get(larger, key) == _get(b6144, key), key
    assert larger.data.global_batch_size // larger.optim.grad_accum_steps == 768
    local = load_config('configs/advanced.py:larger_batch,runlocal')
    assert local.optim.grad_accum_steps > 1


def test_more_data_keeps_the_baselines_steps_and_eval_cadence():
    base, more = load_config(BASELINE), load_config('configs/scaling.py:more_data')
    assert schedule_steps(more, 5000) == schedule_steps(base, 1000) == (65104, 6510)


def test_lion_keeps_the_decay_strength_with_a_smaller_lr():
    base, lion = load_config(BASELINE), load_config('configs/contributions.py:lion')
    assert lion.optim.lr * lion.optim.weight_decay == pytest.approx(base.optim.lr * base.optim.weight_decay)
    assert 3 <= base.optim.lr / lion.optim.lr <= 10 and 3 <= lion.optim.weight_decay / base.optim.weight_decay <= 10
    assert (lion.optim.puzzle_emb_lr, lion.optim.puzzle_emb_weight_decay) == (1e-4, 1.0)


def test_runlocal_keeps_what_makes_the_variant():
    base = load_config(BASELINE + ',runlocal')
    checks = {
        'configs/ablations.py:nsup_8': lambda c: c.act.halt_max_steps < base.act.halt_max_steps,
        'configs/ablations.py:attention': lambda c: not c.model.mlp_t and c.model.pos_encodings == 'rope',
        'configs/scaling.py:large_model': lambda c: (c.model.hidden_size, c.model.L_layers) == (64, 4)
        and c.model.puzzle_emb_ndim == 64,
        'configs/scaling.py:more_data': lambda c: c.data.generate_train == 5 * base.data.generate_train,
        'configs/contributions.py:curriculum_recursion': lambda c: c.curriculum.enabled,
        'configs/contributions.py:lion': lambda c: c.optim.name == 'lion',
        'configs/contributions.py:sparse_attention': lambda c: c.model.attention_mask == 'sudoku' and not c.model.mlp_t,
        'configs/contributions.py:multi_task': lambda c: c.data.mixture == ('sudoku', 'maze')
        and c.data.generate_size == 6 and not c.data.mixture_paths,
        'configs/batch_scaling.py:b256': lambda c: c.data.global_batch_size == 8,
        'configs/batch_scaling.py:b6144': lambda c: c.data.global_batch_size == 192,
    }
    for spec, check in checks.items():
        assert check(load_config(spec + ',runlocal')), spec


# ---- sweeps ------------------------------------------------------------------------

ALL_ABLATIONS = [BASELINE, 'configs/ablations.py:ema_off', 'configs/ablations.py:attention',
                 'configs/ablations.py:nsup_8', 'configs/contributions.py:curriculum_recursion',
                 'configs/contributions.py:adaptive_halting', 'configs/contributions.py:lion',
                 'configs/contributions.py:sparse_attention']
BATCH_SWEEP = [BASELINE] + [f'configs/batch_scaling.py:b{b}' for b in (256, 512, 1024, 2048, 6144)]
FAMILY_SWEEP = [BASELINE, 'configs/ablations.py:attention', 'configs/urm.py:sudoku', 'configs/maze.py:paper',
                'configs/urm.py:maze', 'configs/arc.py:arc1', 'configs/urm.py:arc1']


@pytest.mark.parametrize('name, expected', [('all_ablations', ALL_ABLATIONS), ('batch_sweep', BATCH_SWEEP),
                                            ('family', FAMILY_SWEEP), ('', ALL_ABLATIONS)])
def test_study_sweeps_expand_to_specs_that_load(name, expected):
    specs = expand_sweep('configs/sweeps.py' + (f':{name}' if name else ''))
    assert specs == expected
    runs = set()
    for spec in specs:
        config = load_config(spec)
        validate(config, device_count=8)
        validate(config, **V4_64)
        runs.add((config.name, config.variant))   # the launcher's STUDY_ROOT/<name>/<variant>
    assert len(runs) == len(specs)


def test_advanced_lr_search_sweep_is_the_lr_grid():
    assert expand_sweep('configs/advanced.py:lr_search') == [
        f'configs/advanced.py:{v}' for v in ('lr_3e-5', 'lr_1e-4', 'lr_3e-4', 'lr_1e-3')]


def test_sweeps_file_has_no_config_of_its_own():
    with pytest.raises(ConfigArgError, match='defines only sweeps'):
        load_config('configs/sweeps.py')


# ---- training on the 8 CPU devices -------------------------------------------------

def _train(spec, workdir, steps):
    """Trains the runlocal variant `steps` steps, checks it finished as itself, returns its train lines."""
    config = load_config(spec + ',runlocal')
    config.train.total_steps = steps
    config.train.eval_every_steps = steps
    config.train.log_every_steps = 1
    config.checkpoint.keep_best = 0        # nothing here reads the best checkpoint
    train_and_evaluate(config, str(workdir), source={'config_file': spec + ',runlocal'})
    with open(os.path.join(workdir, 'run.json')) as f:
        run = json.load(f)
    with open(os.path.join(workdir, 'metrics.jsonl')) as f:
        train = [r for r in map(json.loads, f) if 'train/loss' in r]
    with open(os.path.join(workdir, 'config.json')) as f:
        saved = json.load(f)
    assert run['status'] == 'done' and run['total_steps'] == steps
    assert [r['step'] for r in train] == list(range(1, steps + 1))
    assert all(math.isfinite(r['train/loss']) for r in train)
    path, variant = spec.split(':')
    assert (saved['name'], saved['variant'], saved['runlocal']) == (os.path.basename(path)[:-len('.py')], variant, True)
    return train


# These two train 10 steps in their own tests below, which check the same and more.
SCHEDULED = ('configs/contributions.py:curriculum_recursion', 'configs/contributions.py:adaptive_halting')


@pytest.mark.slow
@pytest.mark.parametrize('spec', [s for s in SPECS if s not in SCHEDULED])
def test_runlocal_variant_trains_two_steps(spec, tmp_path):
    _train(spec, tmp_path / 'run', steps=2)


@pytest.mark.slow
def test_curriculum_recursion_follows_its_stages(tmp_path):
    train = _train(SCHEDULED[0], tmp_path / 'run', steps=10)
    # Stages start at int(fraction * 10) = updates 0, 3, 6; logged step s is update s - 1.
    cycles = [(r['train/H_cycles'], r['train/L_cycles']) for r in train]
    assert cycles == [(1, 2)] * 3 + [(2, 4)] * 3 + [(3, 6)] * 4


@pytest.mark.slow
def test_adaptive_halting_decays_exploration_to_its_final_value(tmp_path):
    config = load_config(SCHEDULED[1] + ',runlocal')
    start, final = config.act.exploration_prob, config.act.exploration_prob_final
    assert (start, final) == (0.1, 0.0)
    train = _train(SCHEDULED[1], tmp_path / 'run', steps=10)
    probs = [r['train/exploration_prob'] for r in train]
    assert probs[0] == pytest.approx(start)
    assert all(a > b for a, b in zip(probs, probs[1:]))
    # Linear over the run: update i uses start + (final - start) * i / 10.
    assert probs == pytest.approx([start + (final - start) * i / 10 for i in range(10)], abs=1e-6)
    assert all((r['train/H_cycles'], r['train/L_cycles']) == (3, 6) for r in train)
