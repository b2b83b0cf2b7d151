"""Optimization settings around the baseline: a learning-rate grid, a longer run, no warmup, a larger batch.

  python -m trm_spmd.main --config=configs/advanced.py:lr_3e-4 --workdir=DIR
  python launch/tpu.py sweep --sweep=configs/advanced.py:lr_search --study_root=gs://BUCKET/study
  python launch/tpu.py sweep --sweep=configs/advanced.py --study_root=gs://BUCKET/study

What it studies: whether the paper's optimization settings (configs/baseline.py) are a
tuned optimum or just a working point. Everything not named below is the baseline.

- lr_3e-5, lr_1e-4, lr_3e-4, lr_1e-3 (the `lr_search` sweep): half-decade steps around the
  paper's 1e-4, the same value for optim.lr and optim.puzzle_emb_lr (the reference ties
  them); weight decay stays 1.0, so the decay per step lr * wd moves with the lr. lr_1e-4
  is the baseline's values (with the same seed, the same run): it is in the grid so the
  sweep stands alone, and can be skipped when the baseline run exists.
- longer: 100,000 epochs instead of 50,000 (130,208 steps); eval still every 5,000 epochs,
  so the first half of its curve is comparable point by point with the baseline's.
- no_warmup: optim.warmup_steps 0, the full lr from the first step.
- larger_batch: global batch 6144 in 8 micro-batches of 768 (optim.grad_accum_steps 8).
  The lr, warmup and EMA follow configs/batch_scaling.py's rule at 6144 (lr 2.83e-4, 250
  warmup steps, EMA 0.999 ** 8), so it is b6144 of that family computed differently:
  the gradients of the 8 micro-batches are summed before the one update, and each
  micro-batch is the paper's 768 rows, each step taking ~8x a baseline step for 1/8 of the
  steps. Each micro-batch waits behind an optimization barrier for the previous one's
  gradients, so only one micro-batch's activations are alive at a time: compiled for a
  v4-8 (benchmarks/tpu_compile.py) the step needs 8.4 GiB of temporaries per chip, about
  one 768-row step's there (7.2 GiB), and fits in 10.0 GiB of a chip's 32; on a v4-64,
  1.1 GiB (a 768-row step: 0.7). Global batch 6144 thus runs on a v4-8.

`:runlocal` is the usual CPU-sized run; larger_batch keeps accumulation there, each
micro-batch being runlocal's baseline batch (16 rows) as 768 is the paper's, but in 2
micro-batches (32 rows), not 8: the step is traced with every micro-batch unrolled, and 8
take ~1.5 minutes to compile on a 2-core CPU.
"""

from trm_spmd.config import default_config, family_config
from trm_spmd.config.batch_rule import batch_fields

LR_GRID = ('lr_3e-5', 'lr_1e-4', 'lr_3e-4', 'lr_1e-3')
LARGER_BATCH = 6144
MICRO_BATCHES = 8            # 6144 / 8 = 768, the paper's batch
RUNLOCAL_MICRO_BATCHES = 2
VARIANTS = {
    **{name: {'optim.lr': float(name[3:]), 'optim.puzzle_emb_lr': float(name[3:])} for name in LR_GRID},
    'longer': {'train.epochs': 100000},
    'no_warmup': {'optim.warmup_steps': 0},
    'larger_batch': {**batch_fields(LARGER_BATCH, default_config()), 'optim.grad_accum_steps': MICRO_BATCHES},
}


def _runlocal(c, variant):
    if variant == 'larger_batch':
        c.optim.grad_accum_steps = RUNLOCAL_MICRO_BATCHES
        c.data.global_batch_size = RUNLOCAL_MICRO_BATCHES * c.data.global_batch_size


def get_config(arg=None):
    return family_config('advanced', VARIANTS, arg, 'longer', _runlocal)


def lr_search():
    return list(LR_GRID)


def sweep():
    return list(VARIANTS)
