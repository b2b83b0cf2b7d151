"""Adaptive computation time with deep supervision (reference: TRM ACTV1.forward).

Every call is one supervision step for every row of a fixed-size batch. A row that halted
at the previous call is replaced by the new batch's row and restarts from H_init/L_init;
the others continue where they were. All decisions are torch.where masks, so the traced
graph never depends on data.

The carry is a flat dict of tensors so a compiled step can return it and a checkpoint can
hold it:
  the model's states  [B, total_len, hidden] forward dtype, one per config.state_names
                      (TRM: z_H, z_L; URM: hidden)
  steps               int32 [B]   supervision steps taken by the row's current puzzle
  halted              bool  [B]   the row is replaced at the next call
  inputs, labels      [B, seq_len] (int32 by default; labels may be int64)
  puzzle_identifiers  int32 [B]
"""

import torch

from trm_spmd.batch import BATCH_KEYS
from trm_spmd.model.config import TRMConfig



def initial_carry(model_or_cfg, batch_size, device, labels_dtype=torch.int32):
    """All rows halted, so the first act_step loads the whole first batch. Zeros, never torch.empty."""
    cfg = model_or_cfg if isinstance(model_or_cfg, TRMConfig) else model_or_cfg.config
    dtype = getattr(torch, cfg.forward_dtype)
    state = (batch_size, cfg.total_len, cfg.hidden_size)
    cells = (batch_size, cfg.seq_len)
    return {
        **{name: torch.zeros(state, dtype=dtype, device=device) for name in cfg.state_names},
        'steps': torch.zeros(batch_size, dtype=torch.int32, device=device),
        'halted': torch.ones(batch_size, dtype=torch.bool, device=device),
        'inputs': torch.zeros(cells, dtype=torch.int32, device=device),
        'labels': torch.zeros(cells, dtype=labels_dtype, device=device),
        'puzzle_identifiers': torch.zeros(batch_size, dtype=torch.int32, device=device),
    }


def exploration_min_steps(uniforms, exploration_prob, halt_max_steps):
    """Per row: with probability exploration_prob a minimum step count ~ U{2..max}, else 0.

    uniforms [B, 2] in [0, 1): column 0 decides exploring, column 1 picks the count.
    """
    explore = uniforms[:, 0] < exploration_prob
    draw = 2 + torch.floor(uniforms[:, 1] * (halt_max_steps - 1)).to(torch.int32)
    draw = torch.clamp(draw, max=halt_max_steps)
    return torch.where(explore, draw, torch.zeros_like(draw))


def exploration_prob_at(step, start, final, total_steps):
    """Exploration probability decayed linearly from `start` to `final` over total_steps.

    A 0-d tensor step gives a 0-d float32 tensor computed in the traced step itself; feeding
    a freshly transferred scalar tensor instead costs extra warm-up compiles on torch_xla.
    """
    if isinstance(step, torch.Tensor):
        frac = torch.clamp(step.to(torch.float32) / max(1, total_steps), 0.0, 1.0)
        return start + (final - start) * frac
    return start + (final - start) * min(max(step / max(1, total_steps), 0.0), 1.0)


def act_step(model, carry, batch, *, training, exploration_prob=None, uniforms=None,
             H_cycles=None, L_cycles=None, max_steps=None):
    """One ACT step -> (new_carry, outputs); the new carry is detached.

    batch: dict inputs [B, seq_len], labels [B, seq_len], puzzle_identifiers [B]; only the rows
    that halted at the previous step are taken from it. In training, `uniforms` [B, 2] in
    [0, 1) drives exploration (rng.counter_uniforms) and exploration_prob (float or 0-d
    tensor, e.g. exploration_prob_at(step, ...); default the config's) may change between
    steps without retracing when it is a tensor.
    max_steps (eval only; default the config's halt_max_steps) is the step at which every row
    halts: an evaluation may recurse deeper or shallower than training did.
    outputs: logits [B, seq_len, vocab], q_halt_logits [B], q_continue_logits [B] (float32),
    and target_q_continue [B] when training with no_ACT_continue=False.
    """
    cfg = model.config
    act_on = training and cfg.halt_max_steps > 1
    if training and max_steps is not None:
        raise ValueError('act_step: max_steps is for evaluation; training halts at the config\'s halt_max_steps')
    max_steps = cfg.halt_max_steps if max_steps is None else max_steps
    if act_on and uniforms is None:
        raise ValueError('act_step(training=True) needs uniforms [B, 2]; draw them with rng.counter_uniforms')

    reset = carry['halted']
    data = {k: torch.where(reset.view((-1,) + (1,) * (carry[k].dim() - 1)), batch[k].to(carry[k].dtype), carry[k])
            for k in BATCH_KEYS}
    states = {name: torch.where(reset.view(-1, 1, 1), init, carry[name])
              for name, init in model.initial_states().items()}
    steps = torch.where(reset, torch.zeros_like(carry['steps']), carry['steps'])

    states, logits, q_halt, q_continue = model(
        states, data['inputs'], data['puzzle_identifiers'], H_cycles, L_cycles)
    outputs = {'logits': logits, 'q_halt_logits': q_halt, 'q_continue_logits': q_continue}

    with torch.no_grad():
        steps = steps + 1
        is_last = steps >= max_steps
        halted = is_last
        if act_on:
            if cfg.no_ACT_continue:
                halted = halted | (q_halt > 0)
            else:
                halted = halted | (q_halt > q_continue)
            if exploration_prob is None:
                exploration_prob = cfg.exploration_prob
            min_steps = exploration_min_steps(uniforms, exploration_prob, cfg.halt_max_steps)
            halted = halted & (steps >= min_steps)
            if not cfg.no_ACT_continue:
                # Q-learning target for "continue" (the reference intends this but crashes on
                # a 5-way unpack of a 3-tuple): the value of the next state, read from one
                # more no-grad ACT step on the new carry. After the last step the only
                # action left is halting, so its target is the next q_halt alone.
                _, _, next_halt, next_continue = model(
                    states, data['inputs'], data['puzzle_identifiers'], H_cycles, L_cycles)
                outputs['target_q_continue'] = torch.sigmoid(
                    torch.where(is_last, next_halt, torch.maximum(next_halt, next_continue)))

    new_carry = {**states, 'steps': steps, 'halted': halted, **data}
    return new_carry, outputs
