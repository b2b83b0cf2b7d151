"""The dataset builder: valid rows, official layout, determinism, and bad input that
stops with FILE:LINE and leaves no output behind."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from trm_spmd.data import dataset, load_split
from trm_spmd.tasks import sudoku as sudoku_task
from trm_spmd.tasks.sudoku import build as build_sudoku, generate
from trm_spmd.tasks.sudoku import grid as sudoku
from trm_spmd.data.errors import DataError, PuzzleError

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def hardest(shared_data):
    """(puzzles, solutions, ratings) files of forum_hardest_1106 (375 puzzles)."""
    return tuple(os.path.join(shared_data, f'forum_hardest_1106{suffix}.txt')
                 for suffix in ('', '.solutions', '.tdoku_rating'))


def _build(output_dir, hardest, **kwargs):
    args = dict(input_file=hardest[0], solutions_file=hardest[1], subsample=50, num_aug=10, seed=0, progress=False)
    args.update(kwargs)
    return build_sudoku.build_from_files(str(output_dir), **args)


@pytest.fixture
def built(tmp_path, hardest):
    """50 puzzles of forum_hardest_1106 x (1 + 10 augmentations); 38 held out."""
    _build(tmp_path / 'built', hardest)
    return tmp_path / 'built'


def _lines(path):
    return pathlib.Path(path).read_text().split()


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob('*')) if p.is_file()}


def test_every_row_is_a_valid_pair_and_groups_are_variants(built, hardest):
    puzzles, solutions, ratings = (_lines(path) for path in hardest)
    ratings = [int(x) for x in ratings]
    for split in ('train', 'test'):
        data = load_split(built, split, difficulty=sudoku_task.TASK.difficulty)
        inputs, labels = np.asarray(data.inputs), np.asarray(data.labels)
        assert sudoku.is_solution_grid(labels - 1).all()
        givens = inputs != sudoku.BLANK_TOKEN
        assert ((inputs >= 1) & (inputs <= 10)).all() and (inputs[givens] == labels[givens]).all()
        for g in range(data.num_groups):
            rows = slice(data.group_indices[g], data.group_indices[g + 1])
            original = sudoku.format_grid(inputs[data.group_indices[g]] - 1)
            line = puzzles.index(original)      # the first of a group is the file's puzzle
            assert sudoku.format_grid(labels[data.group_indices[g]] - 1) == solutions[line]
            assert (data.ratings[rows] == ratings[line]).all()
            assert len(set(data.difficulty[rows].tolist())) == 1
            assert len({x.tobytes() for x in inputs[rows]}) == rows.stop - rows.start


def test_official_layout(built):
    assert json.loads((built / 'identifiers.json').read_text()) == ['<blank>']
    for split, groups, group_size in (('train', 50, 11), ('test', 38, 1)):
        meta = json.loads((built / split / 'dataset.json').read_text())
        assert meta == dict(pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=11, seq_len=81,
                            num_puzzle_identifiers=1, total_groups=groups, mean_puzzle_examples=1,
                            total_puzzles=groups, sets=['all'])
        count = groups * group_size
        arrays = {p.name: np.load(p) for p in (built / split).glob('*.npy')}
        assert sorted(arrays) == sorted(f'all__{n}.npy' for n in (
            'inputs', 'labels', 'puzzle_identifiers', 'puzzle_indices', 'group_indices', 'ratings'))
        for name, dtype, shape in (('inputs', np.uint8, (count, 81)), ('labels', np.uint8, (count, 81)),
                                   ('puzzle_identifiers', np.int32, (count,)), ('ratings', np.int32, (count,))):
            assert arrays[f'all__{name}.npy'].dtype == dtype and arrays[f'all__{name}.npy'].shape == shape
        assert not arrays['all__puzzle_identifiers.npy'].any()
        assert (arrays['all__puzzle_indices.npy'] == np.arange(count + 1)).all()
        assert (arrays['all__group_indices.npy'] == np.arange(0, count + 1, group_size)).all()
        assert arrays['all__group_indices.npy'].dtype == arrays['all__puzzle_indices.npy'].dtype == np.int32


def test_split_is_by_puzzle_before_augmentation(built):
    train, test = load_split(built, 'train'), load_split(built, 'test')
    originals = {np.asarray(train.inputs[i]).tobytes() for i in train.group_indices[:-1]}
    assert not originals & {x.tobytes() for x in np.asarray(test.inputs)}


def test_builds_are_byte_identical_and_seeded(built, hardest, tmp_path):
    _build(tmp_path / 'again', hardest)
    assert _files(tmp_path / 'again') == _files(built)
    _build(tmp_path / 'seed1', hardest, seed=1)
    assert _files(tmp_path / 'seed1') != _files(built)


def test_solver_fills_in_missing_solutions(tmp_path, shared_data):
    norvig = os.path.join(shared_data, 'norvig_top95.txt')
    head = tmp_path / 'head.txt'
    head.write_text('\n'.join(_lines(norvig)[:12]) + '\n')
    summary = build_sudoku.build_from_files(str(tmp_path / 'out'), str(head), eval_fraction=0.25,
                                            progress=False)
    assert 'train 9 puzzles' in summary and 'test 3 examples' in summary
    expected = dict(zip(_lines(norvig), _lines(os.path.join(shared_data, 'norvig_top95.solutions.txt'))))
    for split in ('train', 'test'):
        data = load_split(tmp_path / 'out', split)
        for x, y in zip(np.asarray(data.inputs), np.asarray(data.labels)):
            assert sudoku.format_grid(y - 1) == expected[sudoku.format_grid(x - 1)]
        assert (data.ratings == -1).all()     # head.txt has no rating file beside it


def test_csv_input_and_min_rating(tmp_path, hardest):
    puzzles, solutions, ratings = (_lines(path)[:40] for path in hardest)
    rows = ['source,question,answer,rating']
    rows += [f'forum,{p},{s},{r}' for p, s, r in zip(puzzles, solutions, ratings)]
    (tmp_path / 'train.csv').write_text('\n'.join(rows[:31]) + '\n')
    (tmp_path / 'test.csv').write_text('\n'.join(rows[:1] + rows[31:]) + '\n')
    build_sudoku.build_from_files(str(tmp_path / 'out'), str(tmp_path / 'train.csv'),
                                  test_file=str(tmp_path / 'test.csv'), min_rating=40, progress=False)
    train, test = load_split(tmp_path / 'out', 'train'), load_split(tmp_path / 'out', 'test')
    assert train.num_examples == sum(int(r) >= 40 for r in ratings[:30])
    assert test.num_examples == sum(int(r) >= 40 for r in ratings[30:])
    assert (train.ratings >= 40).all() and (test.ratings >= 40).all()


def _bad_copy(tmp_path, shared_data, line, change, with_solutions=True):
    """The first 12 puzzles of norvig_top95 with line `line` (1-based) changed by
    change(puzzle, solution) -> (puzzle, solution); returns (puzzles file, solutions file)."""
    puzzles, solutions = (_lines(os.path.join(shared_data, f'norvig_top95{suffix}.txt'))[:12]
                          for suffix in ('', '.solutions'))
    puzzles[line - 1], solutions[line - 1] = change(puzzles[line - 1], solutions[line - 1])
    (tmp_path / 'p.txt').write_text('\n'.join(puzzles) + '\n')
    if not with_solutions:
        return str(tmp_path / 'p.txt'), None
    (tmp_path / 's.txt').write_text('\n'.join(solutions) + '\n')
    return str(tmp_path / 'p.txt'), str(tmp_path / 's.txt')


def _contradict(puzzle, solution):
    """Gives the first blank cell a digit other than the solution's."""
    cell = puzzle.index('.')
    return puzzle[:cell] + str(int(solution[cell]) % 9 + 1) + puzzle[cell + 1:], solution


