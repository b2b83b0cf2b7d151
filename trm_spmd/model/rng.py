"""Counter-based uniforms: a pure function of (seed, step, row, column).

Stateful generators differ between backends and must be checkpointed; a hash of the
counters gives the same numbers on CPU, GPU and TPU, and a resumed run needs only the step.
All arithmetic is on int64 tensors holding values below 2^31, so every product stays below
2^62 and nothing overflows or depends on wrap-around semantics. Right shifts go through
torch.bitwise_right_shift: torch_xla lowers the `>>` operator on int64 to a division, which a
TPU (no 64-bit integer unit) expands into hundreds of instructions per use.
"""

import torch

_MASK31 = (1 << 31) - 1
# Odd multipliers below 2^31: multiplication by them permutes the 31-bit integers.
_MUL1 = 0x2C1B3C6D
_MUL2 = 0x297A2D39
_STREAM = 0x5851F42D


def _mix(x):
    """A bijection of [0, 2^31) with good avalanche (xor-shift / multiply rounds)."""
    x = x ^ _shr(x, 16)
    x = (x * _MUL1) & _MASK31
    x = x ^ _shr(x, 15)
    x = (x * _MUL2) & _MASK31
    return x ^ _shr(x, 16)


def _shr(x, bits):
    """x >> bits for the non-negative int64 values used here (equal to floor division)."""
    return torch.bitwise_right_shift(x, bits)


def _split31(value, device):
    """int64 tensor -> (low 31 bits, next 31 bits), both as int64 tensors in [0, 2^31)."""
    v = torch.as_tensor(value, dtype=torch.int64, device=device)
    return v & _MASK31, _shr(v, 31) & _MASK31


def counter_uniforms(seed, step, batch_size, num, device=None):
    """float32 [batch_size, num] in [0, 1) (multiples of 2^-24) for this (seed, step).

    seed: Python int. step: Python int or 0-d integer tensor (e.g. the optimizer step on
    device, so a compiled step does not retrace as it advances).
    """
    if isinstance(step, torch.Tensor):
        device = step.device if device is None else device
    seed_lo, seed_hi = _split31(seed, device)
    step_lo, step_hi = _split31(step, device)
    key = _mix(seed_lo ^ _STREAM)
    for part in (seed_hi, step_lo, step_hi):
        key = _mix(key ^ part)
    cols = torch.arange(num, dtype=torch.int64, device=device)
    rows = torch.arange(batch_size, dtype=torch.int64, device=device)
    # One key per column; within a column the map row -> value is a bijection, so no two
    # rows of a column ever share a draw.
    col_keys = _mix(key ^ _mix(cols + 1))
    h = _mix(_mix(col_keys[None, :] ^ rows[:, None]))
    return _shr(h, 7).to(torch.float32) * (2.0 ** -24)
