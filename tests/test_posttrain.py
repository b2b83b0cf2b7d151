"""Post-training's run mechanics on the cheapest task (Sudoku, 81 cells): from a trained run, a
new puzzle table and a frozen first share of the steps, resumed in the middle of either
phase, ends exactly like the straight run; the source run is never written to."""

import os
import shutil

import numpy as np
import pytest

from trm_spmd.checkpoint import Checkpointer
from trm_spmd.config import load_config
from trm_spmd.errors import UserError
from trm_spmd.train.loop import train_and_evaluate

from conftest import REPO
from test_lifecycle import final_state, flatten


def _config(**overrides):
    config = load_config(os.path.join(REPO, 'configs/baseline.py:runlocal'))
    config.update_from_flattened_dict(overrides)
    return config


def _posttrain(init_from):
    return _config(**{'init_from': init_from, 'init_puzzle_emb': 'mean', 'optim.freeze_trunk_fraction': 0.5,
                      'train.total_steps': 8, 'train.eval_every_steps': 8, 'checkpoint.every_steps': 2,
                      'checkpoint.keep': 4})


def resumed_copy(workdir, copy, start):
    """A copy of a finished run that resumes from its checkpoint `start`."""
    shutil.copytree(workdir, copy)
    for step in os.listdir(copy / 'checkpoints'):
        if step.isdigit() and int(step) > start:
            shutil.rmtree(copy / 'checkpoints' / step)
    shutil.rmtree(copy / 'checkpoints_best', ignore_errors=True)
    for name in ('lease.json', '.lease.lock'):
        if os.path.exists(copy / name):
            os.remove(copy / name)
    return copy


@pytest.mark.slow
def test_post_training_resumes_exactly_in_either_phase(tmp_path, capsys):
    source = tmp_path / 'pretrained'
    train_and_evaluate(_config(), str(source))
    listing = {d: sorted(os.listdir(source / d)) for d in ('checkpoints',)}
    workdir = tmp_path / 'post'
    train_and_evaluate(_posttrain(str(source)), str(workdir))
    assert 'steps 1-4 of 8 train the puzzle embedding alone' in capsys.readouterr().out
    assert {d: sorted(os.listdir(source / d)) for d in listing} == listing   # the source is read, not written
    _, straight, _ = final_state(workdir)
    _, pretrained, _ = final_state(source)
    assert not np.array_equal(straight['model']['lm_head.weight'], pretrained['model']['lm_head.weight'])
    # At step 4, the frozen phase's end, the network and its EMA are bit for bit the pretrained run's.
    checkpointer = Checkpointer(str(workdir), keep=4, keep_best=0, async_save=False, is_main_host=True)
    try:
        frozen, _ = checkpointer.restore(4)
    finally:
        checkpointer.close()
    for part in ('model', 'ema'):
        for name, value in flatten(pretrained[part]).items():
            if name != 'puzzle_emb':
                assert np.asarray(value).tobytes() == np.asarray(flatten(frozen[part])[name]).tobytes(), (part, name)
    assert not np.array_equal(frozen['model']['puzzle_emb'], straight['model']['puzzle_emb'])
    for start in (2, 6):   # the middle of the frozen phase (steps 1-4), of the full one
        copy = resumed_copy(workdir, tmp_path / f'from{start}', start)
        train_and_evaluate(_posttrain(str(source)), str(copy))
        step, resumed, _ = final_state(copy)
        assert step == 8
        a, b = flatten(straight), flatten(resumed)
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f'resumed from step {start}: {key}')


def test_a_new_table_needs_a_run_to_start_from(tmp_path):
    with pytest.raises(UserError, match='pass --config.init_from=PRETRAINED_RUN'):
        train_and_evaluate(_config(**{'init_puzzle_emb': 'mean'}), str(tmp_path / 'w'))
    assert not os.path.exists(tmp_path / 'w')
