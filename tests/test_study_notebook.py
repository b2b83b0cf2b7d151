"""The study notebook and the failure gallery: every evaluation saves a sample of questions,
answers and predictions; trm_spmd.analysis turns it into records with the task's verdict,
draws them for Sudoku, mazes and ARC, prints them (`analysis failures`), and
benchmarks/study.ipynb runs top to bottom on a study built here, at CPU scale, through
nbclient and a kernel of this environment."""

import ast
import json
import os

import numpy as np
import pytest

from benchmarks import study_notebook
from trm_spmd import tasks
from trm_spmd.analysis import failures, gallery
from trm_spmd.analysis.__main__ import main
from trm_spmd.config import load_config
from trm_spmd.data.dataset import load_split
from trm_spmd.train.data import dataset_dir
from trm_spmd.train.loop import train_and_evaluate
from trm_spmd.train.samples import SampleKeeper, sample_rows

from conftest import REPO

NOTEBOOK = os.path.join(REPO, 'benchmarks', 'study.ipynb')
# The smallest run of each task family that ends with an evaluation (4 steps, 16-20 held-out rows).
FAMILIES = {'sudoku': 'configs/baseline.py:runlocal', 'maze': 'configs/maze.py:runlocal',
            'arc': 'configs/arc.py:arc1,runlocal'}


def family_config(task):
    config = load_config(os.path.join(REPO, FAMILIES[task]))
    config.update_from_flattened_dict({'backend': 'native', 'native.compile': 'none'})
    return config


@pytest.fixture(scope='module')
def fresh_study(tmp_path_factory):
    """A study of one run per task family, trained here: ROOT/<task>."""
    root = tmp_path_factory.mktemp('study')
    with pytest.MonkeyPatch.context() as patch:   # the session's dataset cache (conftest), set before tests run
        patch.setenv('TRM_SPMD_DATA', str(tmp_path_factory.getbasetemp() / 'datasets'))
        finals = {task: train_and_evaluate(family_config(task), str(root / task)) for task in FAMILIES}
    return root, finals


def test_sample_rows_are_evenly_spaced_bounded_and_cover_both_ends():
    assert list(sample_rows(10, 128)) == list(range(10))
    rows = sample_rows(1000, 5)
    assert list(rows) == [0, 250, 500, 749, 999]
    assert sample_rows(0, 8).size == 0 and sample_rows(50, 0).size == 0


