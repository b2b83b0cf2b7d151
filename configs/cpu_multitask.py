"""Multi-task learning at CPU scale: one model on Sudoku and small mazes at once, against
each task alone at equal steps.

  python -m trm_spmd.sweep --sweep=configs/cpu_multitask.py --study_root=runs/cpu_multitask \
      --report=benchmarks/results/cpu_multitask

Every run is the quickstart's recipe (configs/quickstart.py: hidden 128, token-mixing MLP,
T=1, n=2, 8 ACT steps, AdamW at a constant 1e-3, fresh symmetry augmentation of every row,
no EMA), trained for exactly 1,000 steps with no early stop and evaluated every 250 on the
task's 500 held-out puzzles:

- sudoku: the quickstart's generated 30-45-blank Sudoku, 64 rows a step.
- maze: 6x6 mazes from the built-in generator (shortest paths over 4 moves), 64 rows a step.
- sudoku_maze: both at once (data.mixture), 64 Sudoku + 64 maze rows a step, so each task
  sees exactly the rows it sees alone, and the run costs what the two alone cost together.
  One vocabulary (Sudoku 1-10, maze 11-15), the maze's 36 cells padded to Sudoku's 81:
  27.8% of its tokens are padding.

Measured on a 2-core CPU: benchmarks/results/cpu_multitask/README.md.
"""

import os

from trm_spmd.config import family_config
from trm_spmd.config.files import load_module

QUICKSTART_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'quickstart.py')
STUDY = {'train.total_steps': 1000, 'train.eval_every_steps': 250, 'train.stop_at_exact_accuracy': 0.0,
         'checkpoint.every_steps': 500, 'data.generate_size': 6}

VARIANTS = {
    'sudoku': {},
    'maze': {'data.task': 'maze'},
    'sudoku_maze': {'data.mixture': ('sudoku', 'maze'), 'data.global_batch_size': 128},
}


def get_config(arg=None):
    quickstart = load_module(QUICKSTART_FILE).FIELDS
    return family_config('cpu_multitask', {k: {**quickstart, **STUDY, **v} for k, v in VARIANTS.items()}, arg,
                         'sudoku', data_path='')


def sweep():
    return list(VARIANTS)
