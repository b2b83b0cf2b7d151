"""The pure train and eval steps, traced once and compiled.

Everything that changes from step to step enters as a tensor (the step counter, from
which the learning rate and the exploration probability are computed in the graph), so
the compiled graph is reused every step. Python values that select a graph (the cycle
counts of a curriculum stage, training vs eval) are fixed per graph.
"""

import torch

from trm_spmd.model.act import act_step
from trm_spmd.model.losses import loss_and_metrics
from trm_spmd.model.rng import counter_uniforms
from trm_spmd.optim import set_lr
from trm_spmd.optim.schedule import learning_rate

# Sums returned by loss_and_metrics, plus what the step adds; all reduce by addition.
TRAIN_SUMS = ('count', 'accuracy', 'exact_accuracy', 'q_halt_accuracy', 'steps',
              'lm_loss', 'q_halt_loss', 'q_continue_loss', 'loss', 'rows', 'nonfinite', 'updates')
# Carried through the step but not sums of the log window: the last lr and exploration
# probability, and the count of non-finite steps since the start (never reset).
TRAIN_STATE = ('lr_last', 'exploration_last', 'nonfinite_total')


def zero_sums(names, device):
    return {k: torch.zeros((), dtype=torch.float32, device=device) for k in names}


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


class TrainStep:
    """(carry, batch, step, sums) -> (carry, step + 1, sums): one ACT step, one optimizer update.

    `step` is a 0-d int64 device tensor (the number of updates done so far); `sums` the
    running metric sums of the current log window (reset by the caller after reading).
    """

    def __init__(self, model, optimizers, ema, cfg, config, runtime, total_steps):
        self.model = model
        self.optimizers = [o for o in optimizers if o is not None]
        self.main_optimizer = optimizers[0]
        self.puzzle_optimizer = optimizers[1] if len(optimizers) > 1 else None
        self.ema = ema
        self.cfg = cfg
        self.config = config
        self.runtime = runtime
        self.total_steps = total_steps
        self.global_batch = config.data.global_batch_size
        self.accum = config.optim.grad_accum_steps

    def _schedules(self, step):
        o, a = self.config.optim, self.config.act
        done = step.to(torch.float32) + 1.0   # the reference's counter starts at 1
        lr = learning_rate(done, o.lr, o.warmup_steps, self.total_steps, o.lr_min_ratio)
        puzzle_lr = learning_rate(done, o.puzzle_emb_lr, o.warmup_steps, self.total_steps, o.lr_min_ratio)
        frac = torch.clamp(step.to(torch.float32) / max(self.total_steps, 1), 0.0, 1.0)
        explore = a.exploration_prob + (a.exploration_prob_final - a.exploration_prob) * frac
        return lr, puzzle_lr, explore

    def __call__(self, carry, batch, step, sums, H_cycles=None, L_cycles=None):
        lr, puzzle_lr, explore = self._schedules(step)
        # Drawn for the global batch, then this process's rows: the same numbers for every
        # row whatever the backend and process count.
        start, stop = (0, self.global_batch) if self.runtime.global_view else self.runtime.host_slice(self.global_batch)
        uniforms = counter_uniforms(self.config.seed, step, self.global_batch, 2, batch['inputs'].device)[start:stop]

        carry_parts = _micro_batches(carry, self.accum)
        batch_parts = _micro_batches(dict(batch, uniforms=uniforms), self.accum)
        new_parts, step_sums = [], None
        for carry_i, batch_i in zip(carry_parts, batch_parts):
            u = batch_i.pop('uniforms')
            new_carry, outputs = act_step(self.model, carry_i, batch_i, training=True,
                                          exploration_prob=explore, uniforms=u,
                                          H_cycles=H_cycles, L_cycles=L_cycles)
            loss, metrics = loss_and_metrics(new_carry, outputs, self.cfg)
            (loss / self.global_batch).backward()
            metrics = dict(metrics, loss=loss.detach().float())
            step_sums = metrics if step_sums is None else {k: step_sums[k] + v for k, v in metrics.items()}
            new_parts.append(new_carry)
        new_carry = _join_micro(new_parts)

        params = [p for p in self.model.parameters() if p.grad is not None]
        self.runtime.all_reduce_sum_([p.grad for p in params] + list(step_sums.values()))
        finite = torch.isfinite(step_sums['loss'])
        self._update(lr, puzzle_lr, finite)

        step_sums['rows'] = torch.full((), float(self.global_batch), device=step.device)
        step_sums['nonfinite'] = (~finite).float()
        step_sums['updates'] = torch.ones((), device=step.device)
        new_sums = {k: sums[k] + step_sums[k].float() for k in TRAIN_SUMS if k in step_sums}
        new_sums.update({k: sums[k] for k in TRAIN_SUMS if k not in step_sums})
        new_sums['nonfinite_total'] = sums['nonfinite_total'] + step_sums['nonfinite']
        new_sums['lr_last'] = lr.float()
        new_sums['exploration_last'] = torch.as_tensor(explore, dtype=torch.float32, device=step.device)
        return new_carry, step + 1, new_sums

    def _update(self, lr, puzzle_lr, finite):
        grad_clip = self.config.optim.grad_clip
        main_params = [p for g in self.main_optimizer.param_groups for p in g['params']]
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(main_params, grad_clip, foreach=True)
        skip = self.config.train.nan_policy == 'skip'
        if skip:
            before = [t.detach().clone() for t in self._update_state()]
        set_lr(self.main_optimizer, lr)
        if self.puzzle_optimizer is not None:
            set_lr(self.puzzle_optimizer, puzzle_lr)
        for opt in self.optimizers:
            opt.step()
        if skip:
            # A non-finite step leaves every parameter and optimizer state as it was.
            for t, old in zip(self._update_state(), before):
                t.copy_(torch.where(finite, t, old))
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)   # grads created in-graph each step: one graph for all steps
        if self.ema is not None:
            self.ema.update()

    def _update_state(self):
        tensors = [p.data for p in self.model.parameters()]
        for opt in self.optimizers:
            for state in opt.state.values():
                tensors.extend(v for v in state.values() if torch.is_tensor(v))
        return tensors


class EvalStep:
    """One ACT step in eval mode; the evaluation runs it exactly halt_max_steps times."""

    def __init__(self, model, cfg):
        self.model = model
        self.cfg = cfg

    def __call__(self, carry, batch):
        with torch.no_grad():
            new_carry, outputs = act_step(self.model, carry, batch, training=False,
                                          exploration_prob=0.0, uniforms=None)
        return new_carry, outputs