def _valid_sudoku():
    """Tokens of a valid solved grid (digit d is token d + 1)."""
    return np.array([2 + ((r * 3 + r // 3 + c) % 9) for r in range(9) for c in range(9)])


def test_each_task_judges_a_prediction_against_its_answer():
    sudoku = tasks.get('sudoku')
    answer = _valid_sudoku()
    question = answer.copy()
    question[:40] = 1
    assert sudoku.judge(question, answer, answer) == (True, 'right')
    swapped = answer.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    correct, verdict = sudoku.judge(question, answer, swapped)
    assert not correct and verdict.startswith('2 of 81 cells wrong; invalid:')

    arc = tasks.get('arc')
    from trm_spmd.tasks.arc import grid
    question, answer = grid.to_tokens(np.zeros((3, 3), np.uint8), np.ones((3, 3), np.uint8))
    labels = np.where(answer == grid.PAD, -100, answer.astype(np.int16))
    assert arc.judge(question, labels, answer) == (True, 'right')
    _, small = grid.to_tokens(np.zeros((2, 2), np.uint8), np.ones((2, 2), np.uint8))
    assert arc.judge(question, labels, small) == (False, 'a 2x2 grid where the answer is 3x3')
    one_off = answer.copy()
    one_off[0] = grid.COLOUR0 + 5
    assert arc.judge(question, labels, one_off) == (False, '1 of 9 cells wrong')


def test_a_sample_written_to_a_bucket_reads_back_as_records_with_verdicts(capsys):
    fsspec = pytest.importorskip('fsspec')
    answers = np.stack([_valid_sudoku()] * 3)
    questions = answers.copy()
    questions[:, :45] = 1
    predictions = answers.copy()
    predictions[1, [0, 1]] = predictions[1, [1, 0]]     # two digits swapped: a rule broken
    predictions[2, 50] = 1                              # a cell left blank
    predictions = np.concatenate([predictions, np.zeros((1, 81), np.int64)])   # the padded last batch

    class Batches:   # EvalBatches' part a sample reads: the split's rows by index
        num_examples = 3

        def examples(self, rows):
            return {'inputs': questions[rows], 'labels': answers[rows], 'puzzle_identifiers': np.zeros(len(rows))}

    keeper = SampleKeeper(sample_rows(3, 128), global_batch=2)
    assert keeper.wants(0) and keeper.wants(1) and not keeper.wants(2)
    for batch in (0, 1):
        keeper.add(batch, predictions[2 * batch:2 * batch + 2], np.array([4.0, -4.0]))
    run = 'memory://trm-samples-test/run'
    keeper.write(f'{run}/eval/samples_7.npz', 7, 'sudoku', 8, Batches())
    try:
        [sample] = failures.load_samples(run)
        assert (sample.task, sample.step, sample.act_steps, sample.num_examples) == ('sudoku', 7, 8, 3)
        assert [(r.index, r.correct) for r in sample.records] == [(0, True), (1, False), (2, False)]
        assert sample.failures[0].verdict.startswith('2 of 81 cells wrong; invalid: ')
        assert sample.failures[1].verdict == '1 of 81 cells wrong; not a complete grid'
        assert [round(r.confidence, 3) for r in sample.records] == [0.982, 0.018, 0.982]
        assert main(['failures', run, '--limit=1']) == 0
        out = capsys.readouterr().out
        assert out.startswith('sudoku at step 7: 2 of 3 held-out examples wrong') and out.count('(halting') == 1
    finally:
        fsspec.filesystem('memory').rm('memory://trm-samples-test', recursive=True)


@pytest.mark.slow
@pytest.mark.parametrize('task', list(FAMILIES))
def test_an_evaluation_saves_its_sample_and_the_records_agree_with_its_metrics(fresh_study, task):
    root, finals = fresh_study
    [sample] = failures.load_samples(str(root / task))
    config = family_config(task)
    split = load_split(dataset_dir(config), 'test', mmap=False)
    assert (sample.task, sample.step, sample.num_examples) == (task, 4, split.num_examples)
    # The test split is smaller than eval.samples: the sample is all of it, so its failures are
    # exactly the evaluation's.
    assert [r.index for r in sample.records] == list(range(split.num_examples))
    wrong = round((1 - finals[task]['eval/exact_accuracy']) * split.num_examples)
    assert len(sample.failures) == wrong > 0
    for record in sample.records:
        assert np.array_equal(record.question, split.inputs[record.index])
        assert record.prediction.shape == record.question.shape and 0 <= record.confidence <= 1
        assert record.correct == (record.verdict == 'right')


@pytest.mark.slow
def test_the_gallery_draws_the_failures_of_every_task_family(fresh_study):
    root, _ = fresh_study
    for task, panels_per_failure in (('sudoku', 1), ('maze', 1), ('arc', 3)):
        [sample] = failures.load_samples(str(root / task))
        fig = gallery.figure(sample, limit=4)
        drawn = [ax for ax in fig.axes if ax.axison]
        assert len(drawn) == panels_per_failure * min(4, len(sample.failures)), task
        assert task in fig._suptitle.get_text()
        assert gallery.png(fig)[:8] == b'\x89PNG\r\n\x1a\n'


@pytest.mark.slow
def test_the_failures_command_prints_and_draws(fresh_study, tmp_path, capsys):
    root, _ = fresh_study
    assert main(['failures', str(root / 'maze'), '--limit=2', f'--out={tmp_path}']) == 0
    out = capsys.readouterr().out
    assert out.startswith('maze at step 4: ') and out.count('(halting confidence ') == 2
    assert os.listdir(tmp_path) == ['failures_maze_4.png']
    assert main(['failures', str(root / 'maze'), '--step=3']) == 2
    assert capsys.readouterr().err == 'error: ' + f'{root / "maze"} has no evaluation sample of step 3; it has steps 4\n'


def test_the_committed_notebook_has_no_outputs_and_only_the_public_api():
    with open(NOTEBOOK) as f:
        notebook = json.load(f)
    code = [c for c in notebook['cells'] if c['cell_type'] == 'code']
    assert code and all(c['outputs'] == [] and c['execution_count'] is None for c in code)
    for cell in code:
        for node in ast.walk(ast.parse(''.join(cell['source']))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert all(n in ('os', 'trm_spmd.analysis') for n in names), names


def _files(root):
    return {(d, name, os.stat(os.path.join(d, name)).st_mtime_ns) for d, _, names in os.walk(root) for name in names}


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom_on_a_fresh_study(fresh_study, tmp_path):
    root, _ = fresh_study
    before = _files(root)
    notebook = study_notebook.execute(str(root))
    assert study_notebook.errors(notebook) == []
    assert _files(root) == before     # reading a study never writes to it
    outputs = [o for c in notebook.cells if c.cell_type == 'code' for o in c.outputs]
    markdown = ''.join(o.data.get('text/markdown', '') for o in outputs if 'data' in o)
    assert all(f'| {task} ' in markdown for task in FAMILIES)    # the comparison table, a row per run
    names = [name for c in notebook.cells if c.cell_type == 'code' for _, name in study_notebook.pictures(c)]
    for plot in ('learning_curves', 'accuracy_vs_compute', 'per_task', 'difficulty', 'act_steps_used'):
        assert f'{plot}.png' in names
    # The last cell: one gallery per task family, each of its best (here: only) run.
    assert [name for _, name in study_notebook.pictures(notebook.cells[-1])] == [
        f'failures_{task}_{task}_4.png' for task in sorted(FAMILIES)]
    text = study_notebook.to_markdown(notebook, tmp_path)
    assert '![failures_arc_arc_4.png](failures_arc_arc_4.png)' in text and (tmp_path / 'failures_arc_arc_4.png').exists()
