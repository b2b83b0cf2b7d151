"""Metrics out of a run: the training scalars of a log window, metrics.jsonl, TensorBoard and,
when logging.wandb is on, Weights & Biases (wandb_run.py).

Only host 0 writes. Values arrive already on the host, so nothing here touches a device.
A line of metrics.jsonl is appended whole or not at all: a write that fails half-way (a
full disk) is cut back off before the error (one line, StorageError) reaches the run, so
a resumed run never appends to a torn record.
"""

import errno
import io
import json
import os
import sys
import time

from trm_spmd import fs
from trm_spmd.progress import Progress
from trm_spmd.train.schedule import stage_at
from trm_spmd.train.wandb_run import WandbRun


class MetricWriter:
    """Appends one JSON object per log event to DIR/metrics.jsonl and mirrors its numbers to
    TensorBoard and, given `wandb_config` (the run's config, with logging.wandb on), to W&B."""

    # On a bucket an object cannot be appended to: the whole file is re-uploaded, at most this often.
    REMOTE_FLUSH_SECONDS = 60.0

    def __init__(self, workdir, enabled=True, tensorboard=True, wandb_config=None):
        self.enabled = enabled
        self.path = fs.join(workdir, 'metrics.jsonl')
        self._remote = fs.is_remote(workdir)
        self._lines = []
        self._last_upload = 0.0
        self._tb = self._wandb = None
        if not enabled:
            return
        if self._remote and fs.exists(self.path):
            self._lines = fs.read_text(self.path).splitlines(keepends=True)
        if tensorboard:
            self._tb = _EventFile(fs.join(workdir, 'tensorboard'))
        if wandb_config is not None:
            self._wandb = WandbRun(workdir, wandb_config)

    def write(self, step, scalars):
        if not self.enabled:
            return
        record = {'step': int(step), 'time': time.time()}
        record.update({k: _plain(v) for k, v in scalars.items()})
        line = json.dumps(record) + '\n'
        if self._remote:
            self._lines.append(line)
            if time.time() - self._last_upload > self.REMOTE_FLUSH_SECONDS:
                self._upload()
        else:
            _append_whole(self.path, line.encode())
        numbers = {n: v for n, v in record.items() if n not in ('step', 'time') and isinstance(v, (int, float))}
        if self._tb is not None:
            self._tb.add_scalars(int(step), record['time'], numbers)
        if self._wandb is not None:
            self._wandb.log(int(step), numbers)

    def _upload(self):
        fs.write_text(self.path, ''.join(self._lines))
        self._last_upload = time.time()

    def flush(self):
        if not self.enabled:
            return
        if self._remote:
            self._upload()
        if self._tb is not None:
            self._tb.flush()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(failed=exc_type is not None)

    def close(self, failed=False):
        """`failed`: the run ends with an error (W&B marks the run failed)."""
        try:
            self.flush()
            if self._tb is not None:
                self._tb.close()
                self._tb = None
        finally:
            if self._wandb is not None:
                self._wandb.close(failed)
                self._wandb = None


class _EventFile:
    """TensorBoard scalars, written in the caller's thread. tensorboardX's SummaryWriter writes
    from a thread of its own: when a write fails (a full disk) that thread dies, and a later
    add blocks forever on its full queue, hanging the run. Here a failed write raises where
    the run reports it (one line, StorageError). On a bucket the event file goes through fs
    like every other file (_BucketEventFiles)."""

    FLUSH_SECONDS = 30.0   # on a bucket a flush uploads the whole file again

    def __init__(self, logdir):
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.record_writer import directory_check, register_writer_factory
        register_writer_factory('gs', _BucketEventFiles())
        with fs.user_facing(logdir, 'write'):
            directory_check(logdir)
            self._writer = EventsWriter(fs.join(logdir, 'events'))
        self._path = logdir
        self._last_flush = time.time()

    def add_scalars(self, step, walltime, scalars):
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar
        with fs.user_facing(self._path, 'write'):
            for name, value in scalars.items():
                self._writer.write_event(Event(wall_time=walltime, step=step, summary=scalar(name, value)))
            if time.time() - self._last_flush > self.FLUSH_SECONDS:
                self.flush()

    def flush(self):
        with fs.user_facing(self._path, 'write'):
            self._writer.flush()
        self._last_flush = time.time()

    def close(self):
        self.flush()
        self._writer.close()


