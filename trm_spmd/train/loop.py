"""train_and_evaluate: the whole story of a run in one function.

Where a step runs, where its batch is sharded over the devices, when values come back to
the host, when the model is evaluated and when checkpoints are taken: all in the loop of
train_and_evaluate. The device work is in step.py (train_step, one compiled graph per
curriculum stage) and evaluate.py; what a checkpoint holds is in checkpoint_io.py.
"""

import contextlib
import os
import signal
import sys
import threading
import time

from trm_spmd import fs, hosts, scale
from trm_spmd import lease as lease_lib
from trm_spmd.checkpoint import Checkpointer, CheckpointReader, restore_agreed
from trm_spmd.config import config_hash, validate
from trm_spmd.data.loader import Prefetcher
from trm_spmd.errors import EXIT_STOPPED, Stopped, UserError
from trm_spmd.model.flops import train_flops_per_example_step
from trm_spmd.progress import format_duration
from trm_spmd.runtime import create_runtime
from trm_spmd.train.checkpoint_io import checkpoint_tree, initialize_from, restore_state
from trm_spmd.train.data import open_dataset
from trm_spmd.train.metrics import MetricWriter, TrainLog, read_metrics
from trm_spmd.train.posttrain import trained_tasks_warning
from trm_spmd.train.run_record import RunRecord
from trm_spmd.train.schedule import curriculum_stages, frozen_trunk_steps, graph_at, itstime, schedule_steps
from trm_spmd.train.setup import build_trainer, compile_train_steps, initial_state, settle


class NonFiniteLoss(UserError):
    pass


