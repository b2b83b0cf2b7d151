"""The real TPU compiler on this machine: what a config's steps need on a TPU slice.

    python benchmarks/tpu_compile.py --config=configs/baseline.py --slice=v4-64 --global_batch=6144
    python benchmarks/tpu_compile.py --config=configs/scaling.py:large_model --slice=v4-64 --global_batch=6144
    python benchmarks/tpu_compile.py --config=configs/baseline.py --slice=v4-8 --max_batch

No TPU is needed. The steps are traced through the training code's own path (train.setup's
trainer, the Evaluator's eval step, the EMA swap) by torch_xla on one virtual CPU device per
chip of the slice, in a child process; nothing is compiled for the CPU or run. libtpu then
compiles each graph's HLO module (with its SPMD shardings) for the slice's topology, as it
would on the pod (trm_spmd/runtime/tpu_aot.py), and reports per chip:

- HBM: arguments, outputs, temporaries and the total, against the chip's HBM (v4: 32 GiB);
- the compiler's FLOP count against the analytic count of trm_spmd.model.flops;
- the collectives of the partitioned program (op, count, bytes) and the matmul types;
- where the cost model's time goes, by category (each matmul under the weight it uses);
- the compiler's cost-model time, and from it a step time and MFU, labelled as a compiler
  estimate: no step was measured. Host input, host syncs and checkpoints are not in it.

--max_batch bisects the largest per-chip batch whose train step fits in HBM. Results go to
benchmarks/results/tpu_compile_<slice>_<date>[_tag].{json,md}.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import flags

if __package__ in (None, ''):
    # Run as `python benchmarks/tpu_compile.py`: make `benchmarks.*` importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common, projection  # noqa: E402
from trm_spmd.errors import UserError  # noqa: E402

GRAPHS = ('train_step', 'eval_step', 'ema_swap')
# On request only: the frozen-trunk step of a post-training run (optim.freeze_trunk_fraction > 0).
ALL_GRAPHS = GRAPHS + ('train_step_frozen',)
# Graphs that write the parameters the others read: each traced in a process of its own.
OWN_PROCESS = ('ema_swap', 'train_step_frozen')
# The child traces with torch_xla in this environment, as it was before libtpu, loaded here
# for compiling, set its own variables (TPU_LIBRARY_PATH would make torch_xla load it too).
_START_ENV = dict(os.environ)
_TRACE_INFO = 'trace.json'


# ---- the child: tracing on virtual CPU devices (torch_xla) ------------------------------
def trace_graphs(config, runtime, graphs=GRAPHS):
    """{name: (serialized HloModuleProto, info)} of the train step, one eval ACT step and the
    EMA swap, built as the training loop builds them, traced on `runtime` and never compiled
    or executed.

    The one function of the benchmarks that uses the trainer and evaluator API
    (train.setup, train_step(state, batch), train.evaluate.Evaluator, optim.ema.EMA).
    """
    from trm_spmd.model.flops import eval_flops_per_example_step, train_flops_per_example_step
    from trm_spmd.model.trm import trainable_param_count
    from trm_spmd.train.evaluate import DifficultyBuckets, Evaluator
    from trm_spmd.train.schedule import curriculum_stages
    from trm_spmd.train.setup import build_trainer, compile_train_steps, initial_state

    # The steps are traced, not compiled: runtime.compile hands back the step itself, and
    # each graph is read where the compiled function would sync. The EMA swap changes the
    # parameters the other graphs read, so it is traced in a process of its own.
    for name in OWN_PROCESS:
        if name in graphs and len(graphs) > 1:
            raise ValueError(f'trace {name} on its own: it writes the parameters the other graphs read')
    runtime.compile = lambda fn, name, max_graphs=None: fn
    runtime.trace_only = True
    batch = config.data.global_batch_size
    eval_batch = config.eval.global_batch_size
    total_steps = projection.run_steps(config, batch)
    _, H, L = curriculum_stages(config, total_steps)[0]
    rng = np.random.default_rng(config.seed)
    out = {}

    def nbytes(tensors):
        return int(sum(t.numel() * t.element_size() for t in tensors))

    # Every transfer and sync happens before the first traced step: a sync later would run
    # the traced graphs on the CPU.
    trainer = build_trainer(config, runtime)
    train_steps = compile_train_steps(trainer, config, runtime, total_steps)
    train_step = train_steps[H, L, False]
    if 'train_step_frozen' in graphs and (H, L, True) not in train_steps:
        raise UserError('--graphs=train_step_frozen: this config has no frozen phase (optim.freeze_trunk_fraction 0)')
    state = initial_state(trainer, runtime, batch)
    train_batch = runtime.put_batch(common.synthetic_batch(rng, batch, config=config))
    evaluator = Evaluator(trainer, config, runtime, common.SyntheticTestSplit(), DifficultyBuckets('difficulty', 'blanks', range(0, 85, 5)), '')
    host_eval = common.synthetic_batch(rng, eval_batch, config=config)
    eval_inputs = runtime.put_batch({**host_eval, 'bucket': np.zeros(eval_batch, np.int32)})
    eval_carry = evaluator._initial_carry()
    params = [p for p in trainer.model.parameters()]
    sharded = trainer.row_sharded(runtime)   # split by rows over the chips: a chip holds 1/chips of each
    table = trainer.model.puzzle_emb
    # Each matmul weight's shape, labelled by its place in a block ('mlp_t.gate_up_proj'), to
    # tell the compiled module's matmuls apart (TRM's blocks are L_level.layers.N, URM's layers.N).
    from trm_spmd.model.layers import CastedLinear
    weights = {re.sub(r'^(L_level\.)?layers\.\d+\.', '', name): list(module.weight.shape)
               for name, module in trainer.model.named_modules() if isinstance(module, CastedLinear)}
    shared = {
        'trainable_parameters': trainable_param_count(trainer.model),
        'parameter_bytes': nbytes(params),
        # What a train step writes in place, per chip (torch_xla donates these buffers to the step).
        'state_bytes': nbytes(trainer.persistent_tensors(skip=sharded)) + nbytes(sharded) // runtime.device_count,
        'puzzle_emb_shape': list(table.shape) if table is not None else None,
        'puzzle_emb_bytes': nbytes([table]) if table is not None else 0,
        'puzzle_emb_row_sharded': bool(sharded),
        'H_cycles': H, 'L_cycles': L, 'halt_max_steps': trainer.cfg.halt_max_steps,
        'forward_dtype': trainer.cfg.forward_dtype, 'grad_accum_steps': config.optim.grad_accum_steps,
        'weights': weights,
        'token_mixing': trainer.cfg.token_mixing(config.xla.token_mix_kernel if trainer.cfg.mlp_t
                                                 else config.xla.attention_kernel),
    }
    if config.xla.attention_kernel:   # the share of tiles the kernels compute under the model's mask
        from trm_spmd.model.attention_mask import attention_mask
        from trm_spmd.runtime.attention_kernel import visible_tiles
        c = trainer.cfg
        mask = attention_mask(c.attention_mask, c.seq_len, c.prefix_len, c.attention_window)
        shared['attention_visible_tiles'] = visible_tiles(None if mask is None else mask.numpy(), c.total_len)
    flops_train = train_flops_per_example_step(trainer.cfg, H, L)
    flops_eval = eval_flops_per_example_step(trainer.cfg)   # eval runs the config's cycles

    if 'eval_step' in graphs:
        new_carry, outputs = evaluator._step_fn(evaluator.act_steps)(eval_carry, eval_inputs)
        tensors = list(new_carry.values()) + list(outputs.values())
        out['eval_step'] = (runtime.hlo_module_proto(tensors),
                            {**shared, 'global_batch': eval_batch, 'analytic_flops_per_example': flops_eval,
                             'donated_bytes': 0,
                             'what': 'one eval ACT step (the evaluation runs eval.act_steps of them per batch)'})
    if 'train_step' in graphs:
        new_state, metrics = train_step(state, train_batch)
        tensors = (list(new_state.carry.values()) + [new_state.step] + list(metrics.values())
                   + trainer.persistent_tensors())
        out['train_step'] = (runtime.hlo_module_proto(tensors),
                             {**shared, 'global_batch': batch, 'analytic_flops_per_example': flops_train,
                              'donated_bytes': shared['state_bytes'],
                              'what': 'one training ACT step with its optimizer update and EMA'})
    if 'train_step_frozen' in graphs:
        new_state, metrics = train_steps[H, L, True](state, train_batch)
        tensors = (list(new_state.carry.values()) + [new_state.step] + list(metrics.values())
                   + trainer.persistent_tensors())
        out['train_step_frozen'] = (runtime.hlo_module_proto(tensors),
                                    {**shared, 'global_batch': batch, 'analytic_flops_per_example': flops_train,
                                     'donated_bytes': shared['state_bytes'],
                                     'what': 'one training ACT step of the frozen phase: the puzzle embedding alone '
                                             'trained'})
    if 'ema_swap' in graphs and trainer.ema is not None:
        trainer.ema.swap_into()
        tensors = [p.data for p in trainer.ema.params] + list(trainer.ema.shadow)
        out['ema_swap'] = (runtime.hlo_module_proto(tensors),
                           {**shared, 'global_batch': 0, 'analytic_flops_per_example': 0.0,
                            'donated_bytes': nbytes(tensors),
                            'what': 'the EMA weights swapped into the model before an evaluation (and back after)'})
    return out


def _trace_main(directory):
    """Child process: trace the graphs of the configured run, write NAME.hlo.pb + trace.json."""
    from trm_spmd.config import validate
    from trm_spmd.runtime import create_runtime
    config, _ = _load()
    config.backend = 'xla'
    start = time.perf_counter()
    runtime = create_runtime(config)
    runtime.fast_dtype = 'bfloat16'   # model.forward_dtype 'auto' as on the TPU, not on these CPU devices
    runtime.fast_attention = 'blockwise'   # model.attention_impl 'auto' likewise
    validate(config, runtime.device_count, runtime.process_count)
    graphs = trace_graphs(config, runtime, tuple(flags.FLAGS.graphs))
    info = {'devices': runtime.device_count, 'trace_s': time.perf_counter() - start, 'graphs': {}}
    for name, (proto, meta) in graphs.items():
        with open(os.path.join(directory, f'{name}.hlo.pb'), 'wb') as f:
            f.write(proto)
        info['graphs'][name] = meta
    with open(os.path.join(directory, _TRACE_INFO), 'w') as f:
        json.dump(info, f)


# ---- the parent: trace in a child, compile with libtpu, report ------------------------------
def _load():
    FLAGS = flags.FLAGS
    return common.config_and_overrides(**{'data.global_batch_size': FLAGS.global_batch,
                                          'eval.global_batch_size': FLAGS.eval_batch})


def trace_in_child(chips, global_batch, graphs, directory, timeout=3600):
    """Runs this script with --trace_to on `chips` virtual CPU devices; returns its trace.json."""
    FLAGS = flags.FLAGS
    args = [sys.executable, os.path.abspath(__file__), f'--trace_to={directory}',
            f'--config={FLAGS["config"].config_filename}', *_override_args(),
            f'--global_batch={global_batch}', f'--eval_batch={FLAGS.eval_batch}', f'--graphs={",".join(graphs)}']
    env = dict(_START_ENV, PJRT_DEVICE='CPU', CPU_NUM_DEVICES=str(chips), TF_CPP_MIN_LOG_LEVEL='2')
    env.pop('XLA_FLAGS', None)
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        log = os.path.join(tempfile.gettempdir(), f'trm_tpu_compile_trace_{os.getpid()}.log')
        with open(log, 'w') as f:
            f.write(done.stdout + done.stderr)
        lines = [l for l in (done.stderr or done.stdout).strip().splitlines() if 'Error' in l] or ['(no error line)']
        raise UserError(f'tracing the steps on {chips} CPU devices failed (exit {done.returncode}): '
                        f'{lines[-1].strip()}; the whole output is in {log}')
    with open(os.path.join(directory, _TRACE_INFO)) as f:
        return json.load(f)


def compile_config(tpu_slice, topo, global_batch, graphs, save_hlo=''):
    """Trace (child process) and compile every graph -> {name: figures}; with save_hlo, the
    traced module (.hlo.pb) and libtpu's optimised one (.optimized.txt) are kept there."""
    from trm_spmd.runtime import tpu_aot
    groups = [[g for g in graphs if g not in OWN_PROCESS]] + [[g] for g in OWN_PROCESS if g in graphs]
    results = {'_trace_s': 0.0}
    for group in filter(None, groups):
        with tempfile.TemporaryDirectory(prefix='trm_tpu_compile_') as directory:
            info = trace_in_child(tpu_slice.chips, global_batch, group, directory)
            results['_trace_s'] += info['trace_s']
            for name, meta in info['graphs'].items():
                with open(os.path.join(directory, f'{name}.hlo.pb'), 'rb') as f:
                    proto = f.read()
                figures = tpu_aot.compile_module(proto, topo)
                text = figures.pop('optimized_hlo')
                if save_hlo:
                    os.makedirs(save_hlo, exist_ok=True)
                    stem = os.path.join(save_hlo, f'{name}_{tpu_slice.name}_b{global_batch}')
                    with open(stem + '.hlo.pb', 'wb') as f:
                        f.write(proto)
                    with open(stem + '.optimized.txt', 'w') as f:
                        f.write(text)
                results[name] = graph_figures(meta, figures, tpu_slice)
    return results


