"""Who holds a workdir's lease: the record a holder writes (host, pid, start, last heartbeat,
config hash, and what tells whether its process still exists), whether it is stale, and the
one line a second run is refused with."""

import datetime
import json
import os
import socket
import time
import uuid

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


def parse_record(data):
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