class _BucketEventFile:
    """An event file on a bucket, held in memory and uploaded whole through fs at each flush.
    (tensorboardX's own gs:// writer uploads with google-cloud-storage, outside fs's one-line
    errors, and flushes again from __del__ at exit, when a bucket that failed makes it print a
    traceback.)"""

    def __init__(self, path):
        self.path, self.data, self._uploaded = path, io.BytesIO(), -1

    def write(self, data):
        self.data.write(data)

    def flush(self):
        if self._uploaded != self.data.tell():   # closing flushes again: nothing new, no upload
            fs.write_bytes(self.path, self.data.getvalue())
            self._uploaded = self.data.tell()

    def close(self):
        self.flush()


class _BucketEventFiles:
    """tensorboardX's writer factory for gs:// paths."""

    def open(self, path):
        return _BucketEventFile(path)

    def directory_check(self, path):
        pass   # a bucket has no directories to create


def _append_whole(path, data):
    with fs.user_facing(path, 'append to'):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            size = os.fstat(fd).st_size
            try:
                done = 0
                while done < len(data):
                    written = os.write(fd, data[done:])
                    if written == 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
                    done += written
            except OSError:
                os.ftruncate(fd, size)   # freeing, so it works on a full disk too
                raise
        finally:
            os.close(fd)


def _plain(value):
    value = float(value) if hasattr(value, '__float__') and not isinstance(value, (bool, int)) else value
    return value


def train_scalars(window, global_batch):
    """The `train/*` scalars of a log window: `window` holds one dict of floats per step
    (the metrics of train_step). Per-row metrics are averaged over the rows that halted in
    the window, losses over every row of every step; lr and exploration are the last step's."""
    total = {k: sum(m[k] for m in window) for k in window[0]}
    count, rows = max(total['count'], 1.0), global_batch * len(window)
    scalars = {f'train/{k}': total[k] / count for k in ('accuracy', 'exact_accuracy', 'q_halt_accuracy', 'steps')}
    scalars.update({f'train/{k}': total[k] / rows for k in ('loss', 'lm_loss', 'q_halt_loss', 'q_continue_loss')
                    if k in total})
    scalars.update({'train/halted_rows': total['count'] / len(window), 'train/lr': window[-1]['lr'],
                    'train/exploration_prob': window[-1]['exploration_prob'],
                    'train/nonfinite_steps': total['nonfinite']})
    return scalars


def read_metrics(runtime, pending):
    """The per-step metric dicts of `pending` as host floats, read in one transfer."""
    keys = list(pending[0])
    values = runtime.read_scalars([m[k] for m in pending for k in keys])
    return [dict(zip(keys, values[i * len(keys):(i + 1) * len(keys)])) for i in range(len(pending))]