def time_by_category(cycles, weights):
    """{category: share of the cost model's cycles} of the entry computation's instructions
    (tpu_aot.instruction_cycles): a matmul by the weight it uses (whose shape is its result's,
    for a weight gradient, or an operand's), other fusions (elementwise work, reductions), and
    other ops by opcode."""
    from trm_spmd.runtime.tpu_aot import COLLECTIVES
    by_shape = {tuple(shape): label for label, shape in weights.items()}
    totals = {}
    for op, count, shapes in cycles:
        if shapes is not None:
            label = next((by_shape[s] for s in shapes if s in by_shape), 'other')
            category = f'matmul {label}' + (' (weight gradient)' if shapes[0] in by_shape else '')
        elif op.startswith('fusion'):
            category = 'elementwise and reductions (fusions)'
        elif op.removesuffix('-start').removesuffix('-done') in COLLECTIVES:
            category = 'collectives'
        else:
            category = op
        totals[category] = totals.get(category, 0) + count
    whole = sum(totals.values()) or 1
    return {k: v / whole for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def kernel_rooflines(calls, chip_kind, attention_visible_tiles=1.0):
    """The Pallas kernel calls of a compiled module at their roofline, all together
    (calls, mxu_flops, bytes, roofline_seconds) and 'by_kind' ('token mix', 'attention'), or
    None without calls. attention_visible_tiles: the share of tiles the attention kernels
    compute under the model's mask (the block table's values are not in the module)."""
    from trm_spmd.runtime import attention_kernel, token_mix_kernel
    attention = [c for c in calls if attention_kernel.is_attention_call(c[1])]
    token_mix = [c for c in calls if not attention_kernel.is_attention_call(c[1])]
    by_kind = {'token mix': token_mix_kernel.roofline(token_mix, chip_kind),
               'attention': attention_kernel.roofline(attention, chip_kind, attention_visible_tiles)}
    by_kind = {k: v for k, v in by_kind.items() if v}
    if not by_kind:
        return None
    total = {key: sum(v[key] for v in by_kind.values()) for key in ('calls', 'mxu_flops', 'bytes', 'roofline_seconds')}
    return {**total, 'by_kind': by_kind}


def estimate_label(r):
    """How a figure from a graph's estimated time is to be read: the cost model's estimate,
    and, where Pallas kernels are in it, their roofline, a bound."""
    if r.get('kernels'):
        return 'compiler estimate, with the Pallas kernels at their roofline: a bound'
    return 'compiler estimate'


def graph_figures(meta, compiled, tpu_slice):
    """The compiler's figures of one graph next to the analytic ones, per chip."""
    memory = dict(compiled['memory'])
    # torch_xla donates the buffers a step updates in place (parameters, optimizer state,
    # EMA) to its outputs; the module handed over here carries no donation, so the compiler
    # counts them twice.
    donated = meta['donated_bytes']
    memory['donated_state_bytes'] = donated
    memory['total_with_donation_bytes'] = memory['total_bytes'] - donated
    memory['fits'] = memory['total_with_donation_bytes'] <= memory['hbm_bytes']
    batch = meta['global_batch']
    analytic = meta['analytic_flops_per_example'] * batch / tpu_slice.chips
    by_category = time_by_category(compiled.get('cycles', []), meta.get('weights', {}))
    # Pallas kernels get no time from the cost model: their roofline.
    kernels = kernel_rooflines(compiled.get('mosaic_kernels', []), tpu_slice.kind,
                               meta.get('attention_visible_tiles', 1.0))
    seconds = compiled['optimal_seconds']
    if kernels and seconds:
        # The kernels' roofline joins the cost model's time, a category per kind of kernel.
        rest = seconds
        seconds += kernels['roofline_seconds']
        by_category = {k: v * rest / seconds for k, v in by_category.items()}
        for kind, bound in kernels['by_kind'].items():
            by_category[f'{kind} kernels (roofline)'] = bound['roofline_seconds'] / seconds
        by_category = dict(sorted(by_category.items(), key=lambda kv: -kv[1]))
    compiled = {**{k: v for k, v in compiled.items() if k not in ('cycles', 'mosaic_kernels')},
                'time_by_category': by_category, 'kernels': kernels}
    out = {**meta, **compiled, 'memory': memory, 'per_chip_batch': batch / tpu_slice.chips,
           'analytic_flops_per_chip': analytic,
           'compiler_to_analytic_flops': compiled['flops'] / analytic if analytic else None}
    if seconds and analytic:
        out['estimated_step_ms'] = seconds * 1e3
        out['estimated_mfu'] = analytic / seconds / (tpu_slice.peak_tflops * 1e12)
        out['estimated_examples_per_s'] = batch / seconds
    return out


def max_per_chip_batch(fits, start=8, resolution=8, limit=1 << 16):
    """Largest per-chip batch b (a multiple of `resolution`) with fits(b), by doubling from
    `start` then bisecting; fits must be monotone. Returns (b, [(b, fits), ...]). A step
    that does not fit is one libtpu refuses to compile (out of HBM) or whose total exceeds
    the chip's HBM."""
    probes = []

    def probe(b):
        ok = fits(b)
        probes.append((b, ok))
        return ok

    if not probe(start):
        raise UserError(f'even a per-chip batch of {start} does not fit in HBM')
    lo, hi = start, None
    while hi is None:
        b = lo * 2
        if b > limit:
            return lo, probes
        if probe(b):
            lo = b
        else:
            hi = b
    while hi - lo > resolution:
        mid = (lo + hi) // 2 // resolution * resolution
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return lo, probes


def _mb(value):
    return f'{value / 1e6:,.1f} MB' if value < 1e9 else f'{value / 2**30:.2f} GiB'


def _gib(value):
    return f'{value / 2**30:.2f} GiB'


def report_lines(name, r, tpu_slice, target_ms):
    m = r['memory']
    head = f'{name}: {r["what"]}'
    if r['global_batch']:
        head += f'; global batch {r["global_batch"]} ({r["per_chip_batch"]:g} per chip)'
    if r.get('token_mixing'):
        head += f'; token mixing: {r["token_mixing"]}'
    lines = [head,
             f'  HBM per chip     arguments {_gib(m["argument_bytes"])}, outputs {_gib(m["output_bytes"])}, '
             f'temporaries {_gib(m["temp_bytes"])}, code {_mb(m["generated_code_bytes"])}',
             f'                   total {_gib(m["total_with_donation_bytes"])} of {_gib(m["hbm_bytes"])} '
             f'({m["total_with_donation_bytes"] / m["hbm_bytes"]:.0%}; '
             + (f'fits, {_gib(m["hbm_bytes"] - m["total_with_donation_bytes"])} free)' if m['fits'] else 'DOES NOT FIT)')
             + (f'; {_gib(m["total_bytes"])} if the updated state were not donated' if m['donated_state_bytes'] else '')]
    if r['analytic_flops_per_chip']:
        lines.append(f'  FLOPs per chip   compiler {r["flops"] / 1e12:.4g} TFLOP, analytic {r["analytic_flops_per_chip"] / 1e12:.4g} '
                     f'TFLOP (matmuls only): ratio {r["compiler_to_analytic_flops"]:.2f}')
    coll = r['collectives']
    lines.append('  collectives      ' + ('; '.join(f'{op} x{c["count"]} {_mb(c["bytes"])}' for op, c in sorted(coll.items()))
                                         if coll else 'none'))
    if r['global_batch'] and name == 'train_step':
        lines.append(f'                   (parameters: {_mb(r["parameter_bytes"])} float32)')
        if r.get('puzzle_emb_shape') and r['puzzle_emb_shape'][0] > 1:
            rows, width = r['puzzle_emb_shape']
            share = r['puzzle_emb_bytes'] / (tpu_slice.chips if r['puzzle_emb_row_sharded'] else 1)
            lines.append(f'  puzzle emb       {rows:,} x {width} float32, {_mb(r["puzzle_emb_bytes"])}: {_mb(share)} per '
                         + (f'chip (split by rows over {tpu_slice.chips} chips)' if r['puzzle_emb_row_sharded']
                            else 'chip (replicated)'))
    mm = r['matmuls']
    lines.append('  matmuls          ' + (', '.join(f'{k}: {v}' for k, v in sorted(mm.items(), key=lambda kv: -kv[1]))
                                         if mm else 'none'))
    if r['optimal_seconds'] is None:
        lines.append('  cost model       libtpu gave no time estimate for this module')
    else:
        kernels = r.get('kernels')
        lines.append(f'  cost model       {r["optimal_seconds"] * 1e3:.3f} ms per execution (compiler estimate, not a measurement)'
                     + (' for all but the kernels' if kernels else ''))
        for kind, bound in (kernels or {}).get('by_kind', {}).items():
            lines.append(f'  kernels          {bound["calls"]} Pallas kernel calls ({kind}), no cost-model time: '
                         f'{bound["mxu_flops"] / 1e12:.3g} TFLOP on the MXU (padded to its tiles), '
                         f'{_mb(bound["bytes"])} of HBM traffic; at their roofline '
                         f'{bound["roofline_seconds"] * 1e3:.3f} ms, added below (a bound, not a measurement)')
        if r.get('estimated_step_ms') is not None and kernels:
            lines.append(f'  estimated        {r["estimated_step_ms"]:.3f} ms per execution ({estimate_label(r)})')
        if name == 'train_step' and r.get('estimated_mfu') is not None:
            floor_ms = r['analytic_flops_per_chip'] / (tpu_slice.peak_tflops * 1e12) * 1e3
            lines.append(f'  projected        {r["estimated_step_ms"]:.1f} ms/step, {r["estimated_examples_per_s"]:,.0f} examples/s, '
                         f'MFU {r["estimated_mfu"]:.0%} ({estimate_label(r)}); floor {floor_ms:.1f} ms, '
                         f'target {target_ms:g} ms: ' + ('within' if r['estimated_step_ms'] <= target_ms else
                                                        f'{r["estimated_step_ms"] / target_ms:.1f}x over'))
    shares = [f'{k} {v:.1%}' for k, v in r.get('time_by_category', {}).items() if v >= 0.005]
    if shares:
        lines.append('  time by op       ' + ', '.join(shares) + ' (cost-model cycles, entry computation)')
    lines.append(f'  compiled in      {r["compile_s"]:.1f} s ({r["instructions"]:,} HLO lines after optimisation)')
    return lines


def _override_args():
    """This command's --config.KEY[=VALUE] overrides, word for word, for the tracing child."""
    words, args = sys.argv[1:], []
    for i, word in enumerate(words):
        if word.startswith(('--config.', '--noconfig.')):
            args.append(word)
            if '=' not in word and i + 1 < len(words) and not words[i + 1].startswith('-'):
                args.append(words[i + 1])   # --config.KEY VALUE
    return args


def define_flags():
    common.define_flags()
    flags.DEFINE_string('slice', 'v4-64', 'TPU slice to compile for: v4-8 ... v4-512, v5e-1 ... v5e-256')
    flags.DEFINE_integer('global_batch', 0, 'global batch (0: the config\'s data.global_batch_size)')
    flags.DEFINE_integer('eval_batch', 0, 'global eval batch (0: the config\'s eval.global_batch_size)')
    flags.DEFINE_list('graphs', list(GRAPHS), f'graphs to compile, of {",".join(ALL_GRAPHS)}')
    flags.DEFINE_bool('max_batch', False, 'bisect the largest per-chip batch whose train step fits in HBM')
    flags.DEFINE_integer('max_batch_resolution', 8, 'per-chip batch resolution of --max_batch')
    flags.DEFINE_integer('max_batch_from', 8, 'per-chip batch --max_batch starts doubling from (one that fits)')
    flags.DEFINE_float('target_ms', projection.TARGET_MS, 'step-time target to judge')
    flags.DEFINE_string('save_hlo', '', 'keep each traced module and libtpu\'s optimised module in this directory')
    flags.DEFINE_string('trace_to', '', '(internal) trace the graphs into this directory and exit')


def slice_topology(name):
    """(projection.Slice, tpu_aot.Topology) of a slice name; one line for those not supported."""
    from trm_spmd.runtime import tpu_aot
    tpu_slice = projection.parse_slice(name)
    generation = tpu_slice.kind.replace('tpu-', '')
    return tpu_slice, tpu_aot.topology(generation, tpu_slice.chips)


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    if FLAGS.trace_to:
        return _trace_main(FLAGS.trace_to)
    from trm_spmd.runtime import tpu_aot
    unknown = sorted(set(FLAGS.graphs) - set(ALL_GRAPHS))
    if unknown:
        raise UserError(f'--graphs: unknown {", ".join(unknown)}; choose from {", ".join(ALL_GRAPHS)}')
    tpu_slice, topo = slice_topology(FLAGS.slice)
    versions = tpu_aot.check_environment()
    config, overrides = _load()
    batch = config.data.global_batch_size
    kind = tpu_aot.device_kind(topo)
    print(f'TPU compiler (libtpu {versions["libtpu"]}) for {tpu_slice.name} = {topo.name}, {topo.chips} chips '
          f'({kind}), {_gib(topo.hbm_bytes)} HBM per chip; config {FLAGS["config"].config_filename}', flush=True)
    lines, results = [], {}
    if FLAGS.max_batch:
        unit = max(FLAGS.max_batch_resolution, config.optim.grad_accum_steps)

        def fits(per_chip):
            try:
                r = compile_config(tpu_slice, topo, per_chip * tpu_slice.chips, ['train_step'])['train_step']
            except tpu_aot.HbmExhausted as e:
                print(f'  per-chip batch {per_chip}: does not fit ({str(e).split(": ", 1)[1]})', flush=True)
                return False
            m = r['memory']
            print(f'  per-chip batch {per_chip}: {_gib(m["total_with_donation_bytes"])} of {_gib(m["hbm_bytes"])} '
                  f'-> {"fits" if m["fits"] else "does not fit"}', flush=True)
            return m['fits']

        start = max(FLAGS.max_batch_from // unit * unit, unit)
        best, probes = max_per_chip_batch(fits, start=start, resolution=unit)
        results['max_per_chip_batch'] = best
        results['max_batch_probes'] = probes
        lines.append(f'largest per-chip batch whose train step fits: {best} (global {best * tpu_slice.chips} on '
                     f'{tpu_slice.name}; resolution {unit}; {len(probes)} compiles)')
        batch = best * tpu_slice.chips
    compiled = compile_config(tpu_slice, topo, batch, FLAGS.graphs, FLAGS.save_hlo)
    trace_s = compiled.pop('_trace_s')
    for name in ALL_GRAPHS:
        if name in compiled:
            lines += report_lines(name, compiled[name], tpu_slice, FLAGS.target_ms)
    results['graphs'] = compiled
    results['trace_s'] = trace_s
    train = compiled.get('train_step')
    if train and train.get('estimated_mfu') and train['estimated_mfu'] <= 1:
        p = projection.project(train['analytic_flops_per_example'], batch, tpu_slice, train['estimated_mfu'],
                               projection.run_steps(config, batch), FLAGS.target_ms)
        results['projection'] = p
        lines.append(f'projection at the estimated MFU ({estimate_label(train)}; not a measurement):')
        lines += ['  ' + line for line in projection.report_lines(p, estimate_label(train))]
    common.report('tpu_compile', {'slug': tpu_slice.name, 'description': f'{kind} ({topo.name}), compile-only: no TPU used',
                                  'kind': tpu_slice.kind, 'devices': topo.chips, 'hosts': tpu_slice.hosts,
                                  'peak_tflops': tpu_slice.peak_tflops, 'projected': True},
                  {'slice': tpu_slice.name, 'topology': topo.name, 'global_batch': batch,
                   'graphs': list(FLAGS.graphs), 'max_batch': FLAGS.max_batch, 'tpu_compiler': versions},
                  results, lines, overrides=overrides, notes=NOTE)


NOTE = ('Compiler estimates from libtpu compiling the traced steps for the topology on a machine without a TPU: '
        'no step was run or timed. Host input, host syncs, evaluation cadence and checkpoints are not in them.')


if __name__ == '__main__':
    common.run(define_flags, main)
