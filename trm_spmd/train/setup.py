"""What a run (or a benchmark of one) trains: the model, its optimizers and EMA, the
compiled train steps, and the device state the first step starts from."""

import dataclasses

import torch

from trm_spmd import tasks
from trm_spmd.model.act import initial_carry
from trm_spmd.model.config import TRMConfig
from trm_spmd.model.families import build_model
from trm_spmd.model.network import RecursiveNetwork
from trm_spmd.optim import EMA, build_optimizers
from trm_spmd.train.schedule import train_graphs
from trm_spmd.train.step import TrainState, make_train_step


@dataclasses.dataclass
class Trainer:
    cfg: TRMConfig
    model: RecursiveNetwork   # TRM or URM (model.family)
    optimizers: tuple      # (main optimizer, SignSGD of the puzzle embedding or None)
    ema: EMA | None

    def persistent_tensors(self, skip=()):
        """Every device tensor the steps read or update in place, besides a TrainState
        (less the parameters in `skip`)."""
        tensors = [p.data for p in self.model.parameters() if all(p is not q for q in skip)]
        tensors += list(self.model.buffers())
        for opt in self.optimizers:
            if opt is not None:
                for state in opt.state.values():
                    tensors.extend(v for v in state.values() if torch.is_tensor(v))
        if self.ema is not None:
            tensors += self.ema.shadow
        return tensors

    def row_sharded(self, runtime):
        """The tensors split by rows over the devices instead of replicated: the puzzle
        embedding, once it has a row per device or more (ARC's: ~10^6 rows of 512, 2 GB in
        float32, would not fit replicated beside the rest; Sudoku's one row stays replicated)."""
        table = self.model.puzzle_emb
        if table is None or table.shape[0] < runtime.device_count:
            return []
        return [table]


def build_trainer(config, runtime, vocab_size=None, seq_len=None, num_puzzle_identifiers=None):
    """The model initialised on the CPU from config.seed (the same weights on every backend
    and mesh) and moved to the device; optimizer state created now, not inside the first
    traced step. Sizes not given (no dataset: benchmarks) are those of the config's task."""
    implied = tasks.sizes(config)
    num_puzzle_identifiers = num_puzzle_identifiers or implied.get('num_puzzle_identifiers', 1)
    cfg = TRMConfig.from_config(config, vocab_size=vocab_size or implied['vocab_size'],
                                seq_len=seq_len or implied['seq_len'],
                                num_puzzle_identifiers=num_puzzle_identifiers).with_auto_dtype(runtime.fast_dtype)
    cfg = cfg.with_auto_attention(runtime.fast_attention)
    torch.manual_seed(config.seed)
    model = build_model(cfg)
    if hasattr(runtime, 'checkpoint_fn'):
        model.checkpoint_fn = runtime.checkpoint_fn
    if getattr(runtime, 'float32_weight_grads', False):
        model.use_float32_weight_grads()
    if config.xla.token_mix_kernel:
        model.use_token_mix_kernel(runtime.token_mix_kernel())
    if config.xla.attention_kernel:
        model.use_attention_kernel(runtime.attention_kernel())
    elif cfg.attention_path == 'blockwise' and config.xla.attention_recompute:
        model.use_attention_recompute(runtime.serialize)
    model.to(runtime.device)
    optimizers = build_optimizers(model, config)   # their state exists from construction on
    ema = EMA.for_model(model, config.ema.decay) if config.ema.enabled else None
    return Trainer(cfg, model, optimizers, ema)


def compile_train_steps(trainer, config, runtime, total_steps):
    """{(H_cycles, L_cycles, trunk_frozen): compiled train_step}, one per distinct curriculum
    stage, and per phase of a post-training run that starts with the trunk frozen."""
    steps = {}
    for H, L, frozen in train_graphs(config, total_steps):
        fn = make_train_step(trainer, config, runtime, total_steps, H, L, trunk_frozen=frozen)
        steps[H, L, frozen] = runtime.compile(fn, 'train_step', config.xla.max_different_graphs)
    return steps


def initial_state(trainer, runtime, global_batch, step=0):
    """The TrainState of a fresh run at `step` (all rows halted: the first step loads a whole
    batch), with everything settled (see settle)."""
    carry = initial_carry(trainer.model, runtime.local_rows(global_batch), runtime.device)
    carry = {k: runtime.shard_along_data(v) for k, v in carry.items()}
    state = TrainState(carry, runtime.replicate(torch.tensor(step, dtype=torch.int64).to(runtime.device)))
    settle(trainer, runtime)
    return state


def settle(trainer, runtime):
    """Marks every persistent tensor replicated (or split by rows: Trainer.row_sharded), as a
    step's outputs are, and materializes pending writes (initialisation, a restored
    checkpoint), so the first step traces the same graph as every later one."""
    sharded = trainer.row_sharded(runtime)
    for tensor in trainer.persistent_tensors(skip=sharded):
        runtime.replicate(tensor)
    for parameter in sharded:
        runtime.shard_rows(parameter.data)
    runtime.sync()
