"""Progress lines on the console: done/total, rate, elapsed time, ETA, and what the caller adds.

Training prints one at every log step; the dataset builder's longer loops print one at most
every second on a terminal (rewriting the line) or every 10 s into a log.
"""

import math
import sys
import time


def format_duration(seconds):
    if seconds is None or not math.isfinite(seconds):
        return '?'
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    return f'{h}:{m:02d}:{s:02d}' if h else f'{m}:{s:02d}'


class Progress:
    def __init__(self, label, total, enabled=True, stream=None, unit='items', throttle=True):
        self.label, self.total, self.enabled, self.unit = label, total, enabled, unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if throttle else False
        self.min_interval = (1.0 if self.tty else 10.0) if throttle else 0.0
        self.start = self.last = time.monotonic()
        self.shown = False

    def line(self, done, rate=None, extras=(), remaining=None):
        """remaining: seconds left, when the caller knows better than (total - done) / rate."""
        elapsed = time.monotonic() - self.start
        rate = done / elapsed if rate is None and elapsed > 0 else rate
        if remaining is None:
            remaining = (self.total - done) / rate if rate else None
        parts = [f'{self.label} {done}/{self.total}', f'{rate or 0:.3g} {self.unit}/s',
                 f'elapsed {format_duration(elapsed)}', f'eta {format_duration(remaining)}', *extras]
        return ' | '.join(parts)

    def update(self, done, rate=None, extras=(), remaining=None):
        now = time.monotonic()
        if not self.enabled or (self.min_interval and (now - self.start < 2 or now - self.last < self.min_interval)):
            return
        self.last = now
        text = self.line(done, rate, extras, remaining)
        self.stream.write(('\r' + text) if self.tty else (text + '\n'))
        self.stream.flush()
        self.shown = True

    def close(self):
        if self.shown and self.tty:
            self.stream.write('\n')