class StopRequest:
    """Set by SIGTERM (a TPU preemption) or SIGINT (Ctrl-C): the loop checkpoints the step it
    is on and stops. A Ctrl-C once a stop is under way stops at once, as a kill would: one
    line, `stop_now()` (which records the run as stopped), exit EXIT_STOPPED, nothing unwound.
    The newest complete checkpoint is untouched and a save in flight is never listed (orbax
    renames a checkpoint into place only once it is whole). A context manager: the previous
    handlers are back when the run ends."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, stop_now=lambda: None):
        self.reason = ''
        self._stop_now = stop_now
        self._previous = {}

    def _handle(self, signum, frame):
        del frame
        if self.reason and signum == signal.SIGINT:
            self._exit_now()
        if not self.reason and signum == signal.SIGINT:
            _say('Ctrl-C: stopping cleanly (Ctrl-C again stops at once)')
        self.reason = self.reason or signal.Signals(signum).name

    def _exit_now(self):
        _say('stopped at once by a second Ctrl-C: the step in progress is not saved; rerun the same command to '
             'resume from the newest complete checkpoint')
        try:
            self._stop_now()
        finally:
            os._exit(EXIT_STOPPED)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def __bool__(self):
        return bool(self.reason)


def _say(line):
    """A line on stderr from a signal handler: straight to the file descriptor, since the
    handler may have interrupted a print to the same stream."""
    os.write(2, (line + '\n').encode())


def checkpoints_complete(checkpointer, exchange):
    """Returns once every host's checkpoints in flight are complete. A save that failed on any
    host stops every host with its line, so that no host records the run as done."""
    failure = None
    try:
        checkpointer.wait()
    except fs.StorageError as e:
        failure = e
    line = hosts.first_problem(exchange(str(failure) if failure else None))
    if failure is not None and line == str(failure):
        raise failure
    if line:
        raise fs.StorageError(line)


def _puzzle_rows(config):
    """How init_from's puzzle embedding starts this run: config.init_puzzle_emb when training
    (a new table for new tasks), as saved when evaluating (a post-trained run is evaluated
    with its own rows)."""
    return config.init_puzzle_emb if config.mode == 'train' else 'keep'


def initialize_before_start(config, workdir, trainer):
    """Loads config.init_from into the trainer when the workdir holds no checkpoint to resume
    from, before anything is written: a source that cannot be used stops the run in one line
    and leaves no workdir behind. Returns whether it did."""
    if not (config.init_from or config.mode == 'eval' or _puzzle_rows(config) != 'keep'):
        return False
    with CheckpointReader(workdir) as own:
        if own.all_steps():
            return False   # the workdir's own checkpoints come first: the run resumes
    if not config.init_from and _puzzle_rows(config) != 'keep':
        raise UserError(f'init_puzzle_emb={config.init_puzzle_emb} post-trains a trained run on new tasks: pass '
                        f'--config.init_from=PRETRAINED_RUN (a run directory, or official:PATH)')
    if not config.init_from:
        raise UserError(f'mode=eval evaluates config.init_from, or the workdir\'s newest checkpoint, and {workdir} '
                        f'has none: pass --config.init_from=RUN_DIR (or official:PATH)')
    initialize_from(config.init_from, trainer, _puzzle_rows(config), config.seed)
    return True


def train_and_evaluate(config, workdir, source=None, takeover_stale_lease=False):
    """Trains `config` in `workdir`, resuming from its newest checkpoint, and returns the last
    evaluation's metrics. With config.mode 'eval' it evaluates config.init_from (default:
    the workdir's newest checkpoint) instead. The run holds a lease on `workdir` for its
    whole life (trm_spmd/lease): a second run there is refused, unless the lease is stale and
    takeover_stale_lease is set. SIGTERM checkpoints the step and returns (run.json:
    preempted); Ctrl-C does the same and raises errors.Stopped (run.json: stopped)."""
    started, workdir = time.time(), fs.absolute(workdir)

    # ---- devices, hosts, data ------------------------------------------------------------
    runtime = create_runtime(config)
    validate(config, runtime.device_count, runtime.process_count)
    hosts.check_agreement(runtime, config)
    dataset = open_dataset(config, runtime)
    loader = dataset.train_batches()
    total_steps, eval_every = schedule_steps(config, dataset.epoch_examples)
    stages = curriculum_stages(config, total_steps)
    frozen_steps = frozen_trunk_steps(config, total_steps)
    batch_size = config.data.global_batch_size

    # ---- model, optimizers, EMA and the compiled steps -----------------------------------
    trainer = build_trainer(config, runtime, dataset.vocab_size, dataset.seq_len, dataset.num_puzzle_identifiers)
    flops_per_example = train_flops_per_example_step(trainer.cfg)
    warning = scale.far_outside_plan(flops_per_example * batch_size, runtime.device_count, runtime.device_kind)
    if warning and runtime.is_main_host:
        print(warning, file=sys.stderr, flush=True)
    train_steps = compile_train_steps(trainer, config, runtime, total_steps)
    evaluator = dataset.evaluator(trainer, runtime, workdir)
    if not trainer.cfg.mlp_t and runtime.is_main_host:   # which attention model.attention_impl chose
        print(f'token mixing: {trainer.cfg.token_mixing(config.xla.attention_kernel)}', flush=True)
    if config.data.mixture and runtime.is_main_host:
        print(dataset.describe(), flush=True)
    initialized = initialize_before_start(config, workdir, trainer)
    if initialized and _puzzle_rows(config) != 'keep' and runtime.is_main_host:
        warning = trained_tasks_warning(config, getattr(dataset, 'path', ''))
        if warning:
            print(warning, file=sys.stderr, flush=True)
    if frozen_steps and runtime.is_main_host:
        print(f'steps 1-{frozen_steps} of {total_steps} train the puzzle embedding alone (the network frozen: '
              f'optim.freeze_trunk_fraction={config.optim.freeze_trunk_fraction:g}), the rest everything', flush=True)

    # ---- the run directory: a lease on it, its record, checkpoints and metrics ------------
    with contextlib.ExitStack() as cleanup:
        fs.makedirs(workdir)   # only now: a run that cannot start leaves nothing behind
        exchange = hosts.exchanger(runtime)
        lease = cleanup.enter_context(lease_lib.acquire_for_run(workdir, runtime, config_hash(config),
                                                                takeover_stale_lease))
        checkpointer = cleanup.enter_context(Checkpointer(
            workdir, config.checkpoint.keep, config.checkpoint.keep_best, config.checkpoint.async_save,
            runtime.is_main_host, runtime.shared_filesystem))
        record = RunRecord.start(workdir, config, source, runtime, trainer, total_steps, started,
                                 resuming=checkpointer.latest_step() is not None)
        stop = cleanup.enter_context(StopRequest(
            stop_now=lambda: record.finish('stopped', 'stopped at once by a second Ctrl-C')))
        writer = cleanup.enter_context(MetricWriter(workdir, runtime.is_main_host, config.logging.tensorboard,
                                                    config if config.logging.wandb else None))
        cleanup.callback(runtime.wait)
        log = TrainLog(writer, runtime, batch_size, total_steps, dataset.epoch_examples,
                       flops_per_example, stages, eval_every)
        last_eval = {}
        try:
            # ---- where the run starts: its newest good checkpoint, else init_from, else fresh
            restored = restore_agreed(checkpointer, exchange)   # damaged ones are moved aside
            step = restored.step if restored else 0
            state = initial_state(trainer, runtime, batch_size, step)
            if restored:
                loader.check_position(restored.meta['loader'])
                state = restore_state(trainer, restored.tree, state, runtime)
                print(f'resuming from step {step} ({restored.path})', flush=True)
                if restored.meta.get('eval_pending'):   # preempted during this step's evaluation
                    last_eval = evaluator.run(step)
                    writer.write(step, last_eval)
                    log.print_eval(step, last_eval)
                    checkpointer.save(step, restored.tree, restored.meta, last_eval)   # its best-K entry
                elif restored.meta.get('eval'):
                    # Its best-K copy, when a failure (a full disk) stopped that write: saved now.
                    checkpointer.save(step, restored.tree, restored.meta, restored.meta['eval'])
            elif config.init_from or config.mode == 'eval':
                if not initialized:   # the workdir's checkpoints were gone by the time the run held it
                    initialize_from(config.init_from or workdir, trainer, _puzzle_rows(config), config.seed)
                print(f'initialised weights from {config.init_from or workdir}', flush=True)
            settle(trainer, runtime)
            if config.mode == 'eval':
                last_eval = evaluator.run(step, config.eval.report_act_steps,
                                          interrupt=lambda: stop.reason == 'SIGINT')
                if last_eval is None:
                    raise Stopped('stopped by Ctrl-C during the evaluation, which was not recorded: rerun the same '
                                  'command to evaluate')
                writer.write(step, last_eval)
                checkpoints_complete(checkpointer, exchange)
                record.finish('done')
                record.print_summary(last_eval, 'eval')
                return last_eval
            if step >= total_steps:
                print(f'nothing to do: the run already reached step {step} of {total_steps}', flush=True)
                last_eval = evaluator.run(step)
                if restored:   # its best-K copy, if a checkpoint from before evaluations were recorded lacks it
                    checkpointer.save(step, restored.tree, restored.meta, last_eval)
            log.start(step)

            # ---- the loop -------------------------------------------------------------------
            batches = cleanup.enter_context(Prefetcher(loader.batch_at, start=step, depth=config.data.prefetch))
            pending = []   # each step's metrics, on the device until the next read
            while step < total_steps:
                batch = runtime.put_batch(next(batches))   # this host's rows -> one global batch sharded along `data`
                step_fn = train_steps[graph_at(stages, frozen_steps, step)]
                state, metrics = step_fn(state, batch)   # every device, one graph
                step += 1
                pending.append(metrics)
                evaluate = itstime(step, eval_every, total_steps)
                save = evaluate or itstime(step, config.checkpoint.every_steps, total_steps) or stop
                if save or itstime(step, config.train.log_every_steps, total_steps):
                    # Values come back to the host here only (waiting for this step): before every
                    # checkpoint, so a non-finite update never reaches one.
                    scalars = log.write(step, read_metrics(runtime, pending))
                    pending = []
                    if scalars['train/nonfinite_steps'] and config.train.nan_policy == 'stop':
                        raise NonFiniteLoss(
                            f'non-finite loss before step {step}: stopped; the last good checkpoint is kept in '
                            f'{fs.join(workdir, "checkpoints")} (set train.nan_policy=skip to skip such steps, '
                            f'or start a new --workdir with a lower optim.lr)')
                paused = time.time()
                evaluated = evaluator.run(step, interrupt=stop.__bool__) if evaluate else None
                if evaluated is not None:
                    last_eval = evaluated
                    writer.write(step, last_eval)
                    log.print_eval(step, last_eval)
                    log.paused(time.time() - paused, evaluation=True)
                    paused = time.time()
                if save:
                    lease_lib.check_agreed(lease, exchange)   # another run took the workdir: write nothing
                    tree, meta = checkpoint_tree(trainer, state, step, loader.position(step), runtime)
                    # An evaluation a preemption cut short runs first thing on resume.
                    meta['eval_pending'] = evaluate and evaluated is None
                    if evaluated:   # what its best-K copy is ranked by, should a rerun have to write that copy
                        meta['eval'] = {'eval/exact_accuracy': float(evaluated['eval/exact_accuracy'])}
                    writer.flush()   # a bucket's metrics.jsonl then holds every step this checkpoint does
                    checkpointer.save(step, tree, meta, evaluated)
                log.paused(time.time() - paused)
                if stop:
                    if stop.reason != 'SIGINT':
                        print(f'{stop.reason}: checkpoint written at step {step}; exiting', flush=True)
                    break
                if evaluated and 0 < config.train.stop_at_exact_accuracy <= evaluated['eval/exact_accuracy']:
                    print(f'reached train.stop_at_exact_accuracy={config.train.stop_at_exact_accuracy:g} at step '
                          f'{step}, {format_duration(time.time() - started)} after the start; stopping', flush=True)
                    break
            if config.eval.report_act_steps and not stop:
                # The trained model at other depths: one more pass over the test split.
                last_eval = evaluator.run(step, config.eval.report_act_steps)
                writer.write(step, last_eval)
            # Done (or preempted) only once its newest checkpoint is complete: a save that fails
            # here ends the run like one that fails mid-run.
            checkpoints_complete(checkpointer, exchange)
            if stop.reason == 'SIGINT':
                raise Stopped(f'stopped by Ctrl-C at step {step}, its checkpoint written: rerun the same command '
                              f'to resume')
            status = 'preempted' if stop else 'done'
            record.finish(status, stop.reason)
            record.print_summary(last_eval, status)
            return last_eval
        except Stopped as e:
            record.finish('stopped', str(e))
            raise
        except BaseException as e:
            # A user's error (a NaN stop included) is recorded as the line it prints; anything else with its kind.
            message = str(e) if isinstance(e, UserError) else f'{type(e).__name__}: {e}'
            record.finish('nan' if isinstance(e, NonFiniteLoss) else 'failed', message)
            raise
