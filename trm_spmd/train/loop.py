"""train_and_evaluate: the loop owns cadence (log, eval, checkpoint) and nothing else.

The device work is in step.py (one compiled graph per curriculum stage) and evaluate.py;
metrics are read on the host one step late, in step closures, at the log cadence only.
"""

import json
import math
import os
import signal
import threading
import time

from trm_spmd import fs, hosts
from trm_spmd.checkpoint import Checkpointer
from trm_spmd.config import config_hash, validate
from trm_spmd.errors import UserError
from trm_spmd.model.flops import train_flops_per_example_step
from trm_spmd.model.trm import trainable_param_count
from trm_spmd.runtime import create_runtime
from trm_spmd.train import state as state_lib
from trm_spmd.train.data import open_dataset
from trm_spmd.train.evaluate import DifficultyBuckets, Evaluator
from trm_spmd.train.metrics import MetricWriter, Progress, format_duration
from trm_spmd.train.setup import build_trainer, device_state, settle
from trm_spmd.train.setup import step_tensor as make_step_tensor


class NonFiniteLoss(UserError):
    pass


def schedule_steps(config, num_groups):
    """(total_steps, eval_every): the reference counts in epochs over the training groups."""
    t, batch = config.train, config.data.global_batch_size
    total = max(t.total_steps if t.total_steps > 0 else int(t.epochs * num_groups / batch), 1)
    every = t.eval_every_steps if t.eval_every_steps > 0 else int(t.eval_every_epochs * num_groups / batch)
    return total, min(max(every, 1), total)


def curriculum_stages(config, total_steps):
    """[(first_step, H_cycles, L_cycles)]: one graph each. Without curriculum, one stage."""
    cu, m = config.curriculum, config.model
    if not cu.enabled:
        return [(0, m.H_cycles, m.L_cycles)]
    return [(int(f * total_steps), h, l) for f, h, l in zip(cu.start_fractions, cu.H_cycles, cu.L_cycles)]


def stage_at(stages, step):
    current = stages[0]
    for stage in stages:
        if step >= stage[0]:
            current = stage
    return current


class _Stop:
    """Set from the SIGTERM handler; the loop finishes its step, checkpoints and exits 0."""

    def __init__(self):
        self.requested = False
        self.reason = ''

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return
        def handler(signum, frame):
            del frame
            self.requested = True
            self.reason = signal.Signals(signum).name
        signal.signal(signal.SIGTERM, handler)


def train_and_evaluate(config, workdir, source=None):
    """Trains (or, with config.mode='eval', evaluates) and returns the last metrics."""
    started = time.time()
    source = source or {}
    if not fs.is_remote(workdir):
        workdir = os.path.abspath(workdir)   # orbax (tensorstore) needs absolute paths
    runtime = create_runtime(config)
    validate(config, runtime.device_count, runtime.process_count)
    if config.eval.save_outputs and runtime.process_count > 1:
        raise UserError('eval.save_outputs needs a single host (it gathers every logit on one host)')
    hosts.check_agreement(runtime, config)
    main_host = runtime.is_main_host

    dataset = open_dataset(config, runtime)
    total_steps, eval_every = schedule_steps(config, dataset.train.num_groups)
    trainer = build_trainer(config, runtime, total_steps, dataset.vocab_size, dataset.seq_len,
                            dataset.num_puzzle_identifiers)
    cfg, model, ema = trainer.cfg, trainer.model, trainer.ema
    flops_per_example = train_flops_per_example_step(cfg)

    fs.makedirs(workdir)   # only now: a run that cannot start leaves nothing behind
    run_info = {
        'config_file': source.get('config_file', ''), 'overrides': source.get('overrides', {}),
        'config_hash': config_hash(config), 'flops_per_example_step': flops_per_example,
        'total_steps': total_steps, 'trainable_parameters': trainable_param_count(model),
        'backend': runtime.describe(), 'started': started, 'ended': None, 'status': 'running', 'message': '',
    }
    previous = fs.join(workdir, 'run.json')
    if main_host and fs.exists(previous):
        before = json.loads(fs.read_text(previous)).get('config_hash')
        if before and before != run_info['config_hash']:
            print(f'warning: {workdir} was started with config hash {before}, this command resolves to '
                  f'{run_info["config_hash"]}; resuming with the new config', flush=True)
    if main_host:
        fs.write_text(fs.join(workdir, 'config.json'), config.to_json_best_effort(indent=2, sort_keys=True))
        fs.write_text(fs.join(workdir, 'run.json'), json.dumps(run_info, indent=2))

    checkpointer = Checkpointer(workdir, config.checkpoint.keep, config.checkpoint.keep_best,
                                config.checkpoint.async_save, main_host, runtime.shared_filesystem)
    evaluator = Evaluator(model, ema, cfg, config, runtime, dataset.eval_batches(),
                          DifficultyBuckets(dataset.ratings_known, config.eval.difficulty_buckets), workdir)
    writer = MetricWriter(workdir, enabled=main_host, tensorboard=config.logging.tensorboard)

    def finish(status, message=''):
        run_info.update(status=status, message=message, ended=time.time())
        if main_host:
            fs.write_text(fs.join(workdir, 'run.json'), json.dumps(run_info, indent=2))

    try:
        if config.mode == 'eval':
            state_lib.initialize_from(config.init_from or workdir, model, ema, checkpointer, cfg)
            metrics = evaluator.run(0)
            writer.write(0, metrics)
            _print_summary(workdir, metrics, started, 'eval')
            finish('done')
            return metrics
        loop = _TrainLoop(config, trainer, runtime, dataset, checkpointer, evaluator, writer, workdir,
                          total_steps, eval_every, flops_per_example)
        metrics = loop.run()
        status = 'preempted' if loop.stop.requested else 'done'
        finish(status, loop.stop.reason)
        _print_summary(workdir, metrics, started, status)
        return metrics
    except NonFiniteLoss as e:
        finish('nan', str(e))
        raise
    except BaseException as e:
        finish('failed', f'{type(e).__name__}: {e}'[:500])
        raise
    finally:
        checkpointer.close()
        writer.close()


