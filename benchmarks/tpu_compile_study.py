"""Every run the study plans, through the real TPU compiler: what each costs on a slice and
whether it fits, before anything is launched.

    python benchmarks/tpu_compile_study.py --slice=v4-64            # compile what is missing, write the table
    python benchmarks/tpu_compile_study.py --slice=v4-64 --list     # the plan: runs, and the train steps they share

The runs are every variant of every family's sweep (configs/{baseline, batch_scaling, ablations,
tn_sweep, scaling, advanced, contributions, maze, arc, urm}.py). Many share their train step: an lr,
a warmup or a run length changes nothing the chip executes, so each distinct train step
(model, batch, task sizes, optimizer, EMA, loss, mesh) is compiled once by
benchmarks/tpu_compile.py, in its own process, and the runs that share it say so. A
curriculum run compiles each stage's step and weighs the stages by their share of the steps.

Each compiled step is kept in --out (default benchmarks/results/tpu_compile_study_<slice>/)
as <step key>.json: a rerun compiles only what is missing (a compile takes 1-7 minutes of
CPU), and the table is rewritten from the kept results every time, as
tpu_compile_study_<slice>.md and .json in that directory. Everything in it is the compiler's
estimate on a machine without a TPU (benchmarks/README.md: The TPU compiler without a TPU).
"""

import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

from absl import flags

if __package__ in (None, ''):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common, projection  # noqa: E402
from trm_spmd import tasks  # noqa: E402
from trm_spmd.config import expand_sweep, load_config  # noqa: E402
from trm_spmd.model.config import TRMConfig  # noqa: E402
from trm_spmd.train.schedule import curriculum_stages  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ('baseline', 'batch_scaling', 'ablations', 'tn_sweep', 'scaling', 'advanced', 'contributions', 'maze',
            'arc', 'urm')

FLAGS = flags.FLAGS
ATTENTION_ONLY = ('attention_impl', 'attention_block')


def define_flags():
    flags.DEFINE_string('slice', 'v4-64', 'TPU slice to compile for')
    flags.DEFINE_string('out', '', 'directory of the kept step results and the table '
                                   '(default benchmarks/results/tpu_compile_study_<slice>)')
    flags.DEFINE_bool('list', False, 'print the runs and the train steps they share, compile nothing')
    flags.DEFINE_list('only', [], 'compile only the steps of these runs (FILE.py:VARIANT); the table keeps all')


def study_specs():
    return [spec for family in FAMILIES for spec in expand_sweep(f'configs/{family}.py')]


def step_fields(config):
    """What a config's compiled train step depends on; two configs with the same fields run
    the same program on the chip."""
    c = config
    model, sizes = c.model.to_dict(), tasks.sizes(c)
    if model.get('family') == 'trm':   # steps compiled before model.family existed keep their keys
        del model['family']
    # The attention's settings change nothing in a token-mixing MLP's step, nor where the
    # attention is chosen dense.
    cfg = TRMConfig.from_config(c, **sizes).with_auto_attention('blockwise')
    blockwise = cfg.attention_path == 'blockwise'
    if not blockwise:
        for key in ATTENTION_ONLY:
            model.pop(key, None)
    fields = {'model': model, 'global_batch_size': c.data.global_batch_size, 'sizes': sizes,
              'optimizer': c.optim.name, 'grad_accum_steps': c.optim.grad_accum_steps,
              'grad_clip': c.optim.grad_clip > 0, 'ema': c.ema.enabled, 'no_ACT_continue': c.act.no_ACT_continue,
              'loss': c.loss.type, 'mesh': list(c.mesh.shape)}
    if blockwise and c.xla.attention_recompute:
        # Steps compiled with the backward's barrier alone (True) keep their keys; since then the
        # forward's second pass recomputes its scores too.
        fields['attention_recompute'] = 'forward and backward'
    if c.model.grad_checkpointing:   # steps compiled when it recomputed the whole cycle at once had no such field
        fields['grad_checkpointing'] = 'each network call'
    return fields


def _key(fields):
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=list).encode()).hexdigest()[:12]


