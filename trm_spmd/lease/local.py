"""A lease on a local workdir: an OS lock (flock) on DIR/.lease.lock, held open by the process
for the run's life, so the kernel frees it however the run ends; DIR/lease.json beside it
names the holder for the refusal message."""

import fcntl
import json
import os

from trm_spmd import fs
from trm_spmd.errors import UserError
from trm_spmd.lease.holder import LOCK, RECORD, LeaseHeld, parse_record, refusal


class LocalLease:
    kind = 'local'

    def __init__(self, workdir, clock):
        self.workdir = workdir
        self.clock = clock
        self.record_path = os.path.join(workdir, RECORD)
        self._fd = None

    def acquire(self, record, takeover_stale):
        del takeover_stale   # the kernel frees a dead holder's lock: nothing is ever stale here
        path = os.path.join(self.workdir, LOCK)
        with fs.user_facing(path, 'create'):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                holder = parse_record(fs.read_text(self.record_path))
            except OSError:
                holder = None
            raise LeaseHeld(refusal(self.workdir, holder, self.clock(), stale=False)) from None
        self._fd = fd
        self.renew(record)

    def renew(self, record):
        fs.write_text(self.record_path, json.dumps(record, indent=2))

    def heartbeat(self, record):
        # Informational only (the lock is the lease): a full disk must not stop the run here.
        try:
            self.renew(record)
        except (OSError, UserError):
            pass
        return None

    def check(self):
        return None

    def release(self):
        if self._fd is None:
            return
        try:
            os.unlink(self.record_path)
        except OSError:
            pass
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
