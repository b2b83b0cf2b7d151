"""A TRM that learns to solve Sudoku on a laptop CPU, with no data to download.

  python -m trm_spmd.main --config=configs/quickstart.py --workdir=runs/quickstart

The first run generates 5,000 training and 500 held-out puzzles (30-45 blanks, unique
solutions) with the built-in generator and caches them; every run trains through the same
SPMD code path as a TPU pod, on the CPU's devices, then evaluates on the held-out puzzles.

Small model (hidden 128, token-mixing MLP, 2 layers, T=2, n=4, 8 ACT steps, no puzzle
embedding), AdamW lr 1e-3, batch 64, fresh symmetry augmentation for every row.
"""

from trm_spmd.config import family_config

FIELDS = {
    'data.generate': True, 'data.generate_train': 5000, 'data.generate_test': 500, 'data.generate_blanks': (30, 45),
    'data.augment': True, 'data.global_batch_size': 64, 'eval.global_batch_size': 128,
    'model.hidden_size': 128, 'model.expansion': 2.0, 'model.H_cycles': 2, 'model.L_cycles': 4,
    'model.puzzle_emb_ndim': 0, 'model.puzzle_emb_len': 0, 'model.forward_dtype': 'float32',
    'act.halt_max_steps': 8,
    'optim.name': 'adamw', 'optim.lr': 1e-3, 'optim.weight_decay': 0.1, 'optim.warmup_steps': 100,
    'optim.lr_min_ratio': 0.1,
    'train.total_steps': 1000, 'train.eval_every_steps': 200, 'train.log_every_steps': 50,
    'checkpoint.every_steps': 250, 'ema.decay': 0.99,
}


def get_config(arg=None):
    return family_config('quickstart', {'default': FIELDS}, arg, 'default', data_path='')


def sweep():
    return ['default']
