"""The train and eval steps, each traced once and compiled.

`train_step(state, batch) -> (state, metrics)` runs one ACT step for every row of the batch
and one optimizer update. As in any torch training step, the model's parameters, the
optimizer states and the EMA are updated in place (they are the modules' tensors); all
else the step reads or changes is in the TrainState it takes and returns. It reads no
value back to the host and branches on no data, and everything that changes from step to
step (the learning rate, the exploration probability, the random draws) is computed in the
graph from the step counter, so every call runs the same compiled graph. The cycle counts
(H_cycles, L_cycles) are Python ints fixed per compiled step: a curriculum stage is a graph.
So is the frozen first share of a post-training run (optim.freeze_trunk_fraction): its step
computes the puzzle embedding's gradient alone and updates only it, and the network's weights,
their optimizer state and the EMA are not touched at all (they stay bit for bit as loaded, the
main optimizer's first update comes when the trunk unfreezes).
"""

from typing import NamedTuple

import torch

from trm_spmd.model.act import act_step, exploration_prob_at
from trm_spmd.model.losses import loss_and_metrics
from trm_spmd.model.rng import counter_uniforms
from trm_spmd.optim import set_lr
from trm_spmd.optim.schedule import learning_rate


class TrainState(NamedTuple):
    carry: dict            # the ACT carry of every row (model/act.py), sharded along `data`
    step: torch.Tensor     # 0-d int64: optimizer updates done


def _micro_batches(tree, accum):
    """Splits dim 0 into `accum` strided chunks (chunk i = rows i, i+accum, ...).

    Strided, not contiguous: under SPMD every device's block of rows then holds its share
    of every chunk, so no rows move between devices.
    """
    if accum == 1:
        return [tree]
    return [{k: v.view(-1, accum, *v.shape[1:])[:, i] for k, v in tree.items()} for i in range(accum)]


def _join_micro(parts):
    if len(parts) == 1:
        return parts[0]
    return {k: torch.stack([p[k] for p in parts], dim=1).flatten(0, 1) for k in parts[0]}


def _after_previous_micro_batch(runtime, model, carry, part, sums):
    """(carry, part, sums) of the next micro-batch, which can start only once the previous
    one's gradients and metric sums exist.

    Without it a compiler that sees the whole step as one graph (XLA) runs the micro-batches'
    passes side by side and keeps all their activations alive at once, so accumulation saves
    almost no memory; behind the barrier only one micro-batch's activations are alive at a
    time. The sums are the same. Under SPMD the barrier needs each micro-batch's gradients
    whole, so they are all-reduced once per micro-batch, not once per step.
    """
    params = [p for p in model.parameters() if p.grad is not None]
    dicts = (carry, part, sums)
    out = iter(runtime.serialize([p.grad for p in params] + [t for d in dicts for t in d.values()]))
    for p in params:
        p.grad = next(out)
    return tuple({k: next(out) for k in d} for d in dicts)