class TrainLog:
    """The scalars of a log window (train_scalars, speed, progress, compiler counters):
    written to metrics.jsonl/TensorBoard, and the console's progress line.

    Speed counts training only: the loop reports the time it spends evaluating and
    checkpointing (`paused`), which is taken out of the window it falls in. The ETA is the
    training steps left at the mean training speed since the first window (which compiles),
    plus the evaluations left at the last one's duration, so it converges instead of jumping
    with each evaluation."""

    def __init__(self, writer, runtime, global_batch, total_steps, epoch_examples, flops_per_example, stages,
                 eval_every=0):
        self.writer, self.runtime = writer, runtime
        self.global_batch, self.epoch_examples, self.flops_per_example = global_batch, epoch_examples, flops_per_example
        self.stages, self.total_steps, self.eval_every = stages, total_steps, eval_every
        self.progress = Progress('step', total_steps, enabled=runtime.is_main_host, stream=sys.stdout,
                                 unit='steps', throttle=False)
        self.last = None
        self.pause = 0.0             # seconds of the current window spent outside training
        self.eval_seconds = None     # the last evaluation's duration
        self.trained = [0, 0.0]      # steps and training seconds after the first window
        self.windows = 0

    def start(self, step):
        """Marks where timing starts; prints the curriculum's stages when there are several."""
        self.last = (step, time.time())
        if len(self.stages) > 1 and self.runtime.is_main_host:
            print('curriculum recursion: ' + ', '.join(f'from step {s}: H_cycles={h} L_cycles={l}'
                                                       for s, h, l in self.stages)
                  + f' ({len(self.stages)} compiled train graphs, one per stage)', flush=True)

    def paused(self, seconds, evaluation=False):
        """Time the loop spent outside training since the last step (an evaluation, a save)."""
        self.pause += seconds
        if evaluation:
            self.eval_seconds = seconds

    def remaining_seconds(self, step, steps_per_s):
        """Training steps left at the mean training speed, plus the evaluations left."""
        steps, seconds = self.trained
        rate = steps / seconds if steps and seconds > 0 else steps_per_s
        if not rate:
            return None
        left = (self.total_steps - step) / rate
        if self.eval_every and self.eval_seconds is not None:
            evals = self.total_steps // self.eval_every - step // self.eval_every
            evals += 1 if self.total_steps % self.eval_every and step < self.total_steps else 0
            left += evals * self.eval_seconds
        return left

    def write(self, step, window):
        """Scalars of the steps in `window` (host dicts, one per step), ending at `step`."""
        now = time.time()
        first, then = self.last
        self.last = (step, now)
        training = max(now - then - self.pause, 1e-9)
        self.pause = 0.0
        steps_per_s = (step - first) / training
        self.windows += 1
        if self.windows > 1:   # the first window compiles the step
            self.trained[0] += step - first
            self.trained[1] += training
        H, L = stage_at(self.stages, step - 1)
        examples = steps_per_s * self.global_batch
        scalars = train_scalars(window, self.global_batch)
        scalars.update({
            'train/H_cycles': H, 'train/L_cycles': L,
            'perf/step_ms': 1000.0 / steps_per_s if steps_per_s > 0 else float('nan'),
            'perf/examples_per_s': examples,
            'perf/tflops_per_s': examples * self.flops_per_example / 1e12,
            'progress/examples': step * self.global_batch,
            'progress/epoch': step * self.global_batch / self.epoch_examples,
            'progress/pflop': step * self.global_batch * self.flops_per_example / 1e15,
            **{f'xla/{k}': v for k, v in self.runtime.counters().items()},
        })
        self.writer.write(step, scalars)
        self.progress.update(step, steps_per_s, [f'{label} {scalars[key]:.3g}' for key, label in _PROGRESS],
                             remaining=self.remaining_seconds(step, steps_per_s))
        return scalars

    def print_eval(self, step, metrics):
        if self.runtime.is_main_host:
            scores = ''.join(f', {key[len("eval/"):]} {metrics[key]:.4f}' for key in task_scores(metrics))
            if metrics.get('eval/count', 1):
                accuracy = (f'exact accuracy {metrics["eval/exact_accuracy"]:.4f}, '
                            f'token accuracy {metrics["eval/accuracy"]:.4f}')
            else:   # a test split without answers (new tasks): only the task's own scores mean anything
                accuracy = 'test split without answers'
            print(f'eval at step {step}: {accuracy}{scores}', flush=True)


# A mixture's per-task copies of the generic eval metrics the progress line leaves out.
_TASK_DETAIL = ('accuracy', 'q_halt_accuracy', 'steps', 'lm_loss', 'count', 'tasks', 'tasks_with_solutions')


def task_scores(metrics):
    """The keys of each task's own scores (eval/<task>/<score>, e.g. eval/arc/pass@2, or a
    mixture's eval/maze/exact_accuracy), sorted."""
    return sorted(k for k in metrics if k.startswith('eval/') and k.count('/') == 2
                  and k.rsplit('/', 1)[1] not in _TASK_DETAIL)


_PROGRESS = (('train/loss', 'loss'), ('train/accuracy', 'acc'), ('train/exact_accuracy', 'exact'),
             ('train/steps', 'act'), ('train/lr', 'lr'))
