"""A TRM that learns to solve Sudoku on a laptop CPU, with no data to download.

  python -m trm_spmd.main --config=configs/quickstart.py --workdir=runs/quickstart

The first run generates 5,000 training and 500 held-out puzzles (30-45 blanks, unique
solutions) with the built-in generator and caches them; every run trains through the same
SPMD code path as a TPU pod, on the CPU's devices, then evaluates on the held-out puzzles.

Small model (hidden 128, token-mixing MLP, 2 layers, T=2, n=4, 8 ACT steps, no puzzle
embedding), AdamW lr 1e-3, batch 64, fresh symmetry augmentation for every row.
"""

from trm_spmd.config import apply_runlocal, default_config, parse_arg


def get_config(arg=None):
    arg = parse_arg(arg, variant='default', runlocal=False)
    c = default_config()
    c.name = 'quickstart'
    c.variant = arg.variant
    c.data.generate = True
    c.data.generate_train = 5000
    c.data.generate_test = 500
    c.data.generate_blanks = (30, 45)
    c.data.augment = True
    c.data.global_batch_size = 64
    c.eval.global_batch_size = 128

    c.model.hidden_size = 128
    c.model.expansion = 2.0
    c.model.H_cycles = 2
    c.model.L_cycles = 4
    c.model.puzzle_emb_ndim = 0
    c.model.puzzle_emb_len = 0
    c.model.forward_dtype = 'float32'
    c.act.halt_max_steps = 8

    c.optim.name = 'adamw'
    c.optim.lr = 1e-3
    c.optim.weight_decay = 0.1
    c.optim.warmup_steps = 100
    c.optim.lr_min_ratio = 0.1
    c.train.total_steps = 1000
    c.train.eval_every_steps = 200
    c.train.log_every_steps = 50
    c.checkpoint.every_steps = 250
    c.ema.decay = 0.99
    c.mesh.shape = (-1, 1)
    if arg.runlocal:
        apply_runlocal(c)
    return c


def sweep():
    return ['default']
