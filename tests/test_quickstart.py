"""The newcomer's path: the quickstart learns (reduced here), and solve.py reads its run."""

import subprocess
import sys

import numpy as np
import pytest

from trm_spmd.config import load_config
from trm_spmd.solve import build_model, load_run, report, solve, task_of
from trm_spmd.tasks.sudoku import TASK as SUDOKU
from trm_spmd.train.loop import train_and_evaluate

from conftest import REPO
from test_train import read_metrics, train_lines


def reduced_quickstart():
    """The quickstart on the newcomer's path (native torch on the CPU), shrunk to a minute."""
    config = load_config(f'{REPO}/configs/quickstart.py')
    config.update_from_flattened_dict({
        'backend': 'native', 'native.compile': 'none', 'data.generate_train': 300, 'data.generate_test': 64,
        'train.total_steps': 40, 'train.log_every_steps': 10, 'train.eval_every_steps': 40,
        'optim.warmup_steps': 10, 'act.halt_max_steps': 4})
    return config


@pytest.mark.slow
def test_reduced_quickstart_learns_above_chance(tmp_path):
    workdir = tmp_path / 'quickstart'
    final = train_and_evaluate(reduced_quickstart(), str(workdir))
    accuracy = [r['train/accuracy'] for r in train_lines(read_metrics(workdir))]
    # Chance is 1/9 per cell; in 40 steps the model starts to keep the givens (~half the cells).
    assert accuracy[0] < 0.14 and accuracy[-1] > accuracy[0] + 0.05, accuracy
    assert final['eval/count'] == 64

    config, state = load_run(str(workdir))
    assert task_of(config) == (SUDOKU, None)
    model = build_model(config, state, 81)
    assert model.config.hidden_size == 128 and model.config.halt_max_steps == 4
    puzzles = np.ones((2, 81), np.int32)   # two empty grids (token 1: blank)
    results = solve(model, puzzles)
    assert len(results) == 2
    tokens, steps, confidence = results[0]
    assert tokens.shape == (81,) and 1 <= steps <= 4 and 0.0 <= confidence <= 1.0
    text = report(SUDOKU, puzzles[0], tokens, steps, confidence, 4)
    assert f'ACT steps: {steps} of 4' in text and 'solution:' in text

    # Every puzzle is checked before the model sees it; with --file the good lines are still solved.
    clash = '55' + '.' * 79
    (tmp_path / 'puzzles.txt').write_text('.' * 81 + '\n' + clash + '\n')
    cmd = [sys.executable, '-m', 'trm_spmd.solve', f'--checkpoint={workdir}']
    result = subprocess.run(cmd + [f'--puzzle={clash}'], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == 'error: --puzzle: the givens clash: digit 5 appears twice in row 1'
    result = subprocess.run(cmd + [f'--file={tmp_path / "puzzles.txt"}'], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2 and result.stdout.count('ACT steps:') == 1
    assert f'error: {tmp_path / "puzzles.txt"}:2: the givens clash' in result.stderr
    assert 'warning: ' in result.stderr and 'more than one solution' in result.stderr   # the empty grid


def test_verdict_names_what_is_wrong():
    solution = np.array([int(c) for c in
                         '534678912672195348198342567859761423426853791713924856961537284287419635345286179'], np.uint8)
    puzzle = solution.copy()
    puzzle[::2] = 0
    verdict = lambda p, s: SUDOKU.verdict(p + 1, s + 1)[1]   # digits -> tokens
    assert verdict(puzzle, solution) == 'valid'
    broken = solution.copy()
    broken[1] = broken[0]
    assert verdict(puzzle, broken).startswith('invalid: ')
    assert verdict(puzzle, np.zeros(81, np.uint8)) == 'not a complete grid'


@pytest.mark.slow
def test_solve_cli_errors_are_one_line(tmp_path):
    cmd = [sys.executable, '-m', 'trm_spmd.solve', f'--checkpoint={tmp_path}', '--puzzle=' + '.' * 81]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert 'is neither a run directory' in result.stderr.strip().splitlines()[-1]