# case: (change, solutions file given, expected message)
BAD_ROWS = {
    'short line': (lambda p, s: (p[:79], s), True, 'p.txt:5: puzzle has 79 characters, expected 81'),
    'bad character': (lambda p, s: ('x' + p[1:], s), True, "p.txt:5: puzzle character 'x' at row 1 column 1"),
    'wrong solution': (lambda p, s: (p, s[1:] + s[0]), True, 's.txt:5: solution is not a valid grid'),
    'contradicts givens': (_contradict, True, 's.txt:5: solution has'),
    'several solutions': (lambda p, s: ('.' * 81, s), False, 'p.txt:5: puzzle has more than one solution'),
    'no solution': (lambda p, s: ('11' + '.' * 79, s), False, 'p.txt:5: puzzle has no solution'),
}


@pytest.mark.parametrize('case', sorted(BAD_ROWS))
def test_bad_row_fails_or_is_skipped(tmp_path, shared_data, case):
    change, with_solutions, expected = BAD_ROWS[case]
    puzzles, solutions = _bad_copy(tmp_path, shared_data, 5, change, with_solutions)
    inputs = sorted(os.listdir(tmp_path))
    out = tmp_path / 'out'
    with pytest.raises(PuzzleError) as error:
        build_sudoku.build_from_files(str(out), puzzles, solutions, eval_fraction=0.2, progress=False)
    assert str(error.value).startswith(str(tmp_path / expected))
    assert sorted(os.listdir(tmp_path)) == inputs     # no output, no partial directory
    summary = build_sudoku.build_from_files(str(out), puzzles, solutions, eval_fraction=0.2,
                                            on_error='skip', progress=False)
    assert f'skipped 1 bad rows, the first: {error.value}' in summary
    kept = load_split(out, 'train').num_examples + load_split(out, 'test').num_examples
    assert kept == 11


