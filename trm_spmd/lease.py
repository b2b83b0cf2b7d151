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
"""

import datetime
import fcntl
import json
import os
import socket
import sys
import threading
import time
import uuid

from trm_spmd import bucket, fs, hosts
from trm_spmd.errors import UserError

HEARTBEAT_S = 30.0
# Four missed heartbeats: a slow bucket or a long pause does not make a live run look gone.
STALE_AFTER_S = 120.0
RECORD = 'lease.json'
LOCK = '.lease.lock'
TAKEOVER_FLAG = '--takeover_stale_lease'


class LeaseHeld(UserError):
    """Another run holds the workdir."""


class LeaseLost(UserError):
    """This run no longer holds its workdir: it must stop writing."""


# ---- who holds it -------------------------------------------------------------------------
def _boot_id():
    try:
        with open('/proc/sys/kernel/random/boot_id') as f:
            return f.read().strip()
    except OSError:
        return ''


def _pid_namespace():
    try:
        return os.stat('/proc/self/ns/pid').st_ino
    except OSError:
        return 0


def new_record(config_hash='', now=None):
    now = time.time() if now is None else now
    return {'host': socket.gethostname(), 'pid': os.getpid(), 'started': now, 'heartbeat': now,
            'config_hash': config_hash, 'boot_id': _boot_id(), 'pid_namespace': _pid_namespace(),
            'token': uuid.uuid4().hex}


def _pid_alive(pid):
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True   # a process we may not signal is alive; a malformed pid proves nothing
    return True


def holder_is_dead(record):
    """True only when the holder provably ended: it ran in this boot of this machine and in
    this pid namespace (so its pid means the same here), and no such process exists."""
    return (bool(record.get('boot_id')) and record.get('boot_id') == _boot_id()
            and record.get('pid_namespace') == _pid_namespace() and not _pid_alive(record.get('pid')))


def _age(seconds):
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f'{seconds} s'
    if seconds < 7200:
        return f'{seconds // 60} min'
    return f'{seconds // 3600} h'


def describe(record, now):
    """'host H, pid P, started <UTC>, last heartbeat N s ago' (what is known of it)."""
    if not record:
        return 'holder unknown (its record is missing or unreadable)'
    try:
        started = datetime.datetime.fromtimestamp(float(record['started']), datetime.timezone.utc)
        started = started.strftime('%Y-%m-%d %H:%M:%S UTC')
        beat = f'last heartbeat {_age(now - float(record["heartbeat"]))} ago'
    except (KeyError, TypeError, ValueError):
        started, beat = '?', 'last heartbeat unknown'
    return f'host {record.get("host", "?")}, pid {record.get("pid", "?")}, started {started}, {beat}'


def _parse(data):
    try:
        record = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


def is_stale(record, now, stale_after_s=STALE_AFTER_S):
    """A lease nobody renewed for stale_after_s (or whose record is unreadable) is stale."""
    try:
        return now - float(record['heartbeat']) > stale_after_s
    except (KeyError, TypeError, ValueError):
        return True


def refusal(workdir, record, now, stale, stale_after_s=STALE_AFTER_S):
    """The one line a second run prints."""
    who = describe(record, now)
    if stale:
        return (f'workdir {workdir} is leased to another run ({who}) whose lease is stale (no heartbeat for more '
                f'than {int(stale_after_s)} s): if that run is gone, rerun with {TAKEOVER_FLAG} to take the '
                f'workdir over')
    return (f'workdir {workdir} is in use by another run ({who}): wait for it to end, stop it (python '
            f'launch/tpu.py stop on a TPU VM, else kill its pid), or use another --workdir; two runs in one '
            f'workdir mix their metrics and delete each other\'s checkpoints')


# ---- local: an OS lock --------------------------------------------------------------------
class _LocalLease:
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
                holder = _parse(fs.read_text(self.record_path))
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


# ---- gs://: an object written under generation preconditions ----------------------------------
class GcsStore:
    """The lease object on Cloud Storage, every write conditional on its generation. Each request
    is retried for at most `deadline_s` (google-cloud-storage's default is 120 s): a heartbeat
    retries at the next one, and a run stopping does not wait minutes to release."""

    def __init__(self, url, deadline_s=HEARTBEAT_S):
        try:
            from google.api_core import exceptions
            from google.cloud import storage
            from google.cloud.storage.retry import DEFAULT_RETRY
        except ImportError:
            raise UserError(f'{url}: gs:// workdirs need google-cloud-storage: PY=$(bash launch/setup.sh --gcs) '
                            f'and run with that $PY') from None
        bucket, _, name = url[len('gs://'):].partition('/')
        self._exceptions = exceptions
        self._retry = dict(retry=DEFAULT_RETRY.with_timeout(deadline_s), timeout=deadline_s)
        self._bucket = storage.Client().bucket(bucket)
        self._name = name

    def create_if_absent(self, data):
        """The new generation, or None when the object exists."""
        return self._write(data, 0)

    def replace_if_generation(self, data, generation):
        """The new generation, or None when the object is not at `generation` (or is gone)."""
        return self._write(data, generation)

    def _write(self, data, generation):
        blob = self._bucket.blob(self._name)
        try:
            blob.upload_from_string(data, content_type='application/json', if_generation_match=generation,
                                    **self._retry)
        except (self._exceptions.PreconditionFailed, self._exceptions.NotFound):
            return None
        return blob.generation

    def read(self):
        """(bytes, generation), or None when there is no object."""
        blob = self._bucket.get_blob(self._name, **self._retry)
        if blob is None:
            return None
        try:
            return blob.download_as_bytes(if_generation_match=blob.generation, **self._retry), blob.generation
        except (self._exceptions.PreconditionFailed, self._exceptions.NotFound):
            return self.read()   # replaced or deleted between the two requests: look again

    def delete_if_generation(self, generation):
        """True when deleted; False when the object is not at `generation`."""
        try:
            self._bucket.blob(self._name).delete(if_generation_match=generation, **self._retry)
        except (self._exceptions.PreconditionFailed, self._exceptions.NotFound):
            return False
        return True


class _RemoteLease:
    kind = 'remote'

    def __init__(self, workdir, store, stale_after_s, clock):
        self.workdir = workdir
        self.store = store
        self.stale_after_s = stale_after_s
        self.clock = clock
        self.generation = None
        self.taken_over = None       # the record of the stale or dead holder this run replaced
        self._last_renewal = None

    def _ours(self, record):
        """The generation of the object when it holds `record` (a write whose reply was lost
        but which took effect looks like a refused one), else None."""
        current = self.store.read()
        if current is not None and (_parse(current[0]) or {}).get('token') == record['token']:
            return current[1]
        return None

    def acquire(self, record, takeover_stale):
        clock = self.clock
        data = json.dumps(record)
        for _ in range(5):   # the object may change between our requests: decide again
            generation = self.store.create_if_absent(data)
            if generation is None:
                current = self.store.read()
                if current is None:
                    continue
                holder, held_generation = _parse(current[0]), current[1]
                if holder is not None and holder.get('token') == record['token']:
                    generation = held_generation
                else:
                    stale = holder is None or is_stale(holder, clock(), self.stale_after_s)
                    if not ((stale and takeover_stale) or (holder is not None and holder_is_dead(holder))):
                        raise LeaseHeld(refusal(self.workdir, holder, clock(), stale, self.stale_after_s))
                    generation = (self.store.replace_if_generation(data, held_generation)
                                  or self._ours(record))
                    if generation is None:
                        continue
                    self.taken_over = holder or {}
            self.generation, self._last_renewal = generation, clock()
            return
        raise LeaseHeld(f'workdir {self.workdir}: its lease kept changing while this run tried to take it; '
                        f'another run is starting there: stop one of them')

    def heartbeat(self, record):
        """Renews; returns why the lease is lost, or None."""
        now = record['heartbeat']
        try:
            generation = self.store.replace_if_generation(json.dumps(record), self.generation)
            if generation is None:
                generation = self._ours(record)
        except Exception as e:  # noqa: BLE001 - a bucket hiccup: retried at the next heartbeat...
            if now - self._last_renewal > self.stale_after_s:   # ...until another run may take over
                return f'could not renew it for {int(now - self._last_renewal)} s ({type(e).__name__}: {e})'
            return None
        if generation is None:
            current = self.store.read()
            holder = _parse(current[0]) if current else None
            return f'it was taken over by {describe(holder, now)}' if current else 'its lease object was deleted'
        self.generation, self._last_renewal = generation, now
        return None

    def check(self):
        """Why the lease is lost, read from the bucket now (a heartbeat can be HEARTBEAT_S old)."""
        current = self.store.read()
        if current is None:
            return 'its lease object was deleted'
        if current[1] != self.generation:
            return f'it was taken over by {describe(_parse(current[0]), self.clock())}'
        return None

    def release(self):
        generation, self.generation = self.generation, None
        if generation is None or fs.known_unreachable(self.workdir):
            return   # the run already stops in one line on that bucket: the lease is left to go stale
        try:
            self.store.delete_if_generation(generation)
        except Exception as e:  # noqa: BLE001 - an unreachable bucket leaves the lease to go stale
            if not bucket.unreachable(e):
                raise
            print(f'warning: could not release the lease {fs.join(self.workdir, RECORD)} '
                  f'({type(e).__name__}); a run on this machine takes it over at once, one elsewhere after '
                  f'{int(self.stale_after_s)} s with {TAKEOVER_FLAG}', file=sys.stderr, flush=True)


# ---- the lease a run holds ----------------------------------------------------------------
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
        backend = _RemoteLease(workdir, store or GcsStore(fs.join(workdir, RECORD)), stale_after_s, clock)
    else:
        backend = _LocalLease(workdir, clock)
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
