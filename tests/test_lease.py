"""One run per workdir: the local OS lock, the gs:// lease object (against an in-memory store with
the same generation preconditions), takeover of stale leases only, and pod agreement."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from trm_spmd import hosts, lease
from trm_spmd.errors import UserError

from conftest import REPO, run_as_hosts


class FakeStore:
    """One object with GCS's generation semantics: every write names the generation it expects
    (0: absent) and fails when the object is elsewhere. lose_next_reply applies the next write
    but reports it refused, as a retried request whose first reply was lost sees it."""

    def __init__(self):
        self.data, self.generation = None, 0
        self.lose_next_reply = False
        self.unreachable = False
        self._lock = threading.Lock()

    def _guard(self):
        if self.unreachable:
            raise ConnectionError('bucket unreachable')

    def _put(self, data):
        self.generation += 1
        self.data = data
        if self.lose_next_reply:
            self.lose_next_reply = False
            return None
        return self.generation

    def create_if_absent(self, data):
        with self._lock:
            self._guard()
            return None if self.data is not None else self._put(data)

    def replace_if_generation(self, data, generation):
        with self._lock:
            self._guard()
            return self._put(data) if self.data is not None and self.generation == generation else None

    def read(self):
        with self._lock:
            self._guard()
            return None if self.data is None else (self.data, self.generation)

    def delete_if_generation(self, generation):
        with self._lock:
            self._guard()
            if self.data is None or self.generation != generation:
                return False
            self.data = None
            return True

    def holder(self):
        return json.loads(self.data) if self.data else None


class Clock:
    def __init__(self, now=1_800_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


GS = 'gs://bucket/study/run'


# ---- local ---------------------------------------------------------------------------------
def test_a_second_run_in_a_local_workdir_is_refused_naming_the_holder(tmp_path):
    first = lease.acquire(str(tmp_path), config_hash='abc')
    with pytest.raises(lease.LeaseHeld) as caught:
        lease.acquire(str(tmp_path))
    message = str(caught.value)
    assert '\n' not in message
    assert message.startswith(f'workdir {tmp_path} is in use by another run (host ')
    assert f'pid {os.getpid()}, started 20' in message and 'last heartbeat 0 s ago' in message
    assert 'launch/tpu.py stop' in message and 'another --workdir' in message
    assert json.loads((tmp_path / 'lease.json').read_text())['config_hash'] == 'abc'
    first.release()
    assert not (tmp_path / 'lease.json').exists() and (tmp_path / '.lease.lock').exists()
    with lease.acquire(str(tmp_path)):
        pass
    lease.acquire(str(tmp_path)).release()


def test_a_local_lease_is_released_on_an_exception(tmp_path):
    with pytest.raises(RuntimeError):
        with lease.acquire(str(tmp_path)):
            raise RuntimeError('boom')
    lease.acquire(str(tmp_path)).release()


def test_a_sigkilled_holder_never_leaves_a_stale_local_lock(tmp_path):
    code = ('import sys, time; from trm_spmd import lease; '
            'l = lease.acquire(sys.argv[1]).start_heartbeat(); print("held", flush=True); time.sleep(60)')
    holder = subprocess.Popen([sys.executable, '-c', code, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ, PYTHONPATH=REPO))
    try:
        assert holder.stdout.readline().strip() == 'held'
        with pytest.raises(lease.LeaseHeld, match=f'pid {holder.pid}, '):
            lease.acquire(str(tmp_path))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # Its record is left behind; the lock is not: the next run starts (and rewrites the record).
    assert json.loads((tmp_path / 'lease.json').read_text())['pid'] == holder.pid
    with lease.acquire(str(tmp_path)):
        assert json.loads((tmp_path / 'lease.json').read_text())['pid'] == os.getpid()


def test_the_local_heartbeat_updates_the_record(tmp_path):
    clock = Clock()
    held = lease.acquire(str(tmp_path), clock=clock)
    clock.now += 45
    held.beat()
    assert json.loads((tmp_path / 'lease.json').read_text())['heartbeat'] == clock.now
    held.check()
    held.release()


# ---- gs:// ---------------------------------------------------------------------------------
def _acquire(store, clock, **kw):
    return lease.acquire(GS, store=store, clock=clock, **kw)


def test_a_gs_lease_is_created_only_if_absent_and_a_fresh_one_is_never_taken_over():
    store, clock = FakeStore(), Clock()
    first = _acquire(store, clock, config_hash='abc')
    assert store.holder()['config_hash'] == 'abc' and store.holder()['pid'] == os.getpid()
    clock.now += lease.STALE_AFTER_S - 1
    for takeover in (False, True):
        with pytest.raises(lease.LeaseHeld) as caught:
            _acquire(store, clock, takeover_stale=takeover)
        assert f'last heartbeat {int(lease.STALE_AFTER_S) - 1} s ago' in str(caught.value)
        assert 'is in use by another run' in str(caught.value)
    first.release()
    assert store.data is None
    _acquire(store, clock).release()


def test_a_stale_gs_lease_is_taken_over_only_when_asked_and_the_old_holder_stops():
    store, clock = FakeStore(), Clock()
    old = _acquire(store, clock)
    old_record = dict(old.record, boot_id='another machine')
    store.data = json.dumps(old_record)   # as if held from elsewhere: not provably dead
    store.generation += 1
    old._backend.generation = store.generation
    clock.now += lease.STALE_AFTER_S + 60
    with pytest.raises(lease.LeaseHeld) as caught:
        _acquire(store, clock)
    message = str(caught.value)
    assert 'stale' in message and lease.TAKEOVER_FLAG in message and 'last heartbeat 3 min ago' in message
    new = _acquire(store, clock, takeover_stale=True)
    assert new.taken_over['token'] == old_record['token']
    assert store.holder()['token'] == new.record['token']
    # The old holder (paused, not dead) wakes up: its renewal is refused, it knows it lost.
    with pytest.raises(lease.LeaseLost, match=r'lost its lease on gs://bucket/study/run: it was taken over by host'):
        old.check()
    old.beat()
    with pytest.raises(lease.LeaseLost):
        old.check()
    old.release()   # must not delete the new holder's lease
    assert store.holder()['token'] == new.record['token']
    new.check()
    new.release()
    assert store.data is None


def test_a_dead_holder_on_this_machine_is_replaced_without_waiting():
    store, clock = FakeStore(), Clock()
    dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'], capture_output=True, text=True)
    record = dict(lease.new_record(now=clock()), pid=int(dead.stdout))
    store.create_if_absent(json.dumps(record))
    held = _acquire(store, clock)
    assert held.taken_over['pid'] == int(dead.stdout)
    held.release()


def test_a_lost_reply_to_our_own_write_is_still_our_lease():
    store, clock = FakeStore(), Clock()
    store.lose_next_reply = True
    held = _acquire(store, clock)
    assert held._backend.generation == store.generation
    store.lose_next_reply = True
    clock.now += 30
    held.beat()
    held.check()
    held.release()
    assert store.data is None


def test_renewals_failing_longer_than_the_stale_time_lose_the_lease():
    store, clock = FakeStore(), Clock()
    held = _acquire(store, clock)
    store.unreachable = True
    clock.now += lease.HEARTBEAT_S
    held.beat()          # one failed renewal: retried at the next heartbeat
    assert held._lost is None
    clock.now += lease.STALE_AFTER_S
    held.beat()
    with pytest.raises(lease.LeaseLost, match='could not renew it for 150 s'):
        held.check()


def test_the_heartbeat_thread_renews():
    store = FakeStore()
    held = lease.acquire(GS, store=store, heartbeat_s=0.02)
    first = store.generation
    held.start_heartbeat()
    deadline = time.time() + 10
    while store.generation < first + 2 and time.time() < deadline:
        time.sleep(0.01)
    held.release()
    assert store.generation >= first + 2 and store.data is None


# ---- pods ----------------------------------------------------------------------------------
class _Runtime:
    def __init__(self, index, count, shared=False):
        self.is_main_host = index == 0
        self.process_count = count
        self.shared_filesystem = shared


def _pod(workdirs, store=None, shared=False):
    return run_as_hosts(len(workdirs), lambda i, exchange: lease.acquire_for_run(
        workdirs[i], _Runtime(i, len(workdirs), shared), exchange=exchange, store=store), timeout=30)


def test_first_problem_names_the_host():
    assert hosts.first_problem([None, None]) is None
    assert hosts.first_problem(['full']) == 'full'
    assert hosts.first_problem([None, 'full', 'gone']) == 'host 1: full'


def test_with_host_local_disks_every_host_locks_its_own_and_all_refuse_together(tmp_path):
    disks = [tmp_path / f'host{i}' for i in range(3)]
    for disk in disks:
        disk.mkdir()
    other = lease.acquire(str(disks[2]))
    results = _pod([str(d) for d in disks])
    other.release()
    for r in results:
        assert isinstance(r, lease.LeaseHeld) and str(r).startswith(f'host 2: workdir {disks[2]} is in use'), r
    # Hosts 0 and 1 had their locks and gave them back.
    results = _pod([str(d) for d in disks])
    assert all(isinstance(r, lease.Lease) for r in results)
    for r in results:
        r.release()


def test_on_a_shared_bucket_host_0_holds_the_lease_for_the_pod():
    store = FakeStore()
    results = _pod([GS] * 3, store=store)
    assert isinstance(results[0], lease.Lease) and all(isinstance(r, lease.NoLease) for r in results[1:])
    assert store.holder()['token'] == results[0].record['token']
    again = _pod([GS] * 3, store=store)
    assert all(isinstance(r, lease.LeaseHeld) and str(r).startswith('host 0: workdir gs://') for r in again)
    for r in results:
        r.release()
    assert store.data is None