def plan(specs):
    """{spec: (config, [(share of the steps, step key, overrides)])} and {step key: (spec, overrides)}
    of the first run that has each step."""
    runs, steps = {}, {}
    for spec in specs:
        config = load_config(spec)
        total = projection.run_steps(config, config.data.global_batch_size)
        stages = curriculum_stages(config, total)
        parts = []
        for i, (first, H, L) in enumerate(stages):
            last = stages[i + 1][0] if i + 1 < len(stages) else total
            overrides = {}
            if config.curriculum.enabled:
                overrides = {'curriculum.enabled': False, 'model.H_cycles': H, 'model.L_cycles': L}
            staged = load_config(spec)
            staged.update_from_flattened_dict(overrides)
            key = _key(step_fields(staged))
            steps.setdefault(key, (spec, overrides))
            parts.append(((last - first) / total, key, overrides))
        runs[spec] = (config, parts)
    return runs, steps


def _flag(key, value):
    if isinstance(value, bool):
        return f'--config.{key}={str(value).lower()}'
    return f'--config.{key}={value}'


def compile_step(spec, overrides, key, out_dir):
    """Runs benchmarks/tpu_compile.py on the train step; keeps its result (or why it failed) as KEY.json."""
    with tempfile.TemporaryDirectory(prefix='trm_tpu_study_') as tmp:
        args = [sys.executable, os.path.join(REPO, 'benchmarks', 'tpu_compile.py'), f'--config={spec}',
                *(_flag(k, v) for k, v in overrides.items()), f'--slice={FLAGS.slice}', '--graphs=train_step',
                f'--out={tmp}', f'--tag={key}']
        start = time.time()
        done = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
        found = glob.glob(os.path.join(tmp, '*.json'))
        if done.returncode == 0 and found:
            with open(found[0]) as f:
                record = json.load(f)
            kept = {'spec': spec, 'overrides': overrides, 'train_step': record['results']['graphs']['train_step'],
                    'tpu_compiler': record['settings']['tpu_compiler'], 'date': record['environment']['date']}
        else:
            errors = [line for line in (done.stderr + done.stdout).splitlines() if line.startswith('error:')]
            kept = {'spec': spec, 'overrides': overrides, 'error': (errors or ['(no error line)'])[-1][len('error:'):]
                    .strip(), 'exit': done.returncode}
    kept['wall_s'] = time.time() - start
    with open(os.path.join(out_dir, f'{key}.json'), 'w') as f:
        json.dump(kept, f, indent=1, sort_keys=True)
    return kept


def _gib(value):
    return f'{value / 2**30:.2f}'


def _duration(seconds):
    hours = seconds / 3600
    return f'{hours:.1f} h' if hours < 48 else f'{hours / 24:.1f} d'


def table(runs, kept, tpu_slice):
    """(markdown lines, rows) of every run, from the kept step results."""
    first_spec = {}
    for spec, (_, parts) in runs.items():
        for _, key, _ in parts:
            first_spec.setdefault(key, spec)
    lines = ['| run | global batch | HBM per chip (GiB) | est. step (ms) | est. MFU | steps | est. run | step shared with |',
             '|---|---:|---:|---:|---:|---:|---:|---|']
    rows = []
    for spec, (config, parts) in runs.items():
        batch = config.data.global_batch_size
        total = projection.run_steps(config, batch)
        results = [kept.get(key) for _, key, _ in parts]
        row = {'run': spec, 'global_batch': batch, 'steps': total, 'steps_shared_with': []}
        if any(r is None for r in results):
            cells = ['not compiled yet'] + [''] * 5
        elif any('error' in r for r in results):
            message = next(r['error'] for r in results if 'error' in r)
            row['error'] = message
            cells = [f'failed: {message[:90]}'] + [''] * 5
        else:
            steps = [r['train_step'] for r in results]
            step_ms = sum(share * s['estimated_step_ms'] for (share, _, _), s in zip(parts, steps))
            flops = sum(share * s['analytic_flops_per_chip'] for (share, _, _), s in zip(parts, steps))
            hbm = max(s['memory']['total_with_donation_bytes'] for s in steps)
            fits = all(s['memory']['fits'] for s in steps)
            mfu = flops / (tpu_slice.peak_tflops * 1e12 * step_ms / 1e3)
            row.update(step_ms=step_ms, mfu=mfu, hbm_bytes=hbm, fits=fits, run_s=total * step_ms / 1e3)
            cells = [_gib(hbm) + ('' if fits else ' (does not fit)'), f'{step_ms:.1f}', f'{mfu:.0%}', f'{total:,}',
                     _duration(total * step_ms / 1e3)]
        shared = sorted({s for _, key, _ in parts for s, (_, p) in runs.items()
                         if s != spec and key in [k for _, k, _ in p]})
        row['steps_shared_with'] = shared
        stages = ' (curriculum: stages weighed by their steps)' if len(parts) > 1 else ''
        names = [s.replace('configs/', '').replace('.py', '') for s in shared]
        names = ', '.join(names[:3]) + (f' and {len(names) - 3} more' if len(names) > 3 else '') or '-'
        lines.append(f'| {spec.replace("configs/", "")}{stages} | {batch:,} | ' + ' | '.join(cells) + f' | {names} |')
        rows.append(row)
    return lines, rows


