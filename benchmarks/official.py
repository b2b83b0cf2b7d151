"""The official TinyRecursiveModels training step, timed beside ours (step_time.py --official=PATH).

    git clone https://github.com/SamsungSAILMontreal/TinyRecursiveModels ../TinyRecursiveModels
    pip install einops pydantic          # what its model code imports besides torch
    python benchmarks/step_time.py --config=configs/quickstart.py --official=../TinyRecursiveModels

The official model and loss head are imported from the checkout at PATH and built from our
config's model, ACT and loss settings (the same network: same widths, cycles, ACT steps,
dtype, parameter count). One step is what its pretrain.py train_batch does: the loss head's
forward with the carried ACT state, backward of loss / global batch, the optimizer step and
zero_grad, and the metrics read to the host. Its AdamATan2 comes from the CUDA-only
adam-atan2 package, so on a CPU torch.optim.AdamW (fused where torch has it) stands in, as
it does for anyone running that code without CUDA. `compile=True` wraps the loss head in
torch.compile as pretrain.py does unless DISABLE_COMPILE is set.

import_official_urm / official_urm_arch do the same for a UbiquantAI/URM checkout's model
(benchmarks/official_parity.py compares its numerics with ours).
"""

import os
import sys
import time
import types

import torch

from benchmarks import common
from trm_spmd.errors import UserError


def _import_official(path):
    if not os.path.isfile(os.path.join(path, 'models', 'recursive_reasoning', 'trm.py')):
        raise UserError(f'--official={path}: not a TinyRecursiveModels checkout (no models/recursive_reasoning/trm.py)')
    sys.path.insert(0, os.path.abspath(path))
    try:
        from models.losses import ACTLossHead
        from models.recursive_reasoning.trm import TinyRecursiveReasoningModel_ACTV1
    except ImportError as e:
        raise UserError(f'--official={path}: its code needs {e.name}: pip install einops pydantic') from None
    return TinyRecursiveReasoningModel_ACTV1, ACTLossHead


def _cpu_flash_attn():
    """A stand-in for the flash-attn package (CUDA only), which URM's models/layers.py imports:
    flash_attn_func(q, k, v, causal) on [B, L, H, D] as torch's scaled_dot_product_attention
    computes it (the same softmax scale, 1/sqrt(D)), so its model runs on a CPU."""
    import torch.nn.functional as F

    def flash_attn_func(q, k, v, causal=False):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=causal)
        return out.transpose(1, 2).contiguous()

    module = types.ModuleType('flash_attn')
    module.flash_attn_func = flash_attn_func
    return module


def import_official_urm(path):
    """The URM class of a UbiquantAI/URM checkout at PATH (flash-attn stood in for on a CPU)."""
    if not os.path.isfile(os.path.join(path, 'models', 'urm', 'urm.py')):
        raise UserError(f'--official={path}: not a URM checkout (no models/urm/urm.py)')
    for name in ('flash_attn_interface', 'flash_attn'):
        try:
            __import__(name)
            break
        except ImportError:
            continue
    else:
        sys.modules['flash_attn'] = _cpu_flash_attn()
    sys.path.insert(0, os.path.abspath(path))
    try:
        from models.urm.urm import URM
    except ImportError as e:
        raise UserError(f'--official={path}: its code needs {e.name}: pip install einops pydantic') from None
    return URM


def official_urm_arch(config, batch_size, seq_len, vocab_size, num_puzzle_identifiers):
    """Our URM config as the official URM's config dict (its `loops` is our act.halt_max_steps,
    its num_layers our L_layers; its puzzle-embedding length follows from the width)."""
    m = config.model
    return dict(batch_size=batch_size, seq_len=seq_len, vocab_size=vocab_size,
                num_puzzle_identifiers=num_puzzle_identifiers, puzzle_emb_ndim=m.puzzle_emb_ndim,
                num_layers=m.L_layers, hidden_size=m.hidden_size, expansion=m.expansion, num_heads=m.num_heads,
                pos_encodings=m.pos_encodings, rms_norm_eps=m.rms_norm_eps, rope_theta=m.rope_theta,
                loops=config.act.halt_max_steps, H_cycles=m.H_cycles, L_cycles=m.L_cycles,
                forward_dtype=m.forward_dtype)


