"""Evaluation throughput: examples/s through the real Evaluator, on synthetic test batches.

    python benchmarks/eval_throughput.py --config=configs/baseline.py --batches=4 --repeats=3
    python benchmarks/eval_throughput.py --config=configs/quickstart.py --config.eval.global_batch_size=256

Every test batch runs exactly act.halt_max_steps ACT steps with the EMA weights swapped in
(train/evaluate.py), then one metric-sum graph; the sums are read once per evaluation, so
the wall time of Evaluator.run is device time plus one host read. The first evaluation
traces and compiles and is reported apart. Results go to
benchmarks/results/eval_throughput_<device>_<date>.{json,md}.
"""

import os
import sys
import time

import numpy as np
from absl import flags

if __package__ in (None, ''):
    # Run as `python benchmarks/eval_throughput.py`: make `benchmarks.*` importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common, peaks  # noqa: E402
from trm_spmd.config import validate  # noqa: E402
from trm_spmd.errors import UserError  # noqa: E402


class EvalBench:
    """The real model, EMA and Evaluator over `num_batches` synthetic test batches."""

    def __init__(self, config, num_batches):
        from trm_spmd.model.flops import eval_flops_per_example_step
        from trm_spmd.runtime import create_runtime
        from trm_spmd.train.evaluate import DifficultyBuckets, Evaluator
        from trm_spmd.train.setup import build_trainer, settle

        self.runtime = runtime = create_runtime(config)
        validate(config, runtime.device_count, runtime.process_count)
        trainer = build_trainer(config, runtime)
        settle(trainer, runtime)
        self.global_batch = config.eval.global_batch_size
        self.num_batches = num_batches
        self.act_steps = trainer.cfg.halt_max_steps
        rows = self.global_batch // runtime.process_count
        rng = np.random.default_rng([config.seed, runtime.process_index])
        batches = []
        for _ in range(num_batches):
            batch = common.synthetic_batch(rng, rows, config=config)
            batch['difficulty'] = (batch['inputs'] == common.BLANK_TOKEN).sum(-1).astype(np.int32)
            batches.append(batch)
        # No dataset ratings: rows are bucketed by blank count, as for a generated dataset.
        # Synthetic rows are not worth keeping as samples (and the benchmark has no run to keep them in).
        test_split = common.SyntheticTestSplit(batches, num_examples=num_batches * self.global_batch)
        config.eval.samples = 0
        self.evaluator = Evaluator(trainer, config, runtime, test_split,
                                   DifficultyBuckets('difficulty', 'blanks', range(0, 85, 5)), workdir='')
        self.flops_per_example = eval_flops_per_example_step(trainer.cfg) * self.act_steps

    def run(self):
        start = time.perf_counter()
        self.evaluator.run(0)
        self.runtime.wait()
        return time.perf_counter() - start

    def compiles(self):
        return self.runtime.counters()['uncached_compiles'] if self.runtime.name == 'xla' else None


def measure(bench, warmup, repeats):
    if warmup < 1 or repeats < 1:
        raise UserError(f'--warmup={warmup} and --repeats={repeats} must both be >= 1: the first evaluation compiles')
    before = bench.compiles()
    warm = [bench.run() for _ in range(warmup)]
    after_warmup = bench.compiles()
    timed = [bench.run() for _ in range(repeats)]
    after = bench.compiles()
    run = common.stats_ms(timed)
    examples = bench.num_batches * bench.global_batch
    median_s = run['median'] / 1e3
    flops = bench.flops_per_example * examples
    return {
        'eval_batch': bench.global_batch, 'batches': bench.num_batches, 'act_steps_per_batch': bench.act_steps,
        'examples_per_evaluation': examples, 'repeats': repeats,
        'first_evaluation_s': warm[0], 'warmup_evaluation_s': warm,
        'uncached_compiles_warmup': None if before is None else after_warmup - before,
        'uncached_compiles_timed': None if before is None else after - after_warmup,
        'evaluation_ms': run,
        'act_step_ms': median_s * 1e3 / (bench.num_batches * bench.act_steps),
        'examples_per_s': examples / median_s,
        'gflop_per_example': bench.flops_per_example / 1e9,
        'achieved_tflops': flops / median_s / 1e12,
    }


def report_lines(r, device):
    run = r['evaluation_ms']
    return [
        f'device                 {device.description} ({device.backend}), {device.devices} devices, mesh {device.mesh}',
        f'evaluation             {r["batches"]} batches x {r["eval_batch"]} examples, '
        f'{r["act_steps_per_batch"]} ACT steps each (EMA weights)',
        f'first evaluation       {r["first_evaluation_s"]:.2f} s (traces and compiles); '
        f'uncached compiles {r["uncached_compiles_warmup"]} in warm-up, {r["uncached_compiles_timed"]} while timing',
        f'evaluation time        median {run["median"]:.1f} ms, p90 {run["p90"]:.1f} ms over {r["repeats"]} '
        f'timed evaluations; {r["act_step_ms"]:.2f} ms per ACT step',
        f'throughput             {r["examples_per_s"]:,.1f} examples/s',
        f'work                   {r["gflop_per_example"]:.3f} GFLOP per example (forward only, all ACT steps)',
        f'achieved               {r["achieved_tflops"]:.4f} TFLOP/s; MFU '
        + ('n/a' if r['mfu'] is None else f'{r["mfu"]:.1%}'),
    ]


def define_flags():
    common.define_flags()
    flags.DEFINE_integer('batches', 2, 'synthetic test batches per evaluation')
    flags.DEFINE_integer('warmup', 1, 'evaluations before timing (the first compiles)')
    flags.DEFINE_integer('repeats', 3, 'timed evaluations')


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    config, overrides = common.config_and_overrides()
    bench = EvalBench(config, FLAGS.batches)
    device = peaks.detect(bench.runtime, FLAGS.device_kind)
    if bench.runtime.is_main_host:
        print(f'eval throughput of {FLAGS["config"].config_filename} on {device.description}: {FLAGS.warmup} '
              f'warm-up + {FLAGS.repeats} timed evaluations', flush=True)
    results = measure(bench, FLAGS.warmup, FLAGS.repeats)
    results['mfu'] = peaks.mfu(results['achieved_tflops'] * 1e12, 1.0, device.devices, device.peak_tflops)
    results['memory'] = peaks.device_memory(bench.runtime)
    lines = report_lines(results, device) + ['memory                 ' + peaks.memory_text(results['memory'])]
    common.report('eval_throughput', device,
                  {'batches': FLAGS.batches, 'warmup': FLAGS.warmup, 'repeats': FLAGS.repeats,
                   'eval_batch': bench.global_batch},
                  results, lines, bench.runtime.is_main_host, overrides)


if __name__ == '__main__':
    common.run(define_flags, main)
