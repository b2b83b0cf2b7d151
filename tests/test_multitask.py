"""Multi-task learning (data.mixture): one token space, padded rows, fixed batch shares, a
stream per task that resumes exactly, and every task's metrics under its name."""

import os

import numpy as np
import pytest

from trm_spmd import tasks
from trm_spmd.batch import IGNORE_LABEL
from trm_spmd.config import ConfigError, load_config, validate
from trm_spmd.data import mixture
from trm_spmd.data.errors import DataError
from trm_spmd.data.loader import TrainBatches
from trm_spmd.train.data import Mixture, open_dataset
from trm_spmd.train.evaluate import task_keys
from trm_spmd.train.loop import train_and_evaluate

from conftest import REPO
from test_lifecycle import assert_resume_is_exact

ONE_HOST = type('Host', (), {'process_index': 0, 'process_count': 1})()


def multi_task_local(**overrides):
    config = load_config(os.path.join(REPO, 'configs/contributions.py:multi_task,runlocal'))
    config.update_from_flattened_dict({'checkpoint.every_steps': 2, 'checkpoint.keep': 3, **overrides})
    return config


def test_each_task_keeps_its_own_token_range_identifiers_and_cells():
    sudoku, maze = mixture.token_maps(('sudoku', 'maze'), [
        {'seq_len': 81, 'vocab_size': 11}, {'seq_len': 36, 'vocab_size': 6, 'num_puzzle_identifiers': 3}])
    assert mixture.mixture_sizes([sudoku, maze]) == {'seq_len': 81, 'vocab_size': 16, 'num_puzzle_identifiers': 4}
    rng = np.random.default_rng(0)
    inputs = rng.integers(1, 6, (5, 36))
    labels = np.where(rng.random((5, 36)) < 0.3, IGNORE_LABEL, rng.integers(1, 6, (5, 36)))
    moved = maze.to_mixture({'inputs': inputs, 'labels': labels, 'puzzle_identifiers': np.array([0, 1, 2, 0, 1]),
                             'valid': np.ones(5, bool)})
    assert moved['inputs'].shape == moved['labels'].shape == (5, 81)
    assert moved['inputs'][:, :36].min() >= 11 and moved['inputs'][:, :36].max() <= 15   # past Sudoku's 1-10
    assert (moved['inputs'][:, 36:] == 0).all() and (moved['labels'][:, 36:] == IGNORE_LABEL).all()
    assert ((moved['labels'][:, :36] == IGNORE_LABEL) == (labels == IGNORE_LABEL)).all()
    assert moved['puzzle_identifiers'].tolist() == [1, 2, 3, 1, 2]   # Sudoku's blank is 0, the maze's 1
    assert moved['valid'].all()
    assert (maze.answers(moved['inputs']) == inputs).all()
    wrong = moved['inputs'].copy()
    wrong[:, 0] = 7   # a Sudoku token where a maze cell is expected
    assert (maze.answers(wrong)[:, 0] == 0).all()
    assert mixture.padding_fraction([sudoku, maze], [8, 8]) == pytest.approx(45 / 162)


def test_the_batch_is_split_by_the_weights_and_sums_to_it():
    assert mixture.member_rows(768, (1, 1)) == [384, 384]
    assert mixture.member_rows(10, (1, 1, 1)) == [4, 3, 3]
    assert mixture.member_rows(64, (3, 1)) == [48, 16]
    assert sum(mixture.member_rows(1001, (0.2, 0.3, 0.5))) == 1001


def _splits():
    config = multi_task_local()
    data = open_dataset(config, ONE_HOST)
    assert isinstance(data, Mixture)
    return data


