"""Semantic checks of a resolved config, each failing with one line: cause and fix.

Type errors and unknown keys are caught earlier by the locked, type-safe ConfigDict;
these are the rules a type cannot express.
"""

import hashlib
import json
import math

from trm_spmd import tasks
from trm_spmd.data.mixture import batch_rows
from trm_spmd.errors import UserError
from trm_spmd.extras import require_wandb
from trm_spmd.model.config import ModelConfigError, TRMConfig


class ConfigError(UserError):
    """A config that cannot run. The message is one line naming the field and the fix."""


def _check(ok, message):
    if not ok:
        raise ConfigError(message)


def _one_of(value, name, allowed):
    _check(value in allowed, f'{name}={value!r} is not one of {", ".join(map(repr, allowed))}')


def resolve_mesh_shape(shape, device_count):
    """(data, model) with one -1 filled in; the product must equal the device count."""
    shape = tuple(int(s) for s in shape)
    _check(len(shape) == 2, f'mesh.shape={shape} must have 2 entries (data, model)')
    _check(shape.count(-1) <= 1, f'mesh.shape={shape}: at most one entry may be -1')
    _check(all(s == -1 or s >= 1 for s in shape), f'mesh.shape={shape}: entries must be >= 1 or -1')
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        _check(device_count % known == 0,
               f'mesh.shape={shape} cannot cover {device_count} devices: '
               f'{device_count} is not divisible by {known}')
        shape = tuple(device_count // known if s == -1 else s for s in shape)
    _check(math.prod(shape) == device_count,
           f'mesh.shape={shape} has {math.prod(shape)} devices but {device_count} exist; '
           f'use -1 for the data axis to fill it')
    return shape


def _check_mixture(d):
    if not d.mixture:
        _check(not d.mixture_weights and not d.mixture_paths,
               'data.mixture_weights and data.mixture_paths need a data.mixture (the tasks they are of)')
        return
    _check(len(d.mixture) >= 2, f'data.mixture={tuple(d.mixture)} needs two tasks or more; one task is data.task')
    for name in d.mixture:
        _one_of(name, 'a task of data.mixture', tasks.NAMES)
    _check(len(set(d.mixture)) == len(d.mixture), f'data.mixture={tuple(d.mixture)} names a task twice')
    for field in ('mixture_weights', 'mixture_paths'):
        _check(len(d[field]) in (0, len(d.mixture)),
               f'data.{field}={tuple(d[field])} must have one entry per task of data.mixture={tuple(d.mixture)}')
    _check(all(w > 0 for w in d.mixture_weights), f'data.mixture_weights={tuple(d.mixture_weights)} must be > 0')
    _check(not d.path, f'data.path={d.path!r} is for one task: with data.mixture set data.mixture_paths')


def validate(config, device_count=None, process_count=1):
    """Raises ConfigError on the first problem. Device checks run when device_count is given."""
    c = config
    _one_of(c.mode, 'mode', ('train', 'eval'))
    _one_of(c.backend, 'backend', ('auto', 'xla', 'native'))
    _one_of(c.native.compile, 'native.compile',
            ('none', 'default', 'reduce-overhead', 'max-autotune', 'max-autotune-no-cudagraphs'))
    _one_of(c.data.task, 'data.task', tasks.NAMES)
    _check_mixture(c.data)
    if c.xla.token_mix_kernel:
        _check(c.model.mlp_t, 'xla.token_mix_kernel=True computes the token-mixing MLP: it needs model.mlp_t=True')
        _check(c.backend != 'native', 'xla.token_mix_kernel=True is a TPU kernel: it needs backend xla '
                                      '(or auto on a TPU VM)')
        _check(c.model.hidden_size % 128 == 0, f'xla.token_mix_kernel=True tiles the channels by 128: '
                                               f'model.hidden_size={c.model.hidden_size} must be a multiple of 128')
    if c.xla.attention_kernel:
        _check(not c.model.mlp_t, 'xla.attention_kernel=True computes self-attention: it needs model.mlp_t=False')
        _check(c.backend != 'native', 'xla.attention_kernel=True is a TPU kernel: it needs backend xla '
                                      '(or auto on a TPU VM)')
    try:   # the model's rules (shapes, dtypes, ACT, loss) live in TRMConfig; sizes: the task's
        TRMConfig.from_config(c, **tasks.sizes(c))
    except ModelConfigError as e:
        raise ConfigError(str(e)) from None
    a = c.act
    _check(0.0 <= a.exploration_prob_final <= 1.0,
           f'act.exploration_prob_final={a.exploration_prob_final} must be in [0, 1]')

    o = c.optim
    _one_of(o.name, 'optim.name', ('adam_atan2', 'adamw', 'lion', 'muon'))
    if o.name == 'muon':
        _check(0.0 <= o.muon_momentum < 1.0, f'optim.muon_momentum={o.muon_momentum} must be in [0, 1)')
        _check(o.muon_ns_steps >= 1, f'optim.muon_ns_steps={o.muon_ns_steps} must be >= 1')
    _check(o.lr > 0, f'optim.lr={o.lr} must be > 0')
    _check(o.puzzle_emb_lr >= 0, f'optim.puzzle_emb_lr={o.puzzle_emb_lr} must be >= 0')
    _check(o.warmup_steps >= 0, f'optim.warmup_steps={o.warmup_steps} must be >= 0')
    _check(0.0 <= o.lr_min_ratio <= 1.0, f'optim.lr_min_ratio={o.lr_min_ratio} must be in [0, 1]')
    _check(o.grad_accum_steps >= 1, f'optim.grad_accum_steps={o.grad_accum_steps} must be >= 1')
    _check(0.0 <= o.freeze_trunk_fraction < 1.0,
           f'optim.freeze_trunk_fraction={o.freeze_trunk_fraction} must be in [0, 1) (the share of the steps that '
           f'train the puzzle embedding alone)')
    _one_of(c.init_puzzle_emb, 'init_puzzle_emb', ('keep', 'mean', 'zero', 'random'))
    _check(0.0 <= c.ema.decay < 1.0, f'ema.decay={c.ema.decay} must be in [0, 1)')

    t = c.train
    _check(t.total_steps > 0 or t.epochs > 0, 'set train.epochs or train.total_steps to a positive number')
    _check(t.log_every_steps >= 1, f'train.log_every_steps={t.log_every_steps} must be >= 1')
    _one_of(t.nan_policy, 'train.nan_policy', ('stop', 'skip'))
    _check(0.0 <= t.stop_at_exact_accuracy <= 1.0,
           f'train.stop_at_exact_accuracy={t.stop_at_exact_accuracy} must be in [0, 1] (0: off)')

    cu = c.curriculum
    if cu.enabled:
        n = len(cu.start_fractions)
        _check(n >= 1 and len(cu.H_cycles) == n and len(cu.L_cycles) == n,
               'curriculum.start_fractions, H_cycles and L_cycles must have the same, non-zero length')
        _check(cu.start_fractions[0] == 0.0 and list(cu.start_fractions) == sorted(cu.start_fractions),
               f'curriculum.start_fractions={cu.start_fractions} must start at 0.0 and increase')
        _check(min(cu.H_cycles) >= 1 and min(cu.L_cycles) >= 1, 'curriculum cycles must be >= 1')

    _check(c.eval.puzzle_ids in ('trained', 'blank', 'random'),
           f"eval.puzzle_ids={c.eval.puzzle_ids!r} must be 'trained', 'blank' or 'random'")
    _check(c.eval.samples >= 0, f'eval.samples={c.eval.samples} must be >= 0 (0: keep none)')
    _check(c.eval.act_steps >= 0, f'eval.act_steps={c.eval.act_steps} must be >= 0 (0: act.halt_max_steps)')
    _check(all(int(k) >= 1 for k in c.eval.report_act_steps),
           f'eval.report_act_steps={tuple(c.eval.report_act_steps)} must all be >= 1')
    _check(c.checkpoint.keep >= 1, f'checkpoint.keep={c.checkpoint.keep} must be >= 1')
    _check(c.checkpoint.keep_best >= 0, f'checkpoint.keep_best={c.checkpoint.keep_best} must be >= 0')
    _check(len(c.mesh.axis_names) == 2 and tuple(c.mesh.axis_names) == ('data', 'model'),
           f'mesh.axis_names={c.mesh.axis_names} must be (data, model)')
    _check(c.data.generate_num_aug >= 0, f'data.generate_num_aug={c.data.generate_num_aug} must be >= 0')
    _one_of(c.data.arc_source, 'data.arc_source', ('arc1', 'arc2'))
    names = tuple(c.data.mixture) or (c.data.task,)
    which = f'none of the tasks {names} has' if c.data.mixture else f'task {c.data.task} has no'
    _check(not c.data.augment or any(tasks.get(name).augmentation is not None for name in names),
           f'data.augment=True but {which} on-the-fly symmetries (augmented copies are '
           f'built into the dataset): set --config.data.augment=False')
    _check(c.data.arc_max_tasks >= 0, f'data.arc_max_tasks={c.data.arc_max_tasks} must be >= 0 (0: all)')
    if c.mode == 'train':
        paths = tuple(c.data.mixture_paths) or ('',) * len(c.data.mixture) if c.data.mixture else (c.data.path,)
        for name, path in zip(names, paths):
            _check(bool(path) or c.data.generate,
                   f'no {name} dataset: set --config.{"data.mixture_paths" if c.data.mixture else "data.path"} '
                   f'(build one with {tasks.get(name).build_command()}) or --config.data.generate=True')

    batch, eval_batch = c.data.global_batch_size, c.eval.global_batch_size
    _check(batch >= 1 and eval_batch >= 1, 'data.global_batch_size and eval.global_batch_size must be >= 1')
    if c.data.mixture:
        rows = batch_rows(c.data)
        _check(min(rows) >= 1, f'data.global_batch_size={batch} split by data.mixture_weights='
                               f'{tuple(c.data.mixture_weights)} gives {dict(zip(c.data.mixture, rows))} rows: '
                               f'every task needs at least one; raise its weight or the batch')
    _check(batch % o.grad_accum_steps == 0,
           f'data.global_batch_size={batch} is not divisible by optim.grad_accum_steps={o.grad_accum_steps}')
    _check(not c.logging.wandb or c.logging.wandb_project, 'logging.wandb=True needs a logging.wandb_project')
    if device_count is not None:
        if c.logging.wandb:   # this machine is about to run it: the optional package must be here
            require_wandb()
        data_axis, model_axis = resolve_mesh_shape(c.mesh.shape, device_count)
        _check(model_axis == 1, f'mesh.shape model axis={model_axis}: only data parallelism (model=1) is supported')
        micro = batch // o.grad_accum_steps
        for name, size in (('data.global_batch_size / optim.grad_accum_steps', micro),
                           ('eval.global_batch_size', eval_batch)):
            _check(size % data_axis == 0,
                   f'{name}={size} is not divisible by the data axis ({data_axis} devices); '
                   f'pick a multiple of {data_axis}')
            _check(size % process_count == 0,
                   f'{name}={size} is not divisible by the {process_count} hosts')


def config_hash(config):
    """A short stable hash of the resolved config: equal configs on every host, equal hash."""
    text = json.dumps(json.loads(config.to_json_best_effort()), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
