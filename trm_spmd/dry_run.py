"""--dry_run: everything a run would be, without training it."""

import sys

from trm_spmd import scale, tasks
from trm_spmd.config import config_hash, validate
from trm_spmd.data import mixture
from trm_spmd.model.config import TRMConfig
from trm_spmd.model.flops import train_flops_per_example_step
from trm_spmd.model.families import build_model
from trm_spmd.model.network import trainable_param_count
from trm_spmd.runtime import create_runtime


def _task_line(config, cfg):
    if not config.data.mixture:
        return f'{config.data.task} (sequence {cfg.seq_len}, vocabulary {cfg.vocab_size})'
    maps = mixture.planned_maps(tasks.of_config(config), config.data)
    line = mixture.describe(maps, mixture.batch_rows(config.data))
    return f'{line} (vocabulary {cfg.vocab_size})'


def dry_run(config, source, print_fn=print):
    runtime = create_runtime(config)
    validate(config, runtime.device_count, runtime.process_count)
    data_axis, model_axis = runtime.mesh_shape
    batch = config.data.global_batch_size
    cfg = TRMConfig.from_config(config, **tasks.sizes(config)).with_auto_dtype(runtime.fast_dtype) \
        .with_auto_attention(runtime.fast_attention)
    params = trainable_param_count(build_model(cfg))
    flops = train_flops_per_example_step(cfg)
    print_fn(config.to_yaml() if hasattr(config, 'to_yaml') else str(config))
    lines = [
        ('config', source.get('config_file', '')),
        ('overrides', source.get('overrides', {}) or '-'),
        ('config hash', config_hash(config)),
        ('backend', f'{runtime.name} ({runtime.device_kind})'),
        ('mesh', f'({data_axis}, {model_axis}) axes {tuple(runtime.axis_names)}'),
        ('devices', f'{runtime.device_count} total, {runtime.local_device_count} per host, '
                    f'{runtime.process_count} host(s), this is host {runtime.process_index}'),
        ('task', _task_line(config, cfg)),
        ('global batch', batch),
        ('per-host batch', batch // runtime.process_count),
        ('per-device batch', batch // data_axis),
        ('micro-batches per step', config.optim.grad_accum_steps),
        ('trainable parameters', f'{params:,}'),
        ('compute dtype', cfg.forward_dtype),
        ('token mixing', cfg.token_mixing(config.xla.token_mix_kernel if cfg.mlp_t else config.xla.attention_kernel)),
        ('train FLOPs per example per ACT step', f'{flops / 1e9:.2f} GFLOP'),
        ('train FLOPs per step (global batch)', f'{flops * batch / 1e12:.2f} TFLOP'),
    ]
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print_fn(f'{key:<{width}}  {value}')
    warning = scale.far_outside_plan(flops * batch, runtime.device_count, runtime.device_kind)
    if warning:
        print(warning, file=sys.stderr, flush=True)
