"""Maze-Hard end to end: the generated set validates independently and trains; official CSVs
build what the official builder writes; bad rows are refused; the Hub source works against
a stand-in server; solve draws and judges a maze."""

import csv
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from trm_spmd.config import load_config
from trm_spmd.data import load_split
from trm_spmd.data.errors import DataError
from trm_spmd.tasks.maze import TASK as MAZE, build, grid
from trm_spmd.tasks.maze import generate as maze_generate
from trm_spmd.train.data import generated_dataset_dir as _generated_dir
from trm_spmd.train.loop import train_and_evaluate

from conftest import REPO


def _write_csv(path, rows):
    with open(path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['source', 'question', 'answer', 'rating'])
        writer.writerows(rows)


def _maze_rows(count, size, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        question, answer, _ = maze_generate.generate(rng, size, maze_generate.default_min_path(size))
        rows.append([f'gen{i}', grid.decode(question), grid.decode(answer), int(grid.path_lengths(answer[None])[0])])
    return rows


def _official_arrays(rows, augment):
    """What the official build_maze_dataset.py computes for CSV rows, from its rules: each
    grid as a side x side array of characters, the 8 dihedral transforms of the training
    set in its order, characters '# SGo' -> 1..5."""
    charset = '# SGo'
    transforms = [lambda a: a, lambda a: np.rot90(a, 1), lambda a: np.rot90(a, 2), lambda a: np.rot90(a, 3),
                  np.fliplr, np.flipud, lambda a: a.T, lambda a: np.fliplr(np.rot90(a, 1))]
    token = {c: i + 1 for i, c in enumerate(charset)}
    inputs, labels, groups = [], [], [0]
    for _, question, answer, _ in rows:
        side = int(len(question) ** 0.5)
        q = np.array(list(question)).reshape(side, side)
        a = np.array(list(answer)).reshape(side, side)
        for transform in transforms[:8 if augment else 1]:
            inputs.append([token[c] for c in transform(q).reshape(-1)])
            labels.append([token[c] for c in transform(a).reshape(-1)])
        groups.append(len(inputs))
    count = len(inputs)
    metadata = dict(pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=6, seq_len=len(rows[0][1]),
                    num_puzzle_identifiers=1, total_groups=len(rows), mean_puzzle_examples=1.0,
                    total_puzzles=len(rows), sets=['all'])
    return {'inputs': np.array(inputs, np.uint8), 'labels': np.array(labels, np.uint8),
            'puzzle_identifiers': np.zeros(count, np.int32), 'puzzle_indices': np.arange(count + 1, dtype=np.int32),
            'group_indices': np.array(groups, np.int32)}, metadata


def test_official_csvs_build_what_the_official_builder_writes(tmp_path):
    train_rows, test_rows = _maze_rows(5, 8, seed=1), _maze_rows(3, 8, seed=2)
    _write_csv(tmp_path / 'train.csv', train_rows)
    _write_csv(tmp_path / 'test.csv', test_rows)
    out = tmp_path / 'maze'
    build.build_from_files(str(out), str(tmp_path / 'train.csv'), str(tmp_path / 'test.csv'), num_aug=7)
    for split, rows, augment in (('train', train_rows, True), ('test', test_rows, False)):
        expected, metadata = _official_arrays(rows, augment)
        for name, array in expected.items():
            written = np.load(out / split / f'all__{name}.npy')
            assert written.dtype == array.dtype and np.array_equal(written, array), (split, name)
        assert json.loads((out / split / 'dataset.json').read_text()) == metadata
        ratings = np.load(out / split / 'all__ratings.npy')
        assert list(ratings[::8 if augment else 1]) == [r[3] for r in rows]
    assert json.loads((out / 'identifiers.json').read_text()) == ['<blank>']


def _broken(rows, case):
    question, answer = list(rows[1][1]), list(rows[1][2])
    path = [i for i, c in enumerate(answer) if c == 'o']
    if case == 'two starts':
        question[question.index(' ')] = 'S'
    elif case == 'broken path':
        answer[path[len(path) // 2]] = ' '
    elif case == 'path through a wall':
        answer[question.index('#')] = 'o'
    elif case == 'not square':
        question, answer = question[:-1], answer[:-1]
    elif case == 'bad character':
        question[0] = 'x'
    rows = [list(r) for r in rows]
    rows[1][1], rows[1][2] = ''.join(question), ''.join(answer)
    return rows


@pytest.mark.parametrize('case', ['two starts', 'broken path', 'path through a wall', 'not square', 'bad character'])
def test_a_bad_row_is_refused_with_file_line_and_nothing_is_written(tmp_path, case):
    rows = _broken(_maze_rows(3, 8, seed=3), case)
    _write_csv(tmp_path / 'train.csv', rows)
    _write_csv(tmp_path / 'test.csv', _maze_rows(1, 8, seed=4))
    with pytest.raises(DataError, match=r'train\.csv:3: '):
        build.build_from_files(str(tmp_path / 'out'), str(tmp_path / 'train.csv'), str(tmp_path / 'test.csv'))
    assert sorted(os.listdir(tmp_path)) == ['test.csv', 'train.csv']
    summary = build.build_from_files(str(tmp_path / 'out'), str(tmp_path / 'train.csv'), str(tmp_path / 'test.csv'),
                                     on_error='skip')
    assert 'train 2 x 1' in summary and 'skipped 1 bad rows, the first: ' in summary


def test_a_longer_than_shortest_label_is_refused(tmp_path):
    # An open 5x5 room: S top-left, G bottom-right; a detour that is a path but not a shortest one.
    question = 'S    ' + '     ' * 3 + '    G'
    detour = list(question)
    for cell in (1, 2, 3, 4, 9, 14, 13, 12, 17, 22, 23):
        detour[cell] = 'o'
    shortest = list(question)
    for cell in (1, 2, 3, 4, 9, 14, 19):
        shortest[cell] = 'o'
    _write_csv(tmp_path / 'train.csv', [['a', question, ''.join(shortest), 8], ['b', question, ''.join(detour), 12]])
    with pytest.raises(DataError, match=r'train\.csv:3: .*shortest'):
        build.read_mazes(str(tmp_path / 'train.csv'), build.Problems('fail'))


def test_generated_set_is_deterministic_and_valid_by_an_independent_search(tmp_path):
    build.build_generated(str(tmp_path / 'a'), 12, 4, size=8, seed=5, num_aug=3, progress=False)
    build.build_generated(str(tmp_path / 'b'), 12, 4, size=8, seed=5, num_aug=3, progress=False)
    for split in ('train', 'test'):
        for name in os.listdir(tmp_path / 'a' / split):
            a, b = ((tmp_path / d / split / name).read_bytes() for d in 'ab')
            assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest(), name
    train = load_split(tmp_path / 'a', 'train', difficulty=MAZE.difficulty)
    test = load_split(tmp_path / 'a', 'test', difficulty=MAZE.difficulty)
    assert train.num_groups == 12 and train.num_examples == 48 and test.num_examples == 4
    assert MAZE.check_metadata(train.metadata, train.path) is None
    for split in (train, test):
        for question, answer in zip(split.inputs, split.labels):
            assert grid.check_example(question, answer) is None
        assert (split.difficulty > maze_generate.default_min_path(8)).all()
    trained = {bytes(q) for q in np.asarray(train.inputs)}
    assert not any(bytes(q) in trained for q in np.asarray(test.inputs))


@pytest.mark.slow
def test_maze_runlocal_trains_evaluates_and_solves(tmp_path):
    config = load_config(os.path.join(REPO, 'configs/maze.py:runlocal'))
    config.update_from_flattened_dict({'train.total_steps': 6, 'train.eval_every_steps': 3})
    final = train_and_evaluate(config, str(tmp_path / 'run'))
    assert final['eval/count'] == 16 and 0.0 <= final['eval/exact_accuracy'] <= 1.0
    assert any(k.startswith('eval_by_difficulty/path_length_') for k in final)

    test = load_split(_generated_dir(config), 'test')
    maze = grid.decode(np.asarray(test.inputs[0]))
    unreachable = 'S#' + '#' * 4 + '#' * 24 + 'G' + ' ' * 5
    cmd = [sys.executable, '-m', 'trm_spmd.solve', f'--checkpoint={tmp_path / "run"}', f'--puzzle={maze}']
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert 'S' in result.stdout and 'G' in result.stdout and 'solution: ' in result.stdout
    assert 'read only' not in result.stderr   # orbax's notice on a directory solve does not write
    cmd[-1] = f'--puzzle={unreachable}'
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == 'error: --puzzle: goal is not reachable from the start'


def test_hub_source_downloads_through_a_stand_in_endpoint(tmp_path, stand_in_hub):
    _write_csv(tmp_path / 'train.csv', _maze_rows(3, 6, seed=6))
    _write_csv(tmp_path / 'test.csv', _maze_rows(2, 6, seed=7))
    hub = 'hf://sapientinc/maze-30x30-hard-1k'
    env = stand_in_hub({f'{hub}/{name}': (tmp_path / name).read_bytes() for name in ('train.csv', 'test.csv')})
    cmd = [sys.executable, '-m', 'trm_spmd.build', 'maze', f'--input={hub}/train.csv',
           f'--test_input={hub}/test.csv', f'--output_dir={tmp_path / "out"}']
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    build.build_from_files(str(tmp_path / 'local'), str(tmp_path / 'train.csv'), str(tmp_path / 'test.csv'))
    for split in ('train', 'test'):
        for name in os.listdir(tmp_path / 'local' / split):
            downloaded, local = (tmp_path / d / split / name for d in ('out', 'local'))
            assert downloaded.read_bytes() == local.read_bytes(), name
    cmd[4] = f'--input={hub}/missing.csv'
    cmd[-1] = f'--output_dir={tmp_path / "none"}'
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and not (tmp_path / 'none').exists()
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f'error: {hub}/missing.csv: could not download') and '--input=LOCAL_FILE' in last


def test_a_dataset_of_another_task_is_refused_in_one_line(tmp_path):
    from types import SimpleNamespace
    from trm_spmd.data.dataset import DatasetError
    from trm_spmd.train.data import open_dataset
    build.build_generated(str(tmp_path / 'maze'), 4, 2, size=6, progress=False)
    config = load_config(os.path.join(REPO, 'configs/baseline.py:runlocal'))
    config.data.generate, config.data.path = False, str(tmp_path / 'maze')
    with pytest.raises(DatasetError, match=r'not a sudoku dataset: seq_len 36 and vocab_size 6 are not '
                                           r"Sudoku's \(81, 11\); set --config.data.task"):
        open_dataset(config, SimpleNamespace(process_index=0, process_count=1))
    config.data.task = 'maze'
    assert open_dataset(config, SimpleNamespace(process_index=0, process_count=1)).seq_len == 36
