"""Training step time, throughput and MFU of a config on this machine's devices.

    python benchmarks/step_time.py --config=configs/baseline.py --steps=20 --warmup=2
    python benchmarks/step_time.py --config=configs/quickstart.py --config.model.hidden_size=256
    python benchmarks/step_time.py --config=configs/baseline.py --global_batch=6144 --project --slice=v4-64
    python benchmarks/step_time.py --config=configs/baseline.py:runlocal --profile=/tmp/trace
    python benchmarks/step_time.py --config=configs/quickstart.py --official=../TinyRecursiveModels

The real trainer (train.setup: model, optimizers, EMA, the compiled train_step) runs on
synthetic batches of valid token ranges; its cost does not depend on the values (fixed
shapes, halting by masking). Warm-up steps (tracing and compilation) are reported apart;
then every timed step is host-to-device transfer + step, followed by runtime.wait(), so
it measures execution rather than dispatch. A pipelined figure (steps dispatched back to
back, one wait at the end, as the training loop runs) follows. With --official=PATH the
official TinyRecursiveModels code at PATH trains the same network on the same batches in
the same process (benchmarks/official.py), and the ratio is printed. Results go to
benchmarks/results/step_time_<device>_<date>.{json,md}.

checkpoint_overhead.py and eval_throughput.py build on this module's TrainBench.
"""

import os
import sys
import time

import numpy as np
from absl import flags

if __package__ in (None, ''):
    # Run as `python benchmarks/step_time.py`: make `benchmarks.*` importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common, official, peaks, projection  # noqa: E402
from trm_spmd.config import validate  # noqa: E402
from trm_spmd.errors import UserError  # noqa: E402

# ---- the harness ------------------------------------------------------------------------
class TrainBench:
    """The real trainer and its TrainState, fed a few synthetic batches in turn."""

    def __init__(self, config, num_batches=4):
        from trm_spmd.model.flops import train_flops_per_example_step
        from trm_spmd.model.trm import trainable_param_count
        from trm_spmd.runtime import create_runtime
        from trm_spmd.train.schedule import curriculum_stages
        from trm_spmd.train.setup import build_trainer, compile_train_steps, initial_state

        self.config = config
        self.runtime = runtime = create_runtime(config)
        validate(config, runtime.device_count, runtime.process_count)
        self.global_batch = config.data.global_batch_size
        total_steps = projection.run_steps(config, self.global_batch)
        self.trainer = build_trainer(config, runtime)
        _, self.H, self.L = curriculum_stages(config, total_steps)[0]
        self.step_fn = compile_train_steps(self.trainer, config, runtime, total_steps)[self.H, self.L, False]
        self.state = initial_state(self.trainer, runtime, self.global_batch)
        rows = self.global_batch // runtime.process_count
        rng = np.random.default_rng([config.seed, runtime.process_index])
        self.host_batches = [common.synthetic_batch(rng, rows, config=config) for _ in range(num_batches)]
        self.flops_per_example = train_flops_per_example_step(self.trainer.cfg, self.H, self.L)
        self.parameters = trainable_param_count(self.trainer.model)
        self.count = 0

    def run(self, wait=True):
        """One step; with wait, returns (seconds, of which host-to-device transfer)."""
        host = self.host_batches[self.count % len(self.host_batches)]
        self.count += 1
        start = time.perf_counter()
        batch = self.runtime.put_batch(host)
        if wait:
            self.runtime.wait()
        placed = time.perf_counter()
        self.state, _ = self.step_fn(self.state, batch)
        if wait:
            self.runtime.wait()
        return time.perf_counter() - start, placed - start

    def pipelined(self, steps):
        """Mean seconds per step when `steps` are dispatched back to back and waited for once."""
        self.runtime.wait()
        start = time.perf_counter()
        for _ in range(steps):
            self.run(wait=False)
        self.runtime.wait()
        return (time.perf_counter() - start) / steps

    def compiles(self):
        return self.runtime.counters()['uncached_compiles'] if self.runtime.name == 'xla' else None


