"""When things happen in a run: its length, the eval cadence, curriculum stages, the frozen
first share of a post-training run, itstime."""

import math


def schedule_steps(config, epoch_examples, global_batch=None):
    """(total_steps, eval_every): the reference counts both in epochs, of `epoch_examples`
    rows each (Split.epoch_examples: the group count where puzzles are single examples).
    global_batch defaults to the config's (a projection asks about other batches)."""
    t, batch = config.train, global_batch or config.data.global_batch_size
    total = max(t.total_steps if t.total_steps > 0 else int(t.epochs * epoch_examples / batch), 1)
    every = t.eval_every_steps if t.eval_every_steps > 0 else int(t.eval_every_epochs * epoch_examples / batch)
    return total, min(max(every, 1), total)


def curriculum_stages(config, total_steps):
    """[(first_step, H_cycles, L_cycles)], one compiled graph each. Without curriculum, one stage."""
    cu, m = config.curriculum, config.model
    if not cu.enabled:
        return [(0, m.H_cycles, m.L_cycles)]
    return [(int(f * total_steps), h, l) for f, h, l in zip(cu.start_fractions, cu.H_cycles, cu.L_cycles)]


def stage_at(stages, step):
    """(H_cycles, L_cycles) of the stage that trains step `step` (0-based)."""
    return next((h, l) for first, h, l in reversed(stages) if step >= first)


def frozen_trunk_steps(config, total_steps):
    """Steps at the start of the run that train the puzzle embedding alone (the public
    post-training recipe's freeze_trunk_until_step: ceil of the share of the steps)."""
    return min(math.ceil(config.optim.freeze_trunk_fraction * total_steps), total_steps)


def train_graphs(config, total_steps):
    """[(H_cycles, L_cycles, trunk_frozen)]: the distinct train steps a run compiles."""
    frozen = (True, False) if frozen_trunk_steps(config, total_steps) else (False,)
    return list(dict.fromkeys((H, L, f) for _, H, L in curriculum_stages(config, total_steps) for f in frozen))


def graph_at(stages, frozen_steps, step):
    """The (H_cycles, L_cycles, trunk_frozen) of the train step that trains step `step` (0-based)."""
    return (*stage_at(stages, step), step < frozen_steps)


def itstime(step, every, total_steps):
    """True at every `every`-th step and at the last one (steps count from 1)."""
    return step == total_steps or (every > 0 and step % every == 0)
