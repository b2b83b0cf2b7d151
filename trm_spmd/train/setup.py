"""What a training run (or a benchmark of one) is made of: model, optimizers, EMA, the
compiled step, and the device state it starts from."""

import dataclasses

import torch

from trm_spmd.model.act import initial_carry
from trm_spmd.model.config import TRMConfig
from trm_spmd.model.trm import TRM
from trm_spmd.optim import EMA, build_optimizers
from trm_spmd.train.step import TRAIN_STATE, TRAIN_SUMS, TrainStep, zero_sums


@dataclasses.dataclass
class Trainer:
    cfg: TRMConfig
    model: TRM
    optimizers: tuple
    ema: object
    step_fn: object


def build_trainer(config, runtime, total_steps, vocab_size=11, seq_len=81, num_puzzle_identifiers=1):
    """Model initialised on the CPU from config.seed (the same weights on every backend and
    mesh), moved to the device; optimizer state created now, not inside the first traced
    step; the train step compiled (once per curriculum stage)."""
    cfg = TRMConfig.from_config(config, vocab_size=vocab_size, seq_len=seq_len,
                                num_puzzle_identifiers=num_puzzle_identifiers)
    torch.manual_seed(config.seed)
    model = TRM(cfg)
    if hasattr(runtime, 'checkpoint_fn'):
        model.checkpoint_fn = runtime.checkpoint_fn
    if getattr(runtime, 'float32_weight_grads', False):
        model.use_float32_weight_grads()
    model.to(runtime.device)
    optimizers = build_optimizers(model, config)   # their state exists from construction on
    ema = EMA.for_model(model, config.ema.decay) if config.ema.enabled else None
    step = TrainStep(model, optimizers, ema, cfg, config, runtime, total_steps)
    step_fn = runtime.compile(step, 'train_step', config.xla.max_different_graphs)
    return Trainer(cfg, model, optimizers, ema, step_fn)


def device_state(trainer, runtime, batch_size):
    """(carry, zero sums) on the device, everything settled (see settle)."""
    device = runtime.device
    carry = initial_carry(trainer.model, runtime.local_rows(batch_size), device)
    carry = {k: runtime.shard_along_data(v) for k, v in carry.items()}
    zero = zero_sums(TRAIN_SUMS + TRAIN_STATE, device)
    settle(trainer, runtime, zero.values())
    return carry, zero


def settle(trainer, runtime, extra=()):
    """Marks every persistent tensor as a step's outputs are (replicated) and materializes
    pending writes (initialisation, a restored checkpoint), so the first step traces the
    same graph as every later one."""
    tensors = [p.data for p in trainer.model.parameters()] + list(trainer.model.buffers()) + list(extra)
    for opt in trainer.optimizers:
        if opt is not None:
            for state in opt.state.values():
                tensors.extend(v for v in state.values() if torch.is_tensor(v))
    if trainer.ema is not None:
        tensors += trainer.ema.shadow
    for tensor in tensors:
        runtime.replicate(tensor)
    runtime.sync()


def step_tensor(runtime, step):
    return runtime.replicate(torch.tensor(step, dtype=torch.int64).to(runtime.device))
