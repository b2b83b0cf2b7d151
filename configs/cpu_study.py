"""A mini-study at CPU scale: the paper's questions asked of the quickstart's model.

  python -m trm_spmd.sweep --sweep=configs/cpu_study.py --study_root=runs/cpu_study \
      --report=benchmarks/results/cpu_study

Every run is the quickstart (configs/quickstart.py: generated 30-45-blank puzzles, 500
held out, hidden 128, token-mixing MLP, batch 64, constant lr 1e-3, no EMA) at the
recursion T=2, n=4 (the quickstart itself takes t1_n2, the fastest to 90% on a CPU),
trained for exactly 500 steps (32,000 augmented examples) with no early stop, evaluated at
steps 250 and 500, so accuracies compare at equal training. What each run changes:

- baseline: nothing; at the end its exact accuracy is also measured after 1, 2, 4, 8, 16
  and 32 ACT steps (it trains with 8): test-time recursion.
- t1_n2, t2_n2, t3_n6: the recursion depth, from cheap to the paper's setting (per step a
  run makes T*(n+1) network calls and back-propagates through n+1 of them).
- ema: weight EMA 0.99, evaluated with the averaged weights (the paper's runs use 0.999,
  which would average over more steps than this run has).
- attention: self-attention (8 heads x 16, RoPE) instead of the token-mixing MLP.
- sparse_attention: attention restricted to Sudoku's constraint graph (model.attention_mask
  'sudoku': a cell attends to its row, column and 3x3 box only), otherwise attention's run.

Measured on a 2-core CPU: benchmarks/results/cpu_study/README.md.
"""

import os

from trm_spmd.config import family_config
from trm_spmd.config.files import load_module

QUICKSTART_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'quickstart.py')
STUDY = {'model.H_cycles': 2, 'model.L_cycles': 4, 'train.total_steps': 500, 'train.eval_every_steps': 250,
         'train.stop_at_exact_accuracy': 0.0, 'checkpoint.every_steps': 500}

VARIANTS = {
    'baseline': {'eval.report_act_steps': (1, 2, 4, 8, 16, 32)},
    't1_n2': {'model.H_cycles': 1, 'model.L_cycles': 2},
    't2_n2': {'model.H_cycles': 2, 'model.L_cycles': 2},
    't3_n6': {'model.H_cycles': 3, 'model.L_cycles': 6},
    'ema': {'ema.enabled': True, 'ema.decay': 0.99},
    'attention': {'model.mlp_t': False, 'model.pos_encodings': 'rope'},
    'sparse_attention': {'model.mlp_t': False, 'model.pos_encodings': 'rope', 'model.attention_mask': 'sudoku'},
}


def get_config(arg=None):
    quickstart = load_module(QUICKSTART_FILE).FIELDS
    return family_config('cpu_study', {k: {**quickstart, **STUDY, **v} for k, v in VARIANTS.items()}, arg,
                         'baseline', data_path='')


def sweep():
    return list(VARIANTS)
