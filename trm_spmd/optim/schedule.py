"""Learning-rate schedule of the reference (pretrain.py cosine_schedule_with_warmup_lr_lambda)."""

import math

import torch


def learning_rate(step, base_lr, warmup_steps, total_steps, lr_min_ratio=1.0):
    """Linear warmup base_lr * step / warmup_steps, then a half cosine to base_lr * lr_min_ratio
    at total_steps (lr_min_ratio=1.0: constant after warmup).

    `step` counts optimizer steps from 1 as the reference does (the first update uses
    base_lr / warmup_steps). A Python int gives a float; a 0-d tensor gives a float32 0-d
    tensor computed without branches, so a traced step can take it as an input.
    """
    warmup_div = max(1, warmup_steps)
    decay_div = max(1, total_steps - warmup_steps)
    if isinstance(step, torch.Tensor):
        s = step.to(torch.float32)
        warm = base_lr * s / warmup_div
        progress = (s - warmup_steps) / decay_div
        cosine = torch.clamp((1 - lr_min_ratio) * 0.5 * (1 + torch.cos(math.pi * progress)), min=0.0)
        return torch.where(s < warmup_steps, warm, base_lr * (lr_min_ratio + cosine))
    if step < warmup_steps:
        return base_lr * step / warmup_div
    progress = (step - warmup_steps) / decay_div
    return base_lr * (lr_min_ratio + max(0.0, (1 - lr_min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))))