@pytest.mark.parametrize('on_error', ['fail', 'skip'])
def test_missing_and_empty_input_files(tmp_path, on_error):
    (tmp_path / 'empty.txt').write_text('\n')
    for name, reason in (('missing.txt', 'file not found'), ('empty.txt', 'file is empty')):
        with pytest.raises(DataError, match=f'{name}: {reason}'):
            build_sudoku.build_from_files(str(tmp_path / 'out'), str(tmp_path / name), on_error=on_error,
                                          progress=False)
        assert sorted(os.listdir(tmp_path)) == ['empty.txt']


def test_failed_write_leaves_nothing(tmp_path, hardest, monkeypatch):
    calls = []

    def failing_save(path, array):
        calls.append(path)
        if len(calls) == 3:
            raise OSError('disk full')
        np.lib.format.write_array(open(path, 'wb'), np.asarray(array))

    monkeypatch.setattr(dataset.np, 'save', failing_save)
    with pytest.raises(OSError, match='disk full'):
        _build(tmp_path / 'out', hardest, subsample=5, num_aug=1)
    assert os.listdir(tmp_path) == []


def test_concurrent_identical_build_is_accepted(tmp_path, monkeypatch):
    rename = os.rename

    def rival_finishes_first(src, dst):
        monkeypatch.setattr(os, 'rename', rename)
        build_sudoku.build_generated(dst, 6, 2, (30, 35), seed=0, progress=False)
        rename(src, dst)

    monkeypatch.setattr(os, 'rename', rival_finishes_first)
    build_sudoku.build_generated(tmp_path / 'data', 6, 2, (30, 35), seed=0, progress=False)
    assert os.listdir(tmp_path) == ['data'] and load_split(tmp_path / 'data', 'train').num_groups == 6

    def rival_differs(src, dst):
        monkeypatch.setattr(os, 'rename', rename)
        build_sudoku.build_generated(dst, 6, 2, (30, 35), seed=1, progress=False)
        rename(src, dst)

    monkeypatch.setattr(os, 'rename', rival_differs)
    with pytest.raises(DataError, match='appeared during the build with other contents'):
        build_sudoku.build_generated(tmp_path / 'other', 6, 2, (30, 35), seed=0, progress=False)
    assert sorted(os.listdir(tmp_path)) == ['data', 'other']


def test_existing_output_dir_is_refused(built, hardest):
    with pytest.raises(DataError, match='already exists'):
        _build(built, hardest)


def _cli(*args, task=('sudoku',)):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, '-m', 'trm_spmd.build', *task, *args],
                          capture_output=True, text=True, env=env, cwd=REPO)


def test_the_build_command_names_the_tasks_when_it_is_given_none_or_another():
    for task, given in (((), 'no task given'), (('sudok',), "'sudok' is not a task")):
        result = _cli('--output_dir=x', task=task)
        assert result.returncode == 2 and result.stdout == ''
        assert result.stderr.splitlines() == [f'error: {given}; usage: python -m trm_spmd.build TASK [flags], TASK '
                                              f'one of sudoku, maze, arc (then --help lists its flags)']
    result = _cli('--help', task=())
    assert result.returncode == 0 and 'python -m trm_spmd.build TASK --help' in result.stdout
    result = _cli('--help', task=('maze',))
    assert 'Builds a Maze-Hard dataset' in result.stdout and '--min_path' in result.stdout