def official_arch(config, batch_size):
    """Our config's network as the official model's config dict."""
    m, a = config.model, config.act
    return dict(
        batch_size=batch_size, seq_len=81, vocab_size=11, num_puzzle_identifiers=1,
        puzzle_emb_ndim=m.puzzle_emb_ndim, puzzle_emb_len=m.puzzle_emb_len if m.puzzle_emb_ndim else 0,
        H_cycles=m.H_cycles, L_cycles=m.L_cycles, H_layers=0, L_layers=m.L_layers, hidden_size=m.hidden_size,
        expansion=m.expansion, num_heads=m.num_heads, pos_encodings=m.pos_encodings, rms_norm_eps=m.rms_norm_eps,
        rope_theta=m.rope_theta, halt_max_steps=a.halt_max_steps, halt_exploration_prob=a.exploration_prob,
        forward_dtype=m.forward_dtype, mlp_t=m.mlp_t, no_ACT_continue=a.no_ACT_continue)


class OfficialBench:
    """The official model, loss head and optimizer, fed the same synthetic batches as ours."""

    def __init__(self, path, config, host_batches, compile=False):
        if config.model.puzzle_emb_ndim:
            raise UserError('--official compares configs without a puzzle embedding (model.puzzle_emb_ndim=0): '
                            'its sparse-embedding optimizer needs torch.distributed')
        Model, LossHead = _import_official(path)
        torch.manual_seed(config.seed)
        self.batch_size = config.data.global_batch_size
        model = LossHead(Model(official_arch(config, self.batch_size)), loss_type=f'{config.loss.type}_cross_entropy')
        self.parameters = sum(p.numel() for p in model.parameters())
        o = config.optim
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=o.weight_decay,
                                           betas=(o.beta1, o.beta2), fused=True)
        self.model = torch.compile(model) if compile else model
        self.batches = [{k: torch.from_numpy(v) for k, v in b.items()} for b in host_batches]
        self.carry = None
        self.count = 0

    def run(self):
        """One training step as train_batch runs it; returns its seconds."""
        batch = self.batches[self.count % len(self.batches)]
        self.count += 1
        start = time.perf_counter()
        if self.carry is None:
            self.carry = self.model.initial_carry(batch)
        self.carry, loss, metrics, _, _ = self.model(carry=self.carry, batch=batch, return_keys=[])
        ((1 / self.batch_size) * loss).backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        torch.stack([metrics[k] for k in sorted(metrics)]).cpu().numpy()
        return time.perf_counter() - start


def measure(path, config, host_batches, warmup, steps, compile=False):
    bench = OfficialBench(path, config, host_batches, compile)
    warm = [bench.run() for _ in range(warmup)]
    timed = common.stats_ms([bench.run() for _ in range(steps)])
    return {'parameters': bench.parameters, 'compile': compile, 'first_step_s': warm[0] if warm else None,
            'step_ms': timed, 'examples_per_s': bench.batch_size / (timed['median'] / 1e3),
            'forward_dtype': config.model.forward_dtype}


def report_lines(ours_ms, official):
    ratio = official['step_ms']['median'] / ours_ms
    return [
        f'official code          median {official["step_ms"]["median"]:.1f} ms, p90 {official["step_ms"]["p90"]:.1f} ms '
        f'({"torch.compile" if official["compile"] else "eager"}, AdamW, {official["forward_dtype"]}, '
        f'{official["parameters"]:,} parameters)',
        f'speed, ours / official {ratio:.2f}x (official {official["step_ms"]["median"]:.1f} ms / ours {ours_ms:.1f} ms '
        f'per step)',
    ]