def _print_summary(workdir, metrics, started, status):
    lines = [f'run {status} in {format_duration(time.time() - started)}']
    for key in ('eval/exact_accuracy', 'eval/accuracy', 'eval/steps'):
        if key in metrics:
            lines.append(f'  {key} = {metrics[key]:.4f}')
    for key in sorted(k for k in metrics if k.startswith('eval_by_difficulty/')):
        lines.append(f'  {key} = {metrics[key]:.4f}')
    lines += [f'  outputs: {workdir}',
              f'  metrics: {fs.join(workdir, "metrics.jsonl")}  (tensorboard --logdir {workdir})',
              f'  checkpoints: {fs.join(workdir, "checkpoints")}']
    print('\n'.join(lines), flush=True)


class _TrainLoop:
    def __init__(self, config, trainer, runtime, dataset, checkpointer, evaluator, writer, workdir,
                 total_steps, eval_every, flops_per_example):
        self.config, self.cfg, self.runtime = config, trainer.cfg, runtime
        self.trainer = trainer
        self.model, self.optimizers, self.ema = trainer.model, trainer.optimizers, trainer.ema
        self.checkpointer, self.evaluator, self.writer = checkpointer, evaluator, writer
        self.workdir = workdir
        self.total_steps, self.eval_every = total_steps, eval_every
        self.flops_per_example = flops_per_example
        self.batch = config.data.global_batch_size
        self.num_groups = dataset.train.num_groups
        self.loader = dataset.train_batches()
        self.stages = curriculum_stages(config, total_steps)
        self.step_fn = trainer.step_fn
        self.stop = _Stop()
        self.progress = Progress(total_steps, enabled=runtime.is_main_host)
        self.last_eval = {}
        self.nonfinite = False
        self._last_log = None

    # ---- state ------------------------------------------------------------------
    def _restore_or_init(self):
        carry, self.zero = device_state(self.trainer, self.runtime, self.batch)
        resumed = state_lib.resume_training(self.checkpointer, self.model, self.optimizers, self.ema,
                                            self.loader, carry, self.runtime)
        if resumed is not None:
            latest, carry = resumed
            settle(self.trainer, self.runtime)
            print(f'resuming from step {latest} ({fs.join(self.workdir, "checkpoints", str(latest))})', flush=True)
            return latest, carry
        if self.config.init_from:
            state_lib.initialize_from(self.config.init_from, self.model, self.ema, self.checkpointer, self.cfg)
            settle(self.trainer, self.runtime)
            print(f'initialised weights from {self.config.init_from}', flush=True)
        return 0, carry

    def _nonfinite(self, step):
        return NonFiniteLoss(
            f'non-finite loss before step {step}: stopped; the last good checkpoint is kept in '
            f'{fs.join(self.workdir, "checkpoints")} (lower optim.lr, or set train.nan_policy=skip)')

    def _save(self, step, carry, sums, eval_metrics=None):
        # Never let a non-finite update reach a checkpoint: this read waits for the step.
        if self.config.train.nan_policy == 'stop' and float(sums['nonfinite_total'].cpu()) > 0:
            self.nonfinite = True
        if self.nonfinite:
            raise self._nonfinite(step)
        # The prefetcher's position: the batches the steps consumed, not those prepared ahead.
        state, meta = state_lib.training_state(step, self.model, self.optimizers, self.ema, self.batches, carry,
                                               self.runtime)
        self.checkpointer.save(step, state, meta, eval_metrics)

    # ---- logging ----------------------------------------------------------------
    def _log_closure(self, step, sums):
        def log(sums):
            now = time.time()
            host = {k: float(v.detach().cpu()) for k, v in sums.items()}
            prev_step, prev_time = self._last_log or (step - int(host['updates']), self._started)
            self._last_log = (step, now)
            steps_per_s = (step - prev_step) / max(now - prev_time, 1e-9)
            count, rows = max(host['count'], 1.0), max(host['rows'], 1.0)
            counters = self.runtime.counters()
            scalars = {
                'train/loss': host['loss'] / rows,
                'train/lm_loss': host['lm_loss'] / rows,
                'train/q_halt_loss': host['q_halt_loss'] / rows,
                'train/accuracy': host['accuracy'] / count,
                'train/exact_accuracy': host['exact_accuracy'] / count,
                'train/q_halt_accuracy': host['q_halt_accuracy'] / count,
                'train/steps': host['steps'] / count,
                'train/halted_rows': host['count'] / max(host['updates'], 1.0),
                'train/lr': host['lr_last'],
                'train/exploration_prob': host['exploration_last'],
                'train/H_cycles': stage_at(self.stages, step - 1)[1],
                'train/L_cycles': stage_at(self.stages, step - 1)[2],
                'perf/step_ms': 1000.0 / steps_per_s if steps_per_s > 0 else float('nan'),
                'perf/examples_per_s': steps_per_s * self.batch,
                'perf/tflops_per_s': steps_per_s * self.batch * self.flops_per_example / 1e12,
                'progress/examples': step * self.batch,
                'progress/epoch': step * self.batch / self.num_groups,
                'progress/pflop': step * self.batch * self.flops_per_example / 1e15,
                'xla/uncached_compiles': counters['uncached_compiles'],
                'xla/cpu_fallback_ops': counters['cpu_fallback_ops'],
                'xla/host_syncs': counters['host_syncs'],
            }
            if self.config.train.nan_policy == 'skip':
                scalars['train/skipped_updates'] = host['nonfinite']
            elif host['nonfinite'] > 0 or not math.isfinite(host['loss']):
                self.nonfinite = True
            self.writer.write(step, scalars)
            self.progress.show(step, steps_per_s, scalars)
        self.runtime.add_step_closure(log, (sums,))

    # ---- the loop ---------------------------------------------------------------
    def run(self):
        self.stop.install()
        step, carry = self._restore_or_init()
        if self.loader.step != step:
            raise RuntimeError(f'data position {self.loader.step} does not match the restored step {step}')
        if step >= self.total_steps:
            print(f'nothing to do: the run already reached step {step} of {self.total_steps}', flush=True)
            return self.last_eval or self.evaluator.run(step)
        if len(self.stages) > 1 and self.runtime.is_main_host:
            print('curriculum recursion: ' + ', '.join(f'from step {s}: H_cycles={h} L_cycles={l}'
                                                       for s, h, l in self.stages)
                  + f' ({len(self.stages)} compiled train graphs, one per stage)', flush=True)
        config = self.config
        log_every = config.train.log_every_steps
        ckpt_every = config.checkpoint.every_steps
        from trm_spmd.data.loader import Prefetcher
        self.batches = prefetcher = Prefetcher(self.loader, depth=config.data.prefetch)
        step_tensor = make_step_tensor(self.runtime, step)
        sums = self.zero
        self._started = time.time()
        try:
            while step < self.total_steps:
                _, H, L = stage_at(self.stages, step)
                batch = self.runtime.put_batch(next(prefetcher))
                carry, step_tensor, sums = self.step_fn(carry, batch, step_tensor, sums, H, L)
                step += 1
                last = step == self.total_steps
                if step % log_every == 0 or last or self.stop.requested:
                    self._log_closure(step, sums)
                    sums = dict(self.zero, nonfinite_total=sums['nonfinite_total'])
                if self.nonfinite:
                    raise self._nonfinite(step)
                eval_metrics = None
                if step % self.eval_every == 0 or last:
                    self.runtime.wait()
                    eval_metrics = self.evaluator.run(step)
                    self.last_eval = eval_metrics
                    self.writer.write(step, eval_metrics)
                    if self.runtime.is_main_host:
                        print(f'eval at step {step}: exact accuracy {eval_metrics["eval/exact_accuracy"]:.4f}, '
                              f'token accuracy {eval_metrics["eval/accuracy"]:.4f}', flush=True)
                if step % ckpt_every == 0 or eval_metrics is not None or last or self.stop.requested:
                    self.runtime.wait()
                    self._save(step, carry, sums, eval_metrics)
                if self.stop.requested:
                    print(f'{self.stop.reason}: checkpoint written at step {step}; exiting', flush=True)
                    break
        finally:
            prefetcher.close()
            self.runtime.wait()
            self.runtime.sync()
        if self.nonfinite:
            raise self._nonfinite(step)
        self.writer.flush()
        return self.last_eval
