"""What follows the global batch when it changes: the rule of configs/batch_scaling.py, also
used by configs/advanced.py:larger_batch (the file's docstring gives the reasons).

From the paper's batch of 768 to B (k = B / 768): learning rates x sqrt(k), warmup and the
EMA horizon kept constant in examples (warmup_steps / k, decay ** k).
"""

import math

REFERENCE_BATCH = 768


def scaled(batch, lr=1e-4, warmup_steps=2000, ema_decay=0.999):
    """(lr, warmup_steps, ema_decay) at global batch `batch` from the 768 reference values."""
    k = batch / REFERENCE_BATCH
    return lr * math.sqrt(k), round(warmup_steps / k), ema_decay ** k


def batch_fields(batch, base):
    """The config fields (dotted keys) the rule sets at `batch`, from the config `base`."""
    lr, warmup, decay = scaled(batch, base.optim.lr, base.optim.warmup_steps, base.ema.decay)
    return {'data.global_batch_size': batch, 'optim.lr': lr, 'optim.warmup_steps': warmup, 'ema.decay': decay,
            'optim.puzzle_emb_lr': scaled(batch, base.optim.puzzle_emb_lr)[0]}
