"""URM against TRM at CPU scale: the quickstart's Sudoku with each family's network at the
same parameter budget, trained the same steps.

  python -m trm_spmd.sweep --sweep=configs/cpu_urm.py --study_root=runs/cpu_urm \
      --report=benchmarks/results/cpu_urm

Every run is the quickstart's recipe (configs/quickstart.py: generated 30-45-blank Sudoku,
5,000 for training and 500 held out, batch 64 with fresh symmetry augmentation of every
row, 8 ACT steps, AdamW at a constant 1e-3 after 100 warm-up steps, no puzzle embedding,
no EMA), hidden 128, 2 layers, expansion 2, trained for exactly 1,000 steps with no early
stop and evaluated every 250 on the 500 held-out puzzles:

- trm: the quickstart itself, TRM with the token-mixing MLP, T=1, n=2 (3 network calls an
  ACT step, all back-propagated); 0.32M parameters.
- trm_attention: the same TRM with self-attention (8 heads x 16, RoPE) for the token MLP,
  the TRM architecture the URM authors compare with; 0.33M parameters.
- urm: URM (model.family 'urm'): 2 blocks of attention (8 heads x 16, RoPE) + ConvSwiGLU,
  H_cycles 2 x L_cycles 3 = 6 loops an ACT step, the first 3 without gradients (the public
  runs' 2 x 6 at half the depth, keeping its truncated backpropagation); 0.33M parameters.
  A step costs 6 + 2 x 3 = 12 loop-equivalents against TRM's 3 + 2 x 3 = 9 calls: the
  table's PFLOP column says what each run computed.
- urm_rules_mask: URM with attention restricted to Sudoku's constraint graph
  (model.attention_mask 'sudoku': a cell attends to its row, column and box only), which
  tells whether URM's recursion learns once attention need not discover the geometry
  (configs/cpu_study.py:sparse_attention is the same for TRM).

Measured on a 2-core CPU: benchmarks/results/cpu_urm/README.md.
"""

import os

from trm_spmd.config import family_config
from trm_spmd.config.files import load_module

QUICKSTART_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'quickstart.py')
STUDY = {'train.total_steps': 1000, 'train.eval_every_steps': 250, 'train.stop_at_exact_accuracy': 0.0,
         'checkpoint.every_steps': 500}
ATTENTION = {'model.mlp_t': False, 'model.pos_encodings': 'rope'}
URM = {**ATTENTION, 'model.family': 'urm', 'model.H_cycles': 2, 'model.L_cycles': 3}

VARIANTS = {
    'trm': {},
    'trm_attention': ATTENTION,
    'urm': URM,
    'urm_rules_mask': {**URM, 'model.attention_mask': 'sudoku'},
}


def get_config(arg=None):
    quickstart = load_module(QUICKSTART_FILE).FIELDS
    return family_config('cpu_urm', {k: {**quickstart, **STUDY, **v} for k, v in VARIANTS.items()}, arg, 'trm',
                         data_path='')


def sweep():
    return list(VARIANTS)
