"""What may change in a config when a run resumes: allowed changes pass, the rest are refused
in one line naming the key, its old and new value and what to do."""

import json
import os

import pytest

from trm_spmd.config import default_config
from trm_spmd.config.resume import (ALLOWED, REFUSED, RUN_LENGTH, ResumeConfigError, check_resume, classify,
                                    saved_config)


def _config(**changes):
    config = default_config()
    config.update_from_flattened_dict(changes)
    return config


def _saved(**changes):
    return json.loads(_config(**changes).to_json_best_effort())


def _leaf_keys(tree, prefix=''):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaf_keys(value, f'{prefix}{key}.')
        else:
            yield prefix + key


def test_every_schema_key_is_classified():
    keys = list(_leaf_keys(_saved()))
    unclassified = [k for k in keys if classify(k) is None]
    assert unclassified == []
    # And no table entry names a key or section the schema lacks.
    sections = {k.split('.')[0] + '.*' for k in keys}
    for pattern in list(ALLOWED) + list(REFUSED) + list(RUN_LENGTH):
        assert pattern in keys or pattern in sections, pattern


def test_the_same_config_resumes_with_no_changes():
    assert check_resume(_saved(), _config()) == []


@pytest.mark.parametrize('key,value', [
    ('checkpoint.keep', 7), ('checkpoint.every_steps', 50), ('train.log_every_steps', 10),
    ('train.eval_every_steps', 500), ('eval.global_batch_size', 256), ('logging.tensorboard', False),
    ('data.prefetch', 4), ('xla.cache_dir', '/tmp/x'), ('native.compile', 'default'), ('mesh.shape', (4, 1)),
    ('train.nan_policy', 'skip'), ('model.grad_checkpointing', True), ('backend', 'native'), ('variant', 'v2'),
])
def test_bookkeeping_cadence_and_placement_may_change(key, value):
    [change] = check_resume(_saved(), _config(**{key: value}))
    assert change.key == key and change.new == json.loads(json.dumps(value))


@pytest.mark.parametrize('key,value', [
    ('seed', 1), ('model.hidden_size', 256), ('model.forward_dtype', 'float32'), ('act.halt_max_steps', 8),
    ('loss.type', 'softmax'), ('optim.lr', 3e-4), ('optim.warmup_steps', 10), ('optim.name', 'lion'),
    ('data.global_batch_size', 512), ('data.path', '/elsewhere'), ('data.augment', True),
    ('ema.decay', 0.99), ('curriculum.enabled', True), ('eval.max_examples', 100), ('init_from', '/other/run'),
    ('optim.grad_accum_steps', 2),
])
def test_what_the_checkpoints_or_the_numbers_depend_on_is_refused(key, value):
    with pytest.raises(ResumeConfigError) as caught:
        check_resume(_saved(), _config(**{key: value}))
    message = str(caught.value)
    node = _saved()
    for part in key.split('.'):
        node = node[part]
    old = json.dumps(node)
    assert '\n' not in message
    assert message.startswith(f'--config.{key} changed from {old} to {json.dumps(value)} since this run started')
    assert message.endswith('revert it to resume, or start a new run with another --workdir')


def test_the_first_refused_key_is_named_and_allowed_ones_do_not_hide_it():
    with pytest.raises(ResumeConfigError, match=r'^--config\.optim\.lr changed'):
        check_resume(_saved(), _config(**{'checkpoint.keep': 9, 'optim.lr': 1e-3, 'seed': 4}))


def test_a_run_may_be_extended_when_nothing_depends_on_its_length():
    # The default: constant lr after warmup, no curriculum, no exploration decay.
    [change] = check_resume(_saved(**{'train.total_steps': 1000}), _config(**{'train.total_steps': 2000}))
    assert change == ('train.total_steps', 1000, 2000)
    # epochs is ignored while total_steps rules: changing it is no change of length.
    assert [c.key for c in check_resume(_saved(**{'train.total_steps': 1000}),
                                        _config(**{'train.total_steps': 1000, 'train.epochs': 9}))] == ['train.epochs']


@pytest.mark.parametrize('setting,what', [
    ({'optim.lr_min_ratio': 0.1}, 'the cosine learning-rate decay'),
    ({'curriculum.enabled': True}, 'the curriculum'),
    ({'act.exploration_prob_final': 0.0}, 'the exploration decay'),
])
def test_a_run_whose_schedule_depends_on_its_length_cannot_be_extended(setting, what):
    with pytest.raises(ResumeConfigError) as caught:
        check_resume(_saved(**setting, **{'train.total_steps': 1000}),
                     _config(**setting, **{'train.total_steps': 2000}))
    assert f'{what}' in str(caught.value) and 'depends on the run length' in str(caught.value)


def test_a_key_added_to_the_schema_since_the_run_started_counts_as_its_default():
    saved = _saved()
    del saved['model']['grad_checkpointing'], saved['seed']
    saved['a_key_since_removed'] = 3
    assert check_resume(saved, _config()) == []
    with pytest.raises(ResumeConfigError, match='--config.seed changed from 0 to 5'):
        check_resume(saved, _config(seed=5))


def test_saved_config(tmp_path):
    assert saved_config(str(tmp_path)) is None
    (tmp_path / 'config.json').write_text('{"seed": 3}')
    assert saved_config(str(tmp_path)) == {'seed': 3}
    (tmp_path / 'config.json').write_text('{"seed": ')
    with pytest.raises(ResumeConfigError, match='config.json does not parse'):
        saved_config(str(tmp_path))


def test_a_config_of_another_task_is_named_by_its_task_not_its_first_changed_key():
    from trm_spmd.config import load_config
    from conftest import REPO
    sudoku = load_config(os.path.join(REPO, 'configs/quickstart.py'))
    maze = load_config(os.path.join(REPO, 'configs/maze.py:cpu'))
    with pytest.raises(ResumeConfigError) as caught:
        check_resume(json.loads(sudoku.to_json_best_effort()), maze)
    assert str(caught.value) == (
        '--config.data.task changed from "sudoku" to "maze" since this run started (its config.json): the checkpoints '
        'hold a model trained on the old task; revert it to resume, or start a new run with another --workdir')


def test_a_model_of_another_size_is_named_by_its_size():
    changed = {'model.hidden_size': 256, 'model.H_cycles': 2, 'data.augment': True, 'act.halt_max_steps': 8}
    with pytest.raises(ResumeConfigError, match=r'^--config\.model\.hidden_size changed from 512 to 256 '):
        check_resume(_saved(), _config(**changed))