def measure(bench, warmup, steps, pipelined_steps=0):
    """Warm-up (compile) steps, then `steps` individually waited steps: a results dict."""
    if warmup < 1 or steps < 1:
        raise UserError(f'--warmup={warmup} and --steps={steps} must both be >= 1: the first step compiles')
    before = bench.compiles()
    warm = [bench.run()[0] for _ in range(warmup)]
    after_warmup = bench.compiles()
    timed = [bench.run() for _ in range(steps)]
    after_timed = bench.compiles()
    step = common.stats_ms([t for t, _ in timed])
    transfer = common.stats_ms([t for _, t in timed])
    pipelined_s = bench.pipelined(pipelined_steps) if pipelined_steps > 0 else None
    batch = bench.global_batch
    flops_step = bench.flops_per_example * batch
    median_s = step['median'] / 1e3
    return {
        'global_batch': batch,
        'per_device_batch': batch / bench.runtime.device_count,
        'trainable_parameters': bench.parameters,
        'H_cycles': bench.H, 'L_cycles': bench.L,
        'warmup_steps': warmup, 'steps_timed': steps,
        'first_step_s': warm[0],
        'warmup_step_s': warm,
        'compile_overhead_s': sum(warm) - warmup * median_s,
        'uncached_compiles_warmup': None if before is None else after_warmup - before,
        'uncached_compiles_timed': None if before is None else after_timed - after_warmup,
        'step_ms': step,
        'transfer_ms': transfer,
        'pipelined_steps': pipelined_steps,
        'pipelined_step_ms': None if pipelined_s is None else pipelined_s * 1e3,
        'examples_per_s': batch / median_s,
        'examples_per_s_pipelined': None if pipelined_s is None else batch / pipelined_s,
        'gflop_per_example_step': bench.flops_per_example / 1e9,
        'tflop_per_step': flops_step / 1e12,
        'achieved_tflops': flops_step / median_s / 1e12,
        'achieved_tflops_per_device': flops_step / median_s / 1e12 / bench.runtime.device_count,
    }


def profile(bench, directory, steps):
    """A trace of `steps` steps: torch_xla profiler (xplane.pb, TensorBoard) or a torch.profiler chrome trace."""
    runtime = bench.runtime
    if runtime.process_count > 1:
        directory = os.path.join(directory, f'host{runtime.process_index}')
    os.makedirs(directory, exist_ok=True)
    runtime.wait()
    if runtime.name == 'xla':
        import torch_xla.debug.profiler as xp
        # No xp.Trace scopes: put_batch syncs, which torch_xla refuses inside one. The
        # device timeline still names each step's module 'train_step' (its compile name).
        xp.start_trace(directory)
        for _ in range(steps):
            bench.run(wait=False)
        runtime.wait()
        xp.stop_trace()
        return directory
    import torch
    activities = [torch.profiler.ProfilerActivity.CPU]
    if runtime.device.type == 'cuda':
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            with torch.profiler.record_function('train_step'):
                bench.run()
    path = os.path.join(directory, 'trace.json')
    prof.export_chrome_trace(path)
    return path


def report_lines(r, device):
    step, transfer = r['step_ms'], r['transfer_ms']
    lines = [
        f'device                 {device.description} ({device.backend}), {device.devices} devices, '
        f'{device.hosts} host(s), mesh {device.mesh}',
        f'model                  {r["trainable_parameters"]:,} trainable parameters, '
        f'T={r["H_cycles"]} n={r["L_cycles"]}',
        f'global batch           {r["global_batch"]} ({r["per_device_batch"]:g} per device)',
        f'first step             {r["first_step_s"]:.2f} s (traces and compiles); warm-up steps '
        f'{", ".join(f"{s:.2f}" for s in r["warmup_step_s"])} s; compile overhead ~{r["compile_overhead_s"]:.2f} s',
        'uncached compiles      ' + ('n/a (native backend)' if r['uncached_compiles_warmup'] is None else
                                     f'{r["uncached_compiles_warmup"]} in warm-up, '
                                     f'{r["uncached_compiles_timed"]} while timing (must be 0)'),
        f'step time              median {step["median"]:.1f} ms, p90 {step["p90"]:.1f} ms '
        f'(min {step["min"]:.1f}, max {step["max"]:.1f}; {r["steps_timed"]} steps, each waited for)',
        f'  of which transfer    median {transfer["median"]:.1f} ms (host batch to devices)',
        f'pipelined              {common.fmt(r["pipelined_step_ms"], "{:.1f} ms/step")} '
        f'({r["pipelined_steps"]} steps dispatched back to back)',
        f'throughput             {r["examples_per_s"]:,.1f} examples/s (median step)'
        + (f', {r["examples_per_s_pipelined"]:,.1f} pipelined' if r['examples_per_s_pipelined'] else ''),
        f'work                   {r["gflop_per_example_step"]:.3f} GFLOP/example/step x {r["global_batch"]} '
        f'= {r["tflop_per_step"]:.4f} TFLOP/step (analytic)',
        f'achieved               {r["achieved_tflops"]:.4f} TFLOP/s '
        f'({r["achieved_tflops_per_device"]:.4f} per device)',
        f'peak bf16 per device   {common.fmt(device.peak_tflops, "{:g} TFLOP/s")}',
        f'MFU                    {common.fmt(r["mfu"], "{:.1%}")}',
        'memory                 ' + peaks.memory_text(r['memory']),
    ]
    return lines


