"""One run per workdir: a lease that a run holds on its workdir for its whole life.

Two runs in one workdir both train: they interleave metrics.jsonl, write checkpoints into
the same directories and delete each other's. So a run takes the workdir's lease before it
writes anything, and a second run refuses in one line naming the holder.

Local paths (host-local disks): `DIR/.lease.lock`, locked with flock(LOCK_EX | LOCK_NB)
through a file descriptor held open for the run's life. The kernel drops the lock when the
process ends, however it ends (SIGKILL included), so a local lease is never stale and needs
no takeover. `DIR/lease.json` beside it names the holder (host, pid, start, last heartbeat,
config hash) for the refusal message; it is informational. The lock file is never deleted:
a run could otherwise lock a file that another has just replaced. (A child process forked
without exec inherits the descriptor and with it the lock; trm_spmd forks none.)

gs:// paths: the object `DIR/lease.json` is the lease. It is created only if absent
(generation-match 0), renewed every HEARTBEAT_S by a thread of the holder (a write
conditional on the generation it last wrote, so it never overwrites another run's lease)
and deleted on release (again only if still ours). A lease whose last heartbeat is older
than STALE_AFTER_S is stale: its holder is gone or cut off. Only a stale lease can be taken
over, and only when asked (takeover_stale, the --takeover_stale_lease flag); a fresh one is
always refused. A holder that finds the generation changed, or could not renew for
STALE_AFTER_S, has lost the lease: `check()` raises, and the run must stop writing.
Staleness compares the holder's clock with the reader's (NTP-synced on Cloud VMs; the
margin is minutes). A holder on this very machine whose process is gone (same boot and pid
namespace, no such pid) is known dead: its lease is taken without waiting or a flag.

A pod: for a shared workdir (a bucket) host 0 holds the lease; with host-local disks every
host locks its own copy. `acquire_for_run` exchanges the outcome, so every host refuses or
every host starts.

  holder.py   the holder's record, staleness, and the refusal line
  local.py    the local lease (flock)
  gcs.py      the gs:// lease (generation preconditions) and its Cloud Storage store
  __init__    the lease a run holds (heartbeat, check, release) and how hosts take it together

The workdir's lease sits below train/ (the loop takes it) and above fs and hosts, which it uses.
"""

import threading
import time
import uuid

from trm_spmd import fs, hosts
from trm_spmd.errors import UserError
from trm_spmd.lease.gcs import BucketLease, GcsStore
from trm_spmd.lease.holder import (HEARTBEAT_S, LOCK, RECORD, STALE_AFTER_S, TAKEOVER_FLAG, LeaseHeld, LeaseLost,
                                   describe, is_stale, new_record)
from trm_spmd.lease.local import LocalLease

__all__ = ['HEARTBEAT_S', 'LOCK', 'RECORD', 'STALE_AFTER_S', 'TAKEOVER_FLAG', 'GcsStore', 'Lease', 'LeaseHeld',
           'LeaseLost', 'NoLease', 'acquire', 'acquire_for_run', 'check_agreed', 'describe', 'is_stale', 'new_record']


class Lease:
    """A held lease; a context manager. `check()` before writing; `release()` at the end."""

    def __init__(self, workdir, backend, record, clock, heartbeat_s):
        self.workdir = workdir
        self.record = record
        self._backend = backend
        self._clock = clock
        self._heartbeat_s = heartbeat_s
        self._lost = None
        self._stop = threading.Event()
        self._thread = None

    @property
    def taken_over(self):
        """The record of the stale or dead holder this lease replaced, or None."""
        return getattr(self._backend, 'taken_over', None)

    def beat(self):
        """One renewal (the heartbeat thread calls this every heartbeat_s)."""
        if self._lost:
            return
        self.record = dict(self.record, heartbeat=self._clock(), token=uuid.uuid4().hex)
        self._lost = self._backend.heartbeat(self.record)

    def start_heartbeat(self):
        def run():
            while not self._stop.wait(self._heartbeat_s):
                self.beat()
        self._thread = threading.Thread(target=run, name='lease-heartbeat', daemon=True)
        self._thread.start()
        return self

    def check(self):
        """Raises LeaseLost when another run took the workdir over (or this one could not renew)."""
        if not self._lost:
            try:
                self._lost = self._backend.check()
            except Exception:  # noqa: BLE001 - unreachable now is the heartbeat's to judge
                pass
        if self._lost:
            raise LeaseLost(f'this run lost its lease on {self.workdir}: {self._lost}; it stops without writing '
                            f'more (its checkpoints so far are kept)')

    def release(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if not self._lost:
            self._backend.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class NoLease:
    """What a host that does not write the workdir holds: nothing to check or release."""
    workdir = record = taken_over = None

    def check(self):
        return None

    def release(self):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def acquire(workdir, config_hash='', takeover_stale=False, store=None, clock=time.time,
            heartbeat_s=HEARTBEAT_S, stale_after_s=STALE_AFTER_S):
    """This process's lease on `workdir` (which must exist), or LeaseHeld naming the holder.
    The heartbeat is not started: call start_heartbeat(). `store` replaces the gs:// store (tests)."""
    if fs.is_remote(workdir):
        backend = BucketLease(workdir, store or GcsStore(fs.join(workdir, RECORD)), stale_after_s, clock)
    else:
        backend = LocalLease(workdir, clock)
    record = new_record(config_hash, clock())
    with fs.user_facing(workdir, 'take the lease on'):   # an unreachable bucket: one line naming it
        backend.acquire(record, takeover_stale)
    return Lease(workdir, backend, record, clock, heartbeat_s)


def check_agreed(lease, exchange):
    """lease.check() on every host together: if any host lost its lease, every host raises."""
    try:
        lease.check()
        problem = None
    except LeaseLost as e:
        problem = str(e)
    hosts.agree(exchange, problem)


def acquire_for_run(workdir, runtime, config_hash='', takeover_stale=False, exchange=None, store=None):
    """Every host's lease on the run's workdir, agreed before the first step: the hosts that
    write it (fs.writes_workdir) take the lease, the others hold a NoLease; if any host is
    refused, every host raises the same line (and the ones that got a lease release it).
    The returned lease's heartbeat runs. `exchange` defaults to hosts.exchanger(runtime)."""
    lease, error = NoLease(), None
    if fs.writes_workdir(workdir, runtime.is_main_host, runtime.shared_filesystem):
        try:
            lease = acquire(workdir, config_hash, takeover_stale, store=store)
        except UserError as e:
            error = e
    try:
        hosts.agree(exchange or hosts.exchanger(runtime), str(error) if error else None)
    except UserError as e:
        lease.release()
        if error is not None and str(e) == str(error):
            raise error from None   # one host: its refusal keeps its kind (LeaseHeld, StorageError)
        raise LeaseHeld(str(e)) from None
    if lease.taken_over:
        print(f'took over the stale lease of {workdir} from {describe(lease.taken_over, time.time())}', flush=True)
    return lease.start_heartbeat() if isinstance(lease, Lease) else lease