def make_train_step(trainer, config, runtime, total_steps, H_cycles, L_cycles, trunk_frozen=False):
    """train_step(state, batch) -> (state, metrics) for one curriculum stage (uncompiled);
    trunk_frozen: the step of the frozen phase, which trains the puzzle embedding alone.

    metrics: 0-d float32 tensors of this step: the sums of loss_and_metrics over the
    global batch (count, accuracy, exact_accuracy, ... loss), plus lr, exploration_prob and
    nonfinite (1.0 when the loss was not finite).
    """
    model, ema, cfg = trainer.model, trainer.ema, trainer.cfg
    main_optimizer, puzzle_optimizer = trainer.optimizers
    optimizers = [o for o in trainer.optimizers if o is not None]
    stepped = [puzzle_optimizer] if trunk_frozen else optimizers   # the optimizers this step updates
    if trunk_frozen and puzzle_optimizer is None:
        raise ValueError('a frozen-trunk step needs a puzzle embedding to train (model.puzzle_emb_ndim > 0)')
    # The parameters whose gradients backward computes (None: all).
    grad_inputs = model.puzzle_emb_parameters() if trunk_frozen else None
    o, a = config.optim, config.act
    global_batch, accum = config.data.global_batch_size, o.grad_accum_steps
    skip_nonfinite = config.train.nan_policy == 'skip'
    # Drawn for the global batch, then this process's rows: the same numbers for every row
    # whatever the backend and process count.
    rows = slice(0, global_batch) if runtime.global_view else slice(*runtime.host_slice(global_batch))

    def update_state():
        tensors = [p.data for opt in stepped for g in opt.param_groups for p in g['params']]
        for opt in stepped:
            for state in opt.state.values():
                tensors.extend(v for v in state.values() if torch.is_tensor(v))
        return tensors

    def update(lr, puzzle_lr, finite):
        if o.grad_clip > 0 and not trunk_frozen:
            torch.nn.utils.clip_grad_norm_(model.main_parameters(), o.grad_clip, foreach=True)
        if skip_nonfinite:
            before = [t.detach().clone() for t in update_state()]
        if not trunk_frozen:
            set_lr(main_optimizer, lr)
        if puzzle_optimizer is not None:
            set_lr(puzzle_optimizer, puzzle_lr)
        for opt in stepped:
            opt.step()
        if skip_nonfinite:
            # A non-finite step leaves every parameter and optimizer state as it was.
            for t, old in zip(update_state(), before):
                t.copy_(torch.where(finite, t, old))
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)   # grads created in-graph each step: one graph for all steps
        if ema is not None and not trunk_frozen:
            ema.update()

    def train_step(state, batch):
        done = state.step.to(torch.float32) + 1.0   # the reference's schedule counts from 1
        lr = learning_rate(done, o.lr, o.warmup_steps, total_steps, o.lr_min_ratio)
        puzzle_lr = learning_rate(done, o.puzzle_emb_lr, o.warmup_steps, total_steps, o.lr_min_ratio)
        explore = exploration_prob_at(state.step, a.exploration_prob, a.exploration_prob_final, total_steps)
        uniforms = counter_uniforms(config.seed, state.step, global_batch, 2, batch['inputs'].device)[rows]

        carries, sums = [], None
        for carry, part in zip(_micro_batches(state.carry, accum),
                               _micro_batches(dict(batch, uniforms=uniforms), accum)):
            if sums is not None:
                carry, part, sums = _after_previous_micro_batch(runtime, model, carry, part, sums)
            u = part.pop('uniforms')
            carry, outputs = act_step(model, carry, part, training=True, exploration_prob=explore, uniforms=u,
                                      H_cycles=H_cycles, L_cycles=L_cycles)
            loss, metrics = loss_and_metrics(carry, outputs, cfg)
            (loss / global_batch).backward(inputs=grad_inputs)
            metrics['loss'] = loss.detach().float()
            sums = metrics if sums is None else {k: sums[k] + v for k, v in metrics.items()}
            carries.append(carry)

        grads = [p.grad for p in model.parameters() if p.grad is not None]
        runtime.all_reduce_sum_(grads + list(sums.values()))
        finite = torch.isfinite(sums['loss'])
        update(lr, puzzle_lr, finite)
        metrics = {k: v.float() for k, v in sums.items()}
        metrics.update(lr=lr.float(), exploration_prob=explore.float(), nonfinite=(~finite).float())
        return TrainState(_join_micro(carries), state.step + 1), metrics

    return train_step


def make_eval_step(model, max_steps):
    """eval_step(carry, batch) -> (carry, outputs): one ACT step in eval mode, no gradients;
    every row halts at step `max_steps`."""

    def eval_step(carry, batch):
        with torch.no_grad():
            return act_step(model, carry, batch, training=False, max_steps=max_steps)

    return eval_step
