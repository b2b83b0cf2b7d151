"""Step time of a config on a TPU slice, from the analytic FLOP count: the floor and a projection.

    python benchmarks/projection.py --config=configs/baseline.py --slice=v4-64 --global_batch=6144
    python benchmarks/projection.py --slice=v4-64 --global_batch=6144 --mfu=0.4
    python benchmarks/projection.py --slice=v5e-64 --measured=benchmarks/results/step_time_tpu-v4-x4_DATE.json
    python benchmarks/projection.py --slice=v4-64 --compiled=benchmarks/results/tpu_compile_v4-64_DATE.json

floor      = FLOPs per step / (chips x peak bf16 FLOP/s): the step time at 100% of peak.
projection = floor / MFU, with MFU given (--mfu), measured (--measured: a step_time result) or
             estimated by the TPU compiler (--compiled: a tpu_compile result; by default the
             newest one of the same config, slice and batch in benchmarks/results is used).
The plan's target is 17 ms per step; the verdict says what fraction of peak it needs.
"""

import dataclasses
import math
import os
import re
import sys

from absl import flags

if __package__ in (None, ''):
    # Run as `python benchmarks/projection.py`: make `benchmarks.*` importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common, peaks  # noqa: E402
from trm_spmd.errors import UserError  # noqa: E402
from trm_spmd.train.schedule import schedule_steps  # noqa: E402

TARGET_MS = 17.0          # the original plan's step time at global batch 6144 on a v4-64
DEFAULT_GROUPS = 1000     # training puzzles of Sudoku-Extreme-1K: epochs count passes over them


class SliceError(UserError):
    """A slice name or projection input that cannot be used; the message says what to pass."""


@dataclasses.dataclass(frozen=True)
class Slice:
    name: str
    kind: str              # key of peaks.PEAK_BF16_TFLOPS
    chips: int             # = PyTorch devices (megacore on v4/v5p)
    hosts: int

    @property
    def peak_tflops(self):
        return peaks.PEAK_BF16_TFLOPS[self.kind]