def test_a_global_batch_is_each_tasks_own_stream_whatever_the_host_count():
    data = _splits()
    sudoku, maze = data.maps
    splits = [m.train for m in data.members]
    rows = [5, 7]   # 4 hosts of 3 rows: host 1 holds Sudoku's last 2 and the maze's first row
    one = mixture.MixtureTrainBatches(data.maps, splits, rows, seed=3, augments=[None, None])
    hosts = [mixture.MixtureTrainBatches(data.maps, splits, rows, 3, [None, None], i, 4) for i in range(4)]
    for step in (0, 1, 9):
        whole = one.batch_at(step)
        parts = [h.batch_at(step) for h in hosts]
        for key in whole:
            np.testing.assert_array_equal(whole[key], np.concatenate([p[key] for p in parts]))
        alone = TrainBatches(splits[1], 7, 3).batch_at(step)   # the maze rows: what the maze alone trains on
        np.testing.assert_array_equal(maze.answers(whole['inputs'][5:]), alone['inputs'])
        np.testing.assert_array_equal(whole['puzzle_identifiers'][5:], alone['puzzle_identifiers'] + 1)
        assert whole['inputs'][:5].max() <= 10 and whole['inputs'][5:, :36].min() >= 11


def test_a_position_of_another_data_set_is_refused():
    data = _splits()
    stream = data.train_batches()
    position = stream.position(6)
    assert sorted(position) == ['maze', 'sudoku']
    stream.check_position(position)
    with pytest.raises(DataError, match='mixture of sudoku, maze'):
        stream.check_position(position['sudoku'])   # a single task's position


@pytest.mark.parametrize('overrides, message', [
    ({'data.mixture': ('sudoku',)}, 'needs two tasks'),
    ({'data.mixture': ('sudoku', 'sudoku')}, 'names a task twice'),
    ({'data.mixture': ('sudoku', 'chess')}, 'chess'),
    ({'data.mixture_weights': (1.0,)}, 'one entry per task'),
    ({'data.mixture_weights': (1.0, 0.0)}, 'must be > 0'),
    ({'data.mixture_weights': (1000.0, 1.0)}, 'at least one'),
    ({'data.path': 'data/x'}, 'data.mixture_paths'),
    ({'data.generate': False}, 'no sudoku dataset'),
])
def test_a_bad_mixture_is_one_line(overrides, message):
    config = multi_task_local(**overrides)
    with pytest.raises(ConfigError, match=message):
        validate(config)


def test_mixture_fields_without_a_mixture_are_refused():
    config = load_config(os.path.join(REPO, 'configs/quickstart.py'))
    config.data.mixture_weights = (1.0, 2.0)
    with pytest.raises(ConfigError, match='need a data.mixture'):
        validate(config)


def test_the_models_sizes_without_data_are_the_datasets():
    config = multi_task_local()
    assert tasks.sizes(config) == {'seq_len': 81, 'vocab_size': 16, 'num_puzzle_identifiers': 2}
    data = open_dataset(config, ONE_HOST)
    assert (data.seq_len, data.vocab_size, data.num_puzzle_identifiers) == (81, 16, 2)


def test_task_metrics_are_named_by_their_task():
    named = task_keys('arc', {'eval/exact_accuracy': 0.5, 'eval/arc/pass@2': 0.25,
                              'eval_by_difficulty/blanks_30-34': 1.0, 'eval_at_act_steps/2/exact_accuracy': 0.1})
    assert named == {'eval/arc/exact_accuracy': 0.5, 'eval/arc/pass@2': 0.25,
                     'eval_by_difficulty/arc/blanks_30-34': 1.0, 'eval_at_act_steps/2/arc/exact_accuracy': 0.1}


@pytest.fixture(scope='module')
def mixture_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp('multi_task') / 'run'
    final = train_and_evaluate(multi_task_local(), str(workdir))
    return workdir, final


@pytest.mark.slow
def test_runlocal_reports_each_task_and_their_mean(mixture_run):
    _, final = mixture_run
    for task in ('sudoku', 'maze'):
        assert 0.0 <= final[f'eval/{task}/exact_accuracy'] <= 1.0
        assert final[f'eval/{task}/count'] == 16
        assert any(k.startswith(f'eval_by_difficulty/{task}/') for k in final)
    assert final['eval/count'] == 32
    assert final['eval/accuracy'] == pytest.approx((final['eval/sudoku/accuracy'] + final['eval/maze/accuracy']) / 2)
    assert final['eval/exact_accuracy'] == pytest.approx(
        (final['eval/sudoku/exact_accuracy'] + final['eval/maze/exact_accuracy']) / 2)