def main(argv):
    del argv
    from benchmarks.tpu_compile import slice_topology
    tpu_slice, _ = slice_topology(FLAGS.slice)
    out_dir = FLAGS.out or os.path.join(REPO, 'benchmarks', 'results', f'tpu_compile_study_{tpu_slice.name}')
    os.makedirs(out_dir, exist_ok=True)
    runs, steps = plan(study_specs())
    print(f'{len(runs)} runs, {len(steps)} distinct train steps on {tpu_slice.name}', flush=True)
    kept = {}
    for key in steps:
        path = os.path.join(out_dir, f'{key}.json')
        if os.path.exists(path):
            with open(path) as f:
                kept[key] = json.load(f)
    wanted = [k for k, (spec, _) in steps.items() if k not in kept and (not FLAGS.only or spec in FLAGS.only)]
    if FLAGS.list:
        for key, (spec, overrides) in steps.items():
            state = 'kept' if key in kept else 'to compile'
            print(f'  {key}  {spec} {overrides or ""}  [{state}]')
        return
    for i, key in enumerate(wanted):
        spec, overrides = steps[key]
        print(f'[{i + 1}/{len(wanted)}] compiling the train step of {spec} {overrides or ""}', flush=True)
        kept[key] = compile_step(spec, overrides, key, out_dir)
        outcome = kept[key].get('error') or f'{kept[key]["train_step"]["estimated_step_ms"]:.1f} ms (estimate)'
        print(f'    {outcome}; {kept[key]["wall_s"]:.0f} s', flush=True)
    lines, rows = table(runs, kept, tpu_slice)
    compilers = sorted({json.dumps(r['tpu_compiler'], sort_keys=True) for r in kept.values() if 'tpu_compiler' in r})
    head = [f'# Every study run on a {tpu_slice.name}, by the TPU compiler (estimates, no TPU used)', '',
            f'`python benchmarks/tpu_compile_study.py --slice={tpu_slice.name}`; {len(runs)} runs, '
            f'{len(steps)} distinct train steps, {len(kept)} compiled; libtpu: '
            + ', '.join(json.loads(c).get('libtpu', '?') for c in compilers) + '.', '',
            'Step: the train step\'s cost-model time (one ACT step with its update), not a measurement; '
            'a run also evaluates, checkpoints and reads data, which are not in it. Run: steps x step.', '']
    with open(os.path.join(out_dir, f'tpu_compile_study_{tpu_slice.name}.md'), 'w') as f:
        f.write('\n'.join(head + lines) + '\n')
    with open(os.path.join(out_dir, f'tpu_compile_study_{tpu_slice.name}.json'), 'w') as f:
        json.dump({'slice': tpu_slice.name, 'runs': rows}, f, indent=1, sort_keys=True)
    print('\n'.join(lines))


if __name__ == '__main__':
    common.run(define_flags, main)