# generation -> (kind, chips from the number in the name, chips per host of a multi-host slice,
# largest single-host slice in chips, smallest slice in chips). v4 and v5p names count
# TensorCores (2 per chip), so the smallest, v4-8, is 4 chips.
_GENERATIONS = {
    'v4': ('tpu-v4', lambda n: n // 2, 4, 4, 4),
    'v5p': ('tpu-v5p', lambda n: n // 2, 4, 4, 4),
    'v5e': ('tpu-v5e', lambda n: n, 4, 8, 1),
    'v6e': ('tpu-v6e', lambda n: n, 4, 8, 1),
}
_ALIASES = {'v5litepod': 'v5e'}


def parse_slice(name):
    """'v4-64' -> Slice(chips=32, hosts=8); 'v5e-64' -> 64 chips, 16 hosts; 'v6e-8' -> 8 chips, 1 host."""
    match = re.fullmatch(r'(v4|v5p|v5e|v5litepod|v6e)-(\d+)', name.strip().lower())
    if not match:
        raise SliceError(f'unknown TPU slice {name!r}: use v4-N, v5e-N, v5p-N or v6e-N (e.g. v4-64)')
    generation, number = _ALIASES.get(match.group(1), match.group(1)), int(match.group(2))
    kind, to_chips, per_host, single_host_max, _ = _GENERATIONS[generation]
    chips = to_chips(number)
    if chips < 1 or (generation in ('v4', 'v5p') and number % 8):
        raise SliceError(f'{name}: {generation} slices are named by TensorCores, a multiple of 8 (v4-8, v4-16, ...)')
    if chips > single_host_max and chips % per_host:
        raise SliceError(f'{name}: a multi-host {generation} slice has a multiple of {per_host} chips')
    hosts = 1 if chips <= single_host_max else chips // per_host
    return Slice(name.strip().lower(), kind, chips, hosts)


def slice_name_for_chips(kind, chips):
    """Smallest power-of-two slice of this generation with at least `chips` chips ('tpu-v4', 113 -> 'v4-256')."""
    generation = next(g for g, spec in _GENERATIONS.items() if spec[0] == kind)
    chips = max(2 ** math.ceil(math.log2(max(chips, 1))), _GENERATIONS[generation][4])
    return f'{generation}-{chips * 2 if generation in ("v4", "v5p") else chips}'


def run_steps(config, global_batch, groups=None):
    """Optimizer steps of the whole run at `global_batch`, as the trainer counts them: epochs of
    `groups` training rows (default the rows an epoch of the config's task has, where the task
    knows them, e.g. ARC's; else Sudoku-Extreme-1K's 1,000; a mixture's: its tasks' together)."""
    from trm_spmd import tasks
    names = tuple(config.data.mixture) or (config.data.task,)   # a mixture's epoch passes over each task
    groups = groups or sum(tasks.get(name).epoch_examples(config.data) or DEFAULT_GROUPS for name in names)
    return schedule_steps(config, groups, global_batch)[0]


def flops_per_example(config):
    """Training FLOPs per example per ACT step of the config (first curriculum stage's cycles)."""
    from trm_spmd.scale import flops_per_example as per_example
    return per_example(config)


def project(flops_per_example_step, global_batch, tpu_slice, mfu, total_steps, target_ms=TARGET_MS):
    """Every figure of the projection, as a dict (seconds, FLOPs, fractions)."""
    if not 0 < mfu <= 1:
        raise SliceError(f'MFU {mfu} must be in (0, 1]: pass a fraction such as --mfu=0.5')
    flops_step = flops_per_example_step * global_batch
    peak = tpu_slice.chips * tpu_slice.peak_tflops * 1e12
    floor_s = flops_step / peak
    step_s = floor_s / mfu
    target_s = target_ms / 1e3
    needed = floor_s / target_s                       # fraction of peak the target needs
    chips_needed = flops_step / (target_s * tpu_slice.peak_tflops * 1e12 * mfu)
    batch_for_target = target_s * peak * mfu / flops_per_example_step
    return {
        'slice': tpu_slice.name, 'kind': tpu_slice.kind, 'chips': tpu_slice.chips, 'hosts': tpu_slice.hosts,
        'peak_tflops_per_chip': tpu_slice.peak_tflops, 'slice_peak_pflops': peak / 1e15,
        'global_batch': global_batch, 'per_chip_batch': global_batch / tpu_slice.chips,
        'gflop_per_example_step': flops_per_example_step / 1e9, 'tflop_per_step': flops_step / 1e12,
        'floor_ms': floor_s * 1e3, 'floor_examples_per_s': global_batch / floor_s,
        'mfu': mfu, 'step_ms': step_s * 1e3, 'examples_per_s': global_batch / step_s,
        'total_steps': total_steps, 'run_hours': total_steps * step_s / 3600,
        'run_hours_at_floor': total_steps * floor_s / 3600,
        'target_ms': target_ms, 'target_examples_per_s': global_batch / target_s,
        'target_peak_fraction': needed, 'target_reachable': needed <= mfu,
        'chips_for_target_at_mfu': chips_needed,
        'slice_for_target_at_mfu': slice_name_for_chips(tpu_slice.kind, chips_needed),
        'batch_for_target_at_mfu': batch_for_target,
    }


def verdict(p):
    """One line: can the target be reached on this slice, with the arithmetic."""
    head = (f'the {p["target_ms"]:g} ms target needs {p["target_peak_fraction"]:.0%} of peak '
            f'({p["floor_ms"]:.1f} ms floor / {p["target_ms"]:g} ms)')
    if p['target_peak_fraction'] > 1:
        return f'{head}: not reachable on {p["slice"]} at global batch {p["global_batch"]}'
    if not p['target_reachable']:
        return f'{head}: not reachable at {p["mfu"]:.0%} MFU; it needs {p["target_peak_fraction"]:.0%} MFU'
    return f'{head}: reachable at {p["mfu"]:.0%} MFU'


def report_lines(p, mfu_source):
    s = p
    return [
        f'slice            {s["slice"]}: {s["chips"]} chips ({s["hosts"]} hosts), '
        f'{s["peak_tflops_per_chip"]:g} TFLOP/s bf16 per chip = {s["slice_peak_pflops"]:.2f} PFLOP/s',
        f'work per step    {s["gflop_per_example_step"]:.2f} GFLOP/example x {s["global_batch"]} examples '
        f'= {s["tflop_per_step"]:.1f} TFLOP ({s["per_chip_batch"]:g} examples per chip)',
        f'floor            {s["tflop_per_step"]:.1f} TFLOP / {s["slice_peak_pflops"]:.2f} PFLOP/s '
        f'= {s["floor_ms"]:.1f} ms/step ({s["floor_examples_per_s"]:,.0f} examples/s at 100% of peak)',
        f'projection       {s["floor_ms"]:.1f} ms / {s["mfu"]:.0%} MFU ({mfu_source}) = {s["step_ms"]:.1f} ms/step, '
        f'{s["examples_per_s"]:,.0f} examples/s',
        f'whole run        {s["total_steps"]:,} steps x {s["step_ms"]:.1f} ms = {_hours(s["run_hours"])} '
        f'(floor {_hours(s["run_hours_at_floor"])})',
        f'target           {s["target_ms"]:g} ms/step = {s["target_examples_per_s"]:,.0f} examples/s',
        f'verdict          {verdict(s)}',
        f'what {s["target_ms"]:g} ms takes at {s["mfu"]:.0%} MFU: >= {math.ceil(s["chips_for_target_at_mfu"])} chips '
        f'({s["slice_for_target_at_mfu"]}) at batch {s["global_batch"]}, or global batch <= '
        f'{s["batch_for_target_at_mfu"]:,.0f} on {s["slice"]}',
    ]


def _hours(hours):
    if hours < 1 / 60:
        return f'{hours * 3600:.3g} s'
    return f'{hours * 60:.1f} min' if hours < 1 else f'{hours:.2f} h'


def measured_mfu(path):
    """(MFU, description) from a step_time result file."""
    import json
    with open(path) as f:
        record = json.load(f)
    value = record.get('results', {}).get('mfu')
    if value is None:
        raise SliceError(f'{path} has no measured MFU (a CPU result has none): pass --mfu=FRACTION instead')
    device = record.get('device', {})
    return value, f'measured on {device.get("slug", "?")} at batch {record.get("settings", {}).get("global_batch")}'


def compiled_mfu(path):
    """(MFU, description) from a tpu_compile result: the compiler's cost-model estimate."""
    import json
    with open(path) as f:
        record = json.load(f)
    train = record.get('results', {}).get('graphs', {}).get('train_step', {})
    value = train.get('estimated_mfu')
    if record.get('benchmark') != 'tpu_compile' or value is None:
        raise SliceError(f'{path} is no tpu_compile result with a cost-model time of the train step: '
                         f'pass --mfu=FRACTION instead')
    settings = record.get('settings', {})
    kernels = ', Pallas kernels at their roofline (a bound)' if train.get('kernels') else ''
    return value, (f'compiler estimate, libtpu cost model{kernels}, {settings.get("slice")} at batch '
                   f'{settings.get("global_batch")}: {os.path.basename(path)}')


def find_compiled(results_dir, spec, overrides, slice_name, global_batch):
    """The newest tpu_compile result of this config, overrides, slice and batch, or None."""
    import glob
    import json
    ignored = ('data.global_batch_size', 'eval.global_batch_size')
    wanted = json.loads(json.dumps({k: v for k, v in overrides.items() if k not in ignored}))   # as a record holds them
    found = []
    for path in glob.glob(os.path.join(results_dir, f'tpu_compile_{slice_name}_*.json')):
        try:
            with open(path) as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        config, settings = record.get('config', {}), record.get('settings', {})
        got = {k: v for k, v in (config.get('overrides') or {}).items() if k not in ignored}
        train = record.get('results', {}).get('graphs', {}).get('train_step', {})
        if (config.get('spec') == spec and got == wanted and settings.get('global_batch') == global_batch
                and train.get('estimated_mfu')):
            found.append((record.get('environment', {}).get('date', ''), path))
    return max(found)[1] if found else None


def define_flags():
    common.define_flags('config FILE.py[:ARG] whose model is projected; override fields with --config.a.b=VALUE')
    flags.DEFINE_string('slice', 'v4-64', 'target TPU slice: v4-N, v5e-N, v5p-N or v6e-N')
    flags.DEFINE_integer('global_batch', 6144, 'global batch on the slice (0: the config\'s)')
    flags.DEFINE_float('mfu', 0.5, 'assumed model FLOPs utilisation (fraction of peak)')
    flags.DEFINE_string('measured', '', 'a step_time result JSON whose measured MFU replaces --mfu')
    flags.DEFINE_string('compiled', 'auto', 'a tpu_compile result JSON whose compiler-estimated MFU replaces the '
                        'default --mfu; auto: the newest one of the same config, slice and batch in '
                        'benchmarks/results, if any; none: never')
    flags.DEFINE_integer('total_steps', 0, 'steps of the whole run (0: from the config\'s epochs over --groups)')
    flags.DEFINE_integer('groups', 0, 'training rows per epoch, for the run length (0: the task\'s, e.g. '
                         f'ARC\'s; {DEFAULT_GROUPS} for Sudoku-Extreme-1K)')
    flags.DEFINE_float('target_ms', TARGET_MS, 'step-time target to judge')


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    config, overrides = common.config_and_overrides(**{'data.global_batch_size': FLAGS.global_batch})
    batch = config.data.global_batch_size
    tpu_slice = parse_slice(FLAGS.slice)
    mfu, source = FLAGS.mfu, 'assumed'
    compiled = FLAGS.compiled
    if compiled == 'auto':
        found = [find_compiled(d, FLAGS['config'].config_filename, overrides, tpu_slice.name, batch)
                 for d in dict.fromkeys(filter(None, (FLAGS.out, common.RESULTS_DIR)))]
        compiled = next(filter(None, found), None)
    if FLAGS.measured:
        mfu, source = measured_mfu(FLAGS.measured)
    elif compiled and compiled != 'none' and not FLAGS['mfu'].present:
        mfu, source = compiled_mfu(compiled)
    steps = FLAGS.total_steps or run_steps(config, batch, FLAGS.groups or None)
    p = project(flops_per_example(config), batch, tpu_slice, mfu, steps, FLAGS.target_ms)
    lines = [f'projection of {FLAGS["config"].config_filename} on {tpu_slice.name}'] + report_lines(p, source)
    common.report('projection', {'slug': tpu_slice.name, 'projected': True},
                  {'global_batch': batch, 'mfu_source': source, 'groups': FLAGS.groups}, p, lines,
                  overrides=overrides)


if __name__ == '__main__':
    common.run(define_flags, main)
