"""What an asynchronous checkpoint costs the training loop, against one training step.

    python benchmarks/checkpoint_overhead.py --config=configs/baseline.py
    python benchmarks/checkpoint_overhead.py --config=configs/baseline.py --global_batch=16   # CPU
    python benchmarks/checkpoint_overhead.py --workdir=gs://BUCKET/tmp/ckpt_bench           # to a bucket

A save, as the training loop does it (train/loop.py), is:
  gather   train.checkpoint_io.checkpoint_tree: parameters, both optimizers' states, EMA and the
           ACT carry copied from the devices into numpy arrays (the loop waits for this);
  save     Checkpointer.save until it returns (the loop waits for this too);
  write    orbax's background write, measured by Checkpointer.wait() (training goes on).
The blocking time (gather + save) should stay under one training step of the same model.
The state is the full config's model, optimizers and EMA, and a carry of --carry_batch
rows (default the config's global batch; random values, so compression gains nothing).
The step is timed at --global_batch (default the config's); on a CPU a smaller batch keeps
this short, which makes the comparison stricter (a smaller step is a shorter step).
Results go to benchmarks/results/checkpoint_overhead_<device>_<date>.{json,md}.
"""

import os
import sys
import tempfile
import time

import numpy as np
from absl import flags, logging

if __package__ in (None, ''):
    # Run as `python benchmarks/checkpoint_overhead.py`: make `benchmarks.*` importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common, peaks, step_time  # noqa: E402
from trm_spmd import fs  # noqa: E402
from trm_spmd.errors import UserError  # noqa: E402


def random_carry(bench, rows):
    """A device carry of `rows` rows with random states and cells, sharded like the training carry."""
    import torch
    from trm_spmd.model.act import initial_carry
    runtime = bench.runtime
    data_axis = runtime.mesh_shape[0]
    if rows % data_axis or rows % runtime.process_count:
        raise UserError(f'--carry_batch={rows} is not divisible by the data axis ({data_axis} devices): '
                        f'pick a multiple of {data_axis}')
    rows = runtime.local_rows(rows)   # a native process holds only its own rows
    carry = initial_carry(bench.trainer.model, rows, 'cpu')
    generator = torch.Generator().manual_seed(0)
    for key in bench.trainer.cfg.state_names:   # TRM's z_H, z_L; URM's hidden
        carry[key] = torch.randn(carry[key].shape, generator=generator).to(carry[key].dtype)
    cells = common.synthetic_batch(np.random.default_rng(0), rows, config=bench.config)
    carry.update({k: torch.from_numpy(v) for k, v in cells.items()})
    carry['halted'] = torch.zeros(rows, dtype=torch.bool)
    return {k: runtime.shard_along_data(v.to(runtime.device)) for k, v in carry.items()}


def tree_bytes(tree):
    if isinstance(tree, dict):
        return sum(tree_bytes(v) for v in tree.values())
    return int(getattr(tree, 'nbytes', 0))


def measure_saves(bench, carry, workdir, saves):
    """Timed saves (each waited for before the next), then one save with a step running beside its write."""
    from trm_spmd.checkpoint import Checkpointer
    from trm_spmd.train.checkpoint_io import checkpoint_tree
    runtime, trainer = bench.runtime, bench.trainer
    checkpointer = Checkpointer(workdir, keep=saves + 2, keep_best=0, async_save=True,
                                is_main_host=runtime.is_main_host, shared_filesystem=runtime.shared_filesystem)
    gather, blocking, write, state_bytes = [], [], [], 0
    try:
        for i in range(saves + 1):
            runtime.wait()
            start = time.perf_counter()
            # Synthetic batches have no data stream: the position is the step alone.
            state, meta = checkpoint_tree(trainer, bench.state._replace(carry=carry), 1000 + i, {'step': 1000 + i},
                                          runtime)
            gathered = time.perf_counter()
            checkpointer.save(1000 + i, state, meta)
            returned = time.perf_counter()
            state_bytes = tree_bytes(state)
            if i == saves:
                # The loop's next step runs while orbax writes in the background.
                overlapped_step_s, _ = bench.run()
                checkpointer.wait()
                break
            checkpointer.wait()
            done = time.perf_counter()
            gather.append(gathered - start)
            blocking.append(returned - gathered)
            write.append(done - returned)
    finally:
        checkpointer.close()
    return gather, blocking, write, state_bytes, overlapped_step_s


def summarize(step, gather, blocking, write, state_bytes, overlapped_step_s, step_batch, carry_batch):
    ms = lambda xs: [x * 1e3 for x in xs]   # noqa: E731
    later = slice(1, None) if len(gather) > 1 else slice(0, None)
    gather_ms = float(np.median(ms(gather[later])))
    blocking_ms = float(np.median(ms(blocking[later])))
    total_ms = gather_ms + blocking_ms
    step_ms = step['median']
    return {
        'step_batch': step_batch, 'carry_batch': carry_batch,
        'state_mib': state_bytes / 2**20,
        'step_ms': step,
        'gather_ms_each': ms(gather), 'save_blocking_ms_each': ms(blocking), 'background_write_ms_each': ms(write),
        'first_save_blocking_ms': (gather[0] + blocking[0]) * 1e3,
        'gather_ms': gather_ms, 'save_blocking_ms': blocking_ms, 'blocking_ms': total_ms,
        'background_write_ms': float(np.median(ms(write[later]))),
        'step_during_write_ms': overlapped_step_s * 1e3,
        'blocking_over_step': total_ms / step_ms,
        'under_one_step': total_ms < step_ms,
    }