@pytest.mark.slow
def test_each_task_saves_its_own_evaluation_sample_in_its_own_tokens(mixture_run):
    from trm_spmd.analysis import failures
    workdir, final = mixture_run
    samples = failures.load_samples(str(workdir))
    assert [(s.task, s.step) for s in samples] == [('maze', 4), ('sudoku', 4)]
    assert {'samples_maze_4.npz', 'samples_sudoku_4.npz'} <= set(os.listdir(workdir / 'eval'))
    for sample, cells in zip(samples, (36, 81)):
        assert len(sample.records) == 16 and all(r.prediction.shape == (cells,) for r in sample.records)
        # Answers mapped back from the mixture's tokens: the sample's failures are the evaluation's.
        assert len(sample.failures) == round((1 - final[f'eval/{sample.task}/exact_accuracy']) * 16)


@pytest.mark.slow
def test_a_resumed_mixture_ends_exactly_like_the_straight_one(mixture_run, tmp_path):
    workdir, _ = mixture_run
    meta, _ = assert_resume_is_exact(workdir, tmp_path / 'resumed', 4,
                                     lambda d: train_and_evaluate(multi_task_local(), d))
    assert sorted(meta['loader']) == ['maze', 'sudoku']   # a position per task


@pytest.mark.slow
def test_arc_in_a_mixture_keeps_its_scorer(tmp_path):
    config = multi_task_local(**{'data.mixture': ('sudoku', 'arc'), 'data.arc_max_tasks': 2,
                                 'data.generate_num_aug': 1, 'eval.max_examples': 0,
                                 'train.total_steps': 2, 'train.eval_every_steps': 2, 'checkpoint.every_steps': 2})
    final = train_and_evaluate(config, str(tmp_path / 'run'))
    assert 0.0 <= final['eval/arc/pass@2'] <= 1.0 and 'eval/sudoku/exact_accuracy' in final
    assert (tmp_path / 'run' / 'eval' / 'submission_arc_2.json').exists()


@pytest.mark.slow
def test_solve_answers_each_task_of_a_multi_task_run(mixture_run):
    from trm_spmd.tasks.maze import grid as maze_grid
    from test_arc_train import _solve
    workdir, _ = mixture_run
    data = open_dataset(multi_task_local(), ONE_HOST)
    maze_text = maze_grid.decode(data.members[1].test.inputs[0])
    done = _solve(workdir, '--task=maze', f'--puzzle={maze_text}')
    assert done.returncode == 0, done.stderr
    assert 'S' in done.stdout and 'G' in done.stdout
    sudoku_text = ''.join('.' if t <= 1 else str(t - 1) for t in data.members[0].test.inputs[0])
    done = _solve(workdir, '--task=sudoku', f'--puzzle={sudoku_text}')
    assert done.returncode == 0, done.stderr
    # Without --task a maze would be read as a Sudoku: the run's tasks are named instead.
    done = _solve(workdir, f'--puzzle={maze_text}')
    assert done.returncode == 2
    assert done.stderr.strip() == ('error: this run trained on several tasks (sudoku, maze): say which the puzzles '
                                   'are with --task=sudoku or --task=maze')
    done = _solve(workdir, '--task=arc', f'--puzzle={sudoku_text}')
    assert done.returncode == 2
    assert done.stderr.strip() == 'error: --task=arc: the run trained on sudoku, maze; pass one of them'


def test_a_dataset_of_another_task_in_a_mixture_names_its_entry_of_data_mixture_paths(tmp_path):
    from trm_spmd.data.dataset import DatasetError
    from trm_spmd.tasks.sudoku.build import build_generated
    build_generated(str(tmp_path / 'sudoku'), num_train=8, num_test=4, blanks=(30, 34), seed=0, num_aug=0,
                    progress=False)
    config = multi_task_local(**{'data.mixture_paths': ('', str(tmp_path / 'sudoku'))})   # sudoku, then maze
    with pytest.raises(DatasetError) as caught:
        open_dataset(config, ONE_HOST)
    assert str(caught.value) == (
        f"{tmp_path / 'sudoku' / 'train'}: not a maze dataset: vocab_size 11 and seq_len 81 are not a maze's (6, a "
        f"square number of cells); entry 2 of data.mixture_paths is the dataset of maze (entry 2 of data.mixture): "
        f"point it at a maze dataset")
