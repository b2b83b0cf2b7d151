"""Metrics out of a run: metrics.jsonl, TensorBoard scalars, and a console progress line.

Only host 0 writes. Values arrive already on the host (read in a step closure, one step
late), so nothing here touches a device. A line of metrics.jsonl is appended whole or not
at all: a write that fails half-way (a full disk) is cut back off before the error (one
line, StorageError) reaches the run, so a resumed run never appends to a torn record.
"""

import errno
import json
import math
import os
import sys
import time

from trm_spmd import fs


class MetricWriter:
    """Appends one JSON object per log event to DIR/metrics.jsonl and mirrors it to TensorBoard."""

    # On a bucket an object cannot be appended to: the whole file is re-uploaded, at most this often.
    REMOTE_FLUSH_SECONDS = 60.0

    def __init__(self, workdir, enabled=True, tensorboard=True):
        self.enabled = enabled
        self.path = fs.join(workdir, 'metrics.jsonl')
        self._remote = fs.is_remote(workdir)
        self._lines = []
        self._last_upload = 0.0
        self._tb = None
        if not enabled:
            return
        if self._remote and fs.exists(self.path):
            self._lines = fs.read_text(self.path).splitlines(keepends=True)
        if tensorboard:
            self._tb = _EventFile(fs.join(workdir, 'tensorboard'))

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
        if self._tb is not None:
            self._tb.add_scalars(int(step), record['time'], {n: v for n, v in record.items()
                                                             if n not in ('step', 'time') and isinstance(v, (int, float))})

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

    def close(self):
        self.flush()
        if self._tb is not None:
            self._tb.close()
            self._tb = None


class _EventFile:
    """TensorBoard scalars, written in the caller's thread. tensorboardX's SummaryWriter writes
    from a thread of its own: when a write fails (a full disk) that thread dies, and a later
    add blocks forever on its full queue, hanging the run. Here a failed write raises where
    the run reports it (one line, StorageError)."""

    FLUSH_SECONDS = 30.0   # on a bucket a flush uploads the whole file again

    def __init__(self, logdir):
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.record_writer import directory_check
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


def format_duration(seconds):
    if seconds is None or not math.isfinite(seconds):
        return '?'
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f'{h}:{m:02d}:{s:02d}' if h else f'{m}:{s:02d}'


class Progress:
    """The console line: step, rate, ETA and the key metrics."""

    def __init__(self, total_steps, enabled=True, stream=None):
        self.total = total_steps
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self.start = time.time()

    def line(self, step, steps_per_s, scalars):
        remaining = (self.total - step) / steps_per_s if steps_per_s > 0 else None
        parts = [f'step {step}/{self.total}', f'{steps_per_s:.2f} steps/s',
                 f'elapsed {format_duration(time.time() - self.start)}', f'eta {format_duration(remaining)}']
        for key, label in (('train/loss', 'loss'), ('train/accuracy', 'acc'),
                           ('train/exact_accuracy', 'exact'), ('train/steps', 'act'),
                           ('train/lr', 'lr'), ('eval/exact_accuracy', 'eval_exact')):
            if key in scalars:
                value = scalars[key]
                parts.append(f'{label} {value:.3g}' if key != 'train/lr' else f'{label} {value:.2e}')
        return ' | '.join(parts)

    def show(self, step, steps_per_s, scalars):
        if self.enabled:
            print(self.line(step, steps_per_s, scalars), file=self.stream, flush=True)