def report_lines(r, device, params):
    verdict = 'under one step: meets the target' if r['under_one_step'] else 'longer than one step: misses the target'
    stricter = (f' (a smaller batch than the {r["carry_batch"]} rows saved: a stricter comparison)'
                if r['step_batch'] < r['carry_batch'] else '')
    return [
        f'device                 {device.description} ({device.backend}), {device.devices} devices, mesh {device.mesh}',
        f'state                  {r["state_mib"]:.1f} MiB: {params:,} trainable parameters, optimizer states, '
        f'EMA, carry of {r["carry_batch"]} rows',
        f'training step          median {r["step_ms"]["median"]:.1f} ms, p90 {r["step_ms"]["p90"]:.1f} ms '
        f'at global batch {r["step_batch"]}{stricter}',
        f'first save             {r["first_save_blocking_ms"]:.1f} ms blocking (includes orbax start-up)',
        f'gather (blocking)      {r["gather_ms"]:.1f} ms: device state to host numpy',
        f'save (blocking)        {r["save_blocking_ms"]:.1f} ms: Checkpointer.save until it returns',
        f'background write       {r["background_write_ms"]:.1f} ms: until Checkpointer.wait() returns',
        f'step during the write  {r["step_during_write_ms"]:.1f} ms',
        f'verdict                blocking {r["blocking_ms"]:.1f} ms = {r["blocking_over_step"]:.2f} x one step '
        f'({r["step_ms"]["median"]:.1f} ms): {verdict}',
    ]


def define_flags():
    common.define_flags('config FILE.py[:ARG] (the model whose state is saved); override fields with --config.a.b=VALUE')
    flags.DEFINE_integer('global_batch', 0, 'global batch of the timed training steps (0: the config\'s)')
    flags.DEFINE_integer('carry_batch', 0, 'rows of the saved ACT carry (0: the config\'s global batch)')
    flags.DEFINE_integer('steps', 3, 'timed training steps')
    flags.DEFINE_integer('warmup', 1, 'warm-up training steps (the first compiles)')
    flags.DEFINE_integer('saves', 3, 'timed saves (the first includes orbax start-up and is reported apart)')
    flags.DEFINE_string('workdir', '', 'where the checkpoints go (default a temporary local directory, removed; '
                        'never a run\'s workdir)')


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)   # orbax logs every file it writes at INFO
    FLAGS = flags.FLAGS
    if FLAGS.saves < 1:
        raise UserError(f'--saves={FLAGS.saves} must be >= 1')
    if FLAGS.workdir and any(fs.exists(fs.join(FLAGS.workdir, name)) for name in ('checkpoints', 'config.json')):
        raise UserError(f'--workdir={FLAGS.workdir} holds a run: the benchmark writes checkpoints there and deletes '
                        f'older ones; pass a new directory')
    carry_batch = FLAGS.carry_batch or FLAGS.config.data.global_batch_size
    config, overrides = common.config_and_overrides(**{'data.global_batch_size': FLAGS.global_batch})
    bench = step_time.TrainBench(config)
    device = peaks.detect(bench.runtime, FLAGS.device_kind)
    if bench.runtime.is_main_host:
        print(f'checkpoint overhead of {FLAGS["config"].config_filename} on {device.description}: steps at global '
              f'batch {bench.global_batch}, carry of {carry_batch} rows, {FLAGS.saves} timed saves', flush=True)
    timing = step_time.measure(bench, FLAGS.warmup, FLAGS.steps)
    carry = bench.state.carry if carry_batch == bench.global_batch else random_carry(bench, carry_batch)
    if FLAGS.workdir:
        saves = measure_saves(bench, carry, FLAGS.workdir, FLAGS.saves)
    else:
        with tempfile.TemporaryDirectory(prefix='trm_ckpt_bench_') as workdir:
            saves = measure_saves(bench, carry, workdir, FLAGS.saves)
    results = summarize(timing['step_ms'], *saves, bench.global_batch, carry_batch)
    results['first_step_s'] = timing['first_step_s']
    common.report('checkpoint_overhead', device,
                  {'steps': FLAGS.steps, 'warmup': FLAGS.warmup, 'saves': FLAGS.saves,
                   'step_batch': bench.global_batch, 'carry_batch': carry_batch,
                   'workdir': FLAGS.workdir or 'temporary local directory'},
                  results, report_lines(results, device, bench.parameters), bench.runtime.is_main_host, overrides)


if __name__ == '__main__':
    common.run(define_flags, main)