def test_cli_reports_one_line_without_traceback(tmp_path, shared_data):
    puzzles, solutions = _bad_copy(tmp_path, shared_data, 7, lambda p, s: (p[:80], s))
    result = _cli(f'--input={puzzles}', f'--solutions={solutions}', f'--output_dir={tmp_path / "out"}')
    assert result.returncode == 2
    assert result.stderr.strip() == f'error: {puzzles}:7: puzzle has 80 characters, expected 81'
    assert not (tmp_path / 'out').exists()
    result = _cli(f'--input={puzzles}', f'--solutions={solutions}', f'--output_dir={tmp_path / "out"}',
                  '--on_error=skip', '--num_aug=2')
    assert result.returncode == 0, result.stderr
    assert 'train 10 puzzles x 3 = 30 examples, test 1 examples; skipped 1 bad rows' in result.stdout


def test_cli_generate(tmp_path):
    result = _cli('--generate=20', '--test_generate=4', '--blanks=40:45', '--num_aug=1',
                  f'--output_dir={tmp_path / "gen"}')
    assert result.returncode == 0, result.stderr
    train, test = (load_split(tmp_path / 'gen', s, difficulty=sudoku_task.TASK.difficulty) for s in ('train', 'test'))
    assert (train.num_groups, train.num_examples, test.num_examples) == (20, 40, 4)
    assert ((train.difficulty >= 40) & (train.difficulty <= 45)).all()
    assert sudoku.is_solution_grid(np.asarray(test.labels) - 1).all()
    build_sudoku.build_generated(tmp_path / 'again', 20, 4, (40, 45), 0, num_aug=1, progress=False)
    assert _files(tmp_path / 'again') == _files(tmp_path / 'gen')


def test_hub_inputs_build_as_the_local_files_do(tmp_path, stand_in_hub):
    rows = ['source,question,answer,rating']
    for i in range(12):
        puzzle, solution = generate.generate(np.random.default_rng([3, i]), (30, 40))
        rows.append(f'gen,{sudoku.format_grid(puzzle)},{sudoku.format_grid(solution)},{i}')
    (tmp_path / 'train.csv').write_text('\n'.join(rows[:9]) + '\n')
    (tmp_path / 'test.csv').write_text('\n'.join(rows[:1] + rows[9:]) + '\n')
    hub = 'hf://sapientinc/sudoku-extreme'
    env = stand_in_hub({f'{hub}/{name}': (tmp_path / name).read_bytes() for name in ('train.csv', 'test.csv')})
    result = subprocess.run([sys.executable, '-m', 'trm_spmd.build', 'sudoku', f'--input={hub}/train.csv',
                             f'--test_input={hub}/test.csv', '--num_aug=2', f'--output_dir={tmp_path / "hub"}'],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    build_sudoku.build_from_files(str(tmp_path / 'local'), str(tmp_path / 'train.csv'),
                                  test_file=str(tmp_path / 'test.csv'), num_aug=2, progress=False)
    assert _files(tmp_path / 'hub') == _files(tmp_path / 'local')


def test_a_hub_that_does_not_answer_is_one_retry_line_then_the_error(tmp_path):
    import socket
    with socket.socket() as s:   # a port nothing listens on: every try is refused
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    hub = 'hf://sapientinc/sudoku-extreme'
    # huggingface_hub's five retries wait 23 s in all; the waits are skipped here, not the retries.
    build = ('import runpy, sys, time; time.sleep = lambda seconds: None; sys.argv[:1] = ["build", "sudoku"]; '
             'runpy.run_module("trm_spmd.build", run_name="__main__")')
    env = dict(os.environ, HF_ENDPOINT=f'http://127.0.0.1:{port}', HF_HOME=str(tmp_path / 'hf'),
               HF_HUB_DISABLE_TELEMETRY='1')
    result = subprocess.run([sys.executable, '-c', build, f'--input={hub}/train.csv',
                             f'--output_dir={tmp_path / "out"}'], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and not (tmp_path / 'out').exists()
    assert result.stderr.splitlines() == [
        f'warning: {hub}/train.csv: the Hugging Face Hub did not answer ([Errno 111] Connection refused); '
        f'retrying for about 25 s',
        f'error: {hub}/train.csv: could not download from the Hugging Face Hub ([Errno 111] Connection refused); '
        f'download train.csv on a machine that reaches the Hub and pass --input=LOCAL_FILE']
