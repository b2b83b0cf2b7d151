"""Batch scaling: the baseline at global batch 256 ... 6144, with a stated rule for what follows the batch.

  python -m trm_spmd.main --config=configs/batch_scaling.py:b2048 --workdir=DIR
  python launch/tpu.py sweep --sweep=configs/batch_scaling.py --study_root=gs://BUCKET/study
  python launch/tpu.py sweep --sweep=configs/sweeps.py:batch_sweep --study_root=gs://BUCKET/study

What it studies: how far the paper's 768 can grow (fewer, larger steps: what a pod slice
needs to use its devices) before accuracy drops, and how much it can shrink. The 768
point is the baseline run itself (configs/baseline.py; `b768` here gives the same values).

The rule, from the 768 baseline to global batch B (k = B / 768):
- Learning rates: square-root scaling, lr = 1e-4 * sqrt(k), for both the main optimizer and
  the puzzle embedding's SignSGD. AdamATan2 normalises each coordinate's step like Adam,
  and for Adam-type optimizers the square-root rule is the one that keeps the training
  dynamics comparable across batch sizes (Malladi et al. 2022, SDE scaling rule); the
  linear rule (8x at 6144) is SGD's.
- Weight decay stays 1.0: the decoupled decay per step is lr * wd, so it follows the same
  rule as the update it balances (over a whole run it weakens as 1/sqrt(k), like the sum
  of the updates).
- Warmup is measured in examples (2000 steps x 768 = 1,536,000), so warmup_steps = 2000 / k:
  6000, 3000, 1500, 750, 250 steps.
- EMA horizon is measured in examples too: ema.decay = 0.999 ** k (the average covers the
  same ~768,000 examples at every batch; at 6144 a per-step 0.999 would average over the
  last 12% of training instead of 1.5%).
- Training length and eval cadence stay in epochs (50,000 and every 5,000), so every
  variant sees the same 50M examples and is evaluated at the same points of training; the
  step counts follow (65,104 at 768, 8,138 at 6144).

Devices: B must divide by the data axis and by the hosts. On a v4-64 (32 devices, 8 hosts)
b6144 is 192 rows per device and 768 per host; on 8 CPU devices 768 per device (a dry run;
training that on CPU is not the point). With 1,000 training groups a 6144 batch spans 6.1
epochs, so each group appears 6-7 times in one batch (with different augmentations): the
loader lays epochs end to end and never draws a group twice within an epoch.

`:runlocal` keeps the batch ratios (B / 32: 8, 16, 24, 32, 64, 192 rows) and the lrs of the
rule; the rest is the usual CPU-sized run.
"""

from trm_spmd.config import ConfigArgError, default_config, family_config
from trm_spmd.config.batch_rule import REFERENCE_BATCH, batch_fields

BATCHES = (256, 512, 1024, 2048, 6144)
# b768 is the rule's reference point (the baseline's values); the sweep leaves it to baseline.py.
VARIANTS = tuple(f'b{b}' for b in BATCHES)
KNOWN = tuple(sorted(VARIANTS + (f'b{REFERENCE_BATCH}',), key=lambda v: int(v[1:])))


def decode_variant(variant):
    """'b2048' -> the fields the batch rule sets at global batch 2048."""
    if variant not in KNOWN:
        raise ConfigArgError(f'batch_scaling variant {variant!r} is not known; known: {", ".join(KNOWN)}')
    return batch_fields(int(variant[1:]), default_config())


def _runlocal(c, variant):
    # B / 32 is a multiple of 8 for every variant: 8 CPU devices divide it.
    c.data.global_batch_size = int(variant[1:]) // 32


def get_config(arg=None):
    # epochs (50,000) and eval_every_epochs (5,000) are left as the baseline's on purpose.
    return family_config('batch_scaling', decode_variant, arg, f'b{REFERENCE_BATCH}', _runlocal)


def sweep():
    return list(VARIANTS)