def define_flags():
    common.define_flags()
    flags.DEFINE_integer('global_batch', 0, 'global batch (0: the config\'s data.global_batch_size)')
    flags.DEFINE_integer('steps', 10, 'timed steps')
    flags.DEFINE_integer('warmup', 2, 'warm-up steps before timing (the first compiles)')
    flags.DEFINE_integer('pipelined_steps', -1, 'steps of the pipelined figure (-1: as --steps, 0: skip)')
    flags.DEFINE_string('profile', '', 'write a trace of --profile_steps steps to this directory')
    flags.DEFINE_integer('profile_steps', 3, 'steps traced with --profile')
    flags.DEFINE_bool('project', False, 'also project the step time onto --slice with the measured MFU')
    flags.DEFINE_string('slice', 'v4-64', 'TPU slice for --project')
    flags.DEFINE_integer('project_batch', 6144, 'global batch for --project')
    flags.DEFINE_float('mfu', 0.5, 'MFU for --project where none is measured (CPU)')
    flags.DEFINE_string('official', '', 'a TinyRecursiveModels checkout: time its training step beside ours')
    flags.DEFINE_bool('official_compile', False, 'torch.compile the official loss head (its pretrain.py default)')


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    config, overrides = common.config_and_overrides(**{'data.global_batch_size': FLAGS.global_batch})
    bench = TrainBench(config)
    config.model.forward_dtype = bench.trainer.cfg.forward_dtype   # 'auto' as resolved here, for both codes
    device = peaks.detect(bench.runtime, FLAGS.device_kind)
    pipelined = FLAGS.steps if FLAGS.pipelined_steps < 0 else FLAGS.pipelined_steps
    if bench.runtime.is_main_host:
        print(f'step time of {FLAGS["config"].config_filename} on {device.description}: {FLAGS.warmup} warm-up + '
              f'{FLAGS.steps} timed steps at global batch {bench.global_batch}', flush=True)
    results = measure(bench, FLAGS.warmup, FLAGS.steps, pipelined)
    results['peak_tflops_per_device'] = device.peak_tflops
    results['mfu'] = peaks.mfu(results['tflop_per_step'] * 1e12, results['step_ms']['median'] / 1e3,
                               device.devices, device.peak_tflops)
    results['memory'] = peaks.device_memory(bench.runtime)
    lines = report_lines(results, device)
    if FLAGS.profile:
        lines.append(f'trace                  {profile(bench, FLAGS.profile, FLAGS.profile_steps)}')
    if FLAGS.official:
        results['official'] = official.measure(FLAGS.official, config, bench.host_batches, FLAGS.warmup,
                                               FLAGS.steps, FLAGS.official_compile)
        results['speedup_vs_official'] = results['official']['step_ms']['median'] / results['step_ms']['median']
        lines += official.report_lines(results['step_ms']['median'], results['official'])
    extra = {}
    if FLAGS.project:
        extra['projection'], projection_lines = _projection(config, results)
        lines += projection_lines
    common.report('step_time', device,
                  {'steps': FLAGS.steps, 'warmup': FLAGS.warmup, 'pipelined_steps': pipelined,
                   'global_batch': bench.global_batch},
                  results, lines, bench.runtime.is_main_host, overrides, extra)


def _projection(config, results):
    FLAGS = flags.FLAGS
    tpu_slice = projection.parse_slice(FLAGS.slice)
    mfu, source = results['mfu'], 'measured here'
    if mfu is None:
        mfu, source = FLAGS.mfu, 'assumed: no MFU on this device'
    batch = FLAGS.project_batch or results['global_batch']
    p = projection.project(results['gflop_per_example_step'] * 1e9, batch, tpu_slice, mfu,
                           projection.run_steps(config, batch))
    return p, [f'projection onto {tpu_slice.name} at global batch {batch}:'] + [
        '  ' + line for line in projection.report_lines(p, source)]


if __name__ == '__main__':
    common.run(define_flags, main)
