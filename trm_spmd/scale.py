"""A config far outside the planned runs still runs, but says so: its training FLOPs per
step against the paper's Sudoku baseline, and what a step would take on this slice."""

import os

from trm_spmd import hardware, tasks
from trm_spmd.config.schema import default_config
from trm_spmd.model.config import TRMConfig
from trm_spmd.model.flops import train_flops_per_example_step

# Every planned run does at most 17.6x the baseline's work per step (configs/urm.py:arc1: 12
# loops of 4 layers over 901 positions; TRM's configs/maze.py:paper 9.3x); beyond this a typo
# (T=99) is likelier than a plan.
FAR_OUTSIDE = 24.0
# The TPU compiler estimates 13-52% for the planned runs (benchmarks/README.md).
ASSUMED_MFU = 0.3


def flops_per_example(config):
    """Training FLOPs per example per ACT step of `config` (its first curriculum stage's cycles)."""
    cfg = TRMConfig.from_config(config, **tasks.sizes(config))
    H, L = cfg.H_cycles, cfg.L_cycles
    if config.curriculum.enabled:
        H, L = config.curriculum.H_cycles[0], config.curriculum.L_cycles[0]
    return train_flops_per_example_step(cfg, H, L)


def flops_per_step(config):
    """Training FLOPs of one optimizer step of `config` at its global batch."""
    return flops_per_example(config) * config.data.global_batch_size


def far_outside_plan(flops, device_count, device_kind):
    """The `warning:` line of a run whose training step does `flops`, more than FAR_OUTSIDE
    times the baseline's work per step, or None."""
    baseline = flops_per_step(default_config())
    ratio = flops / baseline
    if ratio <= FAR_OUTSIDE:
        return None
    if device_kind.upper() == 'TPU':   # torch_xla under SPMD names no generation; the TPU VM does
        device_kind = os.environ.get('TPU_ACCELERATOR_TYPE', device_kind)
    peak = hardware.peak_tflops(device_kind)
    if peak:
        seconds = flops / (device_count * peak * 1e12 * ASSUMED_MFU)
        estimate = (f'on these {device_count} {device_kind} devices a step takes about {seconds:,.2f} s '
                    f'at {ASSUMED_MFU:.0%} MFU')
    else:
        estimate = f'no peak is known for {device_kind} devices, so no time estimate'
    return (f'warning: this config does {flops / 1e12:,.0f} TFLOP per training step, {ratio:,.0f}x the '
            f'paper\'s Sudoku baseline ({baseline / 1e12:.1f} TFLOP) and far beyond the planned runs; '
            f'{estimate}. Check model.H_cycles, model.L_cycles, model.hidden_size and the batch')
