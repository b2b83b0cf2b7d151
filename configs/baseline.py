"""The paper's Sudoku-Extreme run (TRM, MLP variant): 87.4% exact accuracy.

  python -m trm_spmd.main --config=configs/baseline.py --workdir=DIR \
      --config.data.path=data/sudoku-extreme-1k-aug-1000
  python -m trm_spmd.main --config=configs/baseline.py:runlocal --workdir=/tmp/trm_local

Settings (TRM_SPEC.md): global batch 768, AdamATan2 lr 1e-4 wd 1.0 (betas 0.9/0.95),
puzzle embedding SignSGD lr 1e-4 wd 1.0, warmup 2000 steps then constant, EMA 0.999,
T=3 (H_cycles), n=6 (L_cycles), 2 layers, hidden 512, token-mixing MLP, no positional
encoding, 16 ACT steps, 50,000 epochs over 1,000 puzzles x 1,001 augmentations,
evaluation every 5,000 epochs on the whole test set.
"""

from trm_spmd.config import family_config


def get_config(arg=None):
    return family_config('baseline', {'e1_1_baseline': {}}, arg, 'e1_1_baseline')


def sweep():
    return ['e1_1_baseline']
