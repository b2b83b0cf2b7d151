"""Checkpoints with orbax-checkpoint: asynchronous, atomic, verified, newest-K plus best-by-accuracy.

Two managers in two directories, because orbax's `best_fn` turns `max_to_keep` into "keep
the K best", which can delete the newest checkpoint and break resume:
  DIR/checkpoints/          the newest `checkpoint.keep` steps (resume reads these)
  DIR/checkpoints_best/     the `checkpoint.keep_best` best by eval exact accuracy
  DIR/checkpoints_damaged/  checkpoints found unreadable, moved here (never deleted)
orbax writes each step into a temporary directory and renames it when complete, so an
interrupted write is never listed as a step.

A complete step can still be damaged later (a half-copied bucket, a disk fault, a file
truncated by hand). Every read checks it before any value is used: orbax's own metadata
is present and parses, orbax reads every array, and the arrays and meta match the SHA-256
record written with them (trm_spmd.checksums). A checkpoint failing any check is reported
in one line and moved to checkpoints_damaged/; resuming goes on with the next newest
(a copy of the same step in checkpoints_best/ first). Checkpoints written before the
record existed are read with orbax's checks only.

Reading is kept apart from writing. A CheckpointReader (solve, an init_from source, any
tool that looks at a run) opens orbax read-only: it creates nothing, never cleans up the
temporary directory of a save in flight (a live run's), deletes and moves nothing; a
damaged checkpoint it meets is reported and skipped. Only the Checkpointer of the run that
owns the workdir (holding its lease) writes, cleans up and moves damaged checkpoints aside.

The state is replicated on every device (data parallelism), so it is saved as plain numpy
arrays. With host-local disks every host writes its own identical copy; with a bucket (or
processes of one machine) only host 0 writes and every host reads. Which step a pod
resumes from is decided together (restore_agreed).
"""

import collections
import contextlib
import json
import os
import time

import numpy as np
import orbax.checkpoint as ocp
import torch

from trm_spmd import checksums, fs
from trm_spmd.errors import UserError
from trm_spmd.orbax_noise import (OrbaxErrorLog, drop_closed_loop_callbacks, hide_missing_metadata_notice,
                                 hide_read_only_notice)

DAMAGED = 'checkpoints_damaged'

# A checkpoint found good: its step, state tree, meta (without the checksum record), directory.
Restored = collections.namedtuple('Restored', 'step tree meta path')
# A damaged checkpoint moved aside: its step, where it was, where it is now, and why.
MovedAside = collections.namedtuple('MovedAside', 'step source destination reason')


class DamagedCheckpoint(UserError):
    """A checkpoint that fails a check; `reason` says which."""

    def __init__(self, path, reason):
        super().__init__(f'checkpoint {path} is unreadable: {reason}')
        self.path, self.reason = path, reason


class NoReadableCheckpoint(UserError):
    pass


def to_numpy_tree(tree):
    """torch tensors -> numpy (bfloat16 widened to float32, exactly); dicts kept."""
    if isinstance(tree, dict):
        return {str(k): to_numpy_tree(v) for k, v in tree.items()}
    if torch.is_tensor(tree):
        t = tree.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    if isinstance(tree, (int, float, bool, np.integer, np.floating)):
        return np.asarray(tree)
    return tree


# tensorstore reports storage errors as ValueError('<STATUS>: ...'). These say that the
# storage could not be reached or refused us, not that the bytes are bad: moving the
# checkpoint aside would be wrong, the run stops instead and the checkpoint stays.
_STORAGE_STATUSES = ('PERMISSION_DENIED', 'UNAUTHENTICATED', 'UNAVAILABLE', 'DEADLINE_EXCEEDED',
                     'RESOURCE_EXHAUSTED', 'CANCELLED', 'ABORTED')
# The same for google-cloud / gcsfs exceptions, by class name (their packages are optional).
_STORAGE_ERRORS = ('Forbidden', 'Unauthorized', 'ServiceUnavailable', 'TooManyRequests', 'GatewayTimeout',
                   'InternalServerError', 'RetryError', 'TransportError', 'RefreshError', 'HttpError')


def is_not_damage(error):
    """True when a failed read says nothing about the checkpoint's bytes: the storage was
    unreachable or refused us, or this machine ran out of memory."""
    if isinstance(error, (PermissionError, ConnectionError, TimeoutError, MemoryError)):
        return True
    if type(error).__name__ in _STORAGE_ERRORS:
        return True
    text = str(error)
    return any(text.startswith(status + ':') for status in _STORAGE_STATUSES)


def _first_line(error):
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def _metadata_problem(path):
    """Why orbax's metadata of the step at `path` is unusable, or None. orbax itself restores
    a step whose _CHECKPOINT_METADATA is gone, but a step missing any file is not the step
    that was committed (a half-copied bucket), so nothing in it is trusted."""
    for name in ('_CHECKPOINT_METADATA', 'state/_METADATA', 'meta/metadata'):
        file = fs.join(path, name)
        if not fs.exists(file):
            return f"orbax's {name} is missing"
        try:
            json.loads(fs.read_text(file))
        except (ValueError, UnicodeDecodeError):   # JSONDecodeError is a ValueError
            return f"orbax's {name} does not parse"
    return None


class CheckpointReader:
    """A run's checkpoints, read and verified without changing a byte of the run.

    orbax's managers are opened read-only: nothing is created, the temporary directory of a
    save in flight (a live run's) is left alone, nothing is deleted or moved. A damaged
    checkpoint met on the way is reported and skipped; the run that owns the workdir sets it
    aside when it next starts. For solve, an init_from source and every other reader."""

    writes = False

    def __init__(self, workdir, directories=None):
        """Reads the run in `workdir` (its checkpoints/, then checkpoints_best/), or only the
        directories of steps in `directories`, in that order of preference."""
        self.workdir = fs.absolute(workdir)
        directories = directories or [fs.join(self.workdir, 'checkpoints'), fs.join(self.workdir, 'checkpoints_best')]
        self._start()
        options = ocp.CheckpointManagerOptions(read_only=True, create=False, save_interval_steps=0)
        try:
            managers = [ocp.CheckpointManager(fs.absolute(d), options=options) for d in directories]
        except BaseException:
            self._orbax_errors.release()
            raise
        self.latest, self.best = managers[0], (managers[1] if len(managers) > 1 else None)

    def _start(self):
        self.moved_aside = []          # MovedAside of every damaged checkpoint this checkpointer moved
        drop_closed_loop_callbacks()
        hide_missing_metadata_notice()   # _metadata_problem reports that damage in one line
        hide_read_only_notice()
        self._orbax_errors = OrbaxErrorLog()

    def latest_step(self):
        self.latest.reload()
        return self.latest.latest_step()

    def all_steps(self):
        """Every complete step of every directory read, ascending."""
        return sorted({step for _, step_list in self._listing() for step in step_list})

    def _listing(self):
        listing = []
        for manager in self._managers():
            manager.reload()
            listing.append((manager, manager.all_steps()))
        return listing

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(reported=exc_type is not None)

    def close(self, reported=False):
        del reported   # a reader has no save in flight to report
        for manager in self._managers():
            manager.close()
        self._orbax_errors.release()

    def _managers(self):
        return [m for m in (self.latest, self.best) if m is not None]

    def _read(self, manager, step):
        """(tree, meta) of `step` in `manager`, every check passed; else DamagedCheckpoint, or a
        UserError when the storage itself could not be read (the checkpoint is then left alone)."""
        path = fs.join(str(manager.directory), str(step))
        try:
            problem = _metadata_problem(path)
            if problem:
                raise DamagedCheckpoint(path, problem)
            restored = manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()))
        except DamagedCheckpoint:
            raise
        except Exception as e:  # noqa: BLE001 - any failure to read the bytes back is damage...
            if is_not_damage(e):   # ...except the storage's or the machine's own failure
                raise UserError(f'cannot read checkpoint {path}: {_first_line(e)}; it was left in place: '
                                f'fix the cause and rerun') from None
            raise DamagedCheckpoint(path, _first_line(e)) from None
        tree, (meta, record) = restored['state'], checksums.detach(restored['meta'])
        if record is not None:
            problem = checksums.mismatch(tree, meta, record)
            if problem:
                raise DamagedCheckpoint(path, problem)
        return tree, meta

    def restore(self, step=None):
        """(state, meta) of `step` (default the newest) of the first directory (checkpoints/),
        verified; DamagedCheckpoint (one line) when it fails a check. Nothing is moved."""
        self.latest.reload()
        step = self.latest.latest_step() if step is None else step
        if step is None or step not in self.latest.all_steps():
            raise FileNotFoundError(f'no checkpoint in {self.latest.directory}' if step is None
                                    else f'no checkpoint of step {step} in {self.latest.directory}')
        return self._read(self.latest, step)

    def restore_step(self, step):
        """Restored for `step` from the first copy of it that passes every check (newest-K, then
        best). Nothing is moved: for hosts that read what another host writes."""
        problems = []
        for manager, steps in self._listing():
            if step in steps:
                try:
                    tree, meta = self._read(manager, step)
                    return Restored(step, tree, meta, fs.join(str(manager.directory), str(step)))
                except DamagedCheckpoint as e:
                    problems.append(str(e))
        raise DamagedCheckpoint(fs.join(self.workdir, 'checkpoints', str(step)),
                                '; '.join(problems) or 'no such step (host 0 chose it: is the storage shared?)')

    def _candidates(self, at_most, passed):
        """(step, manager) newest first, less those `passed`; for one step, the newest-K copy
        before the best one."""
        found = []
        for rank, (manager, steps) in enumerate(self._listing()):
            found += [(step, rank, manager) for step in steps
                      if (at_most is None or step <= at_most) and (manager.directory, step) not in passed]
        return [(step, manager) for step, _, manager in sorted(found, key=lambda c: (-c[0], c[1]))]

    def _damaged(self, manager, step, error):
        """What is done with a damaged checkpoint met while looking for a good one: the line
        that reports it. A reader leaves it where it is."""
        del manager, step
        return f'{error}; skipped (left in place: the run that writes it sets it aside when it next starts)'

    def _nothing_readable(self, damaged):
        """The error when no checkpoint is readable and `damaged` steps were met, or None."""
        if not damaged:
            return None
        return NoReadableCheckpoint(f'no readable checkpoint in {self.workdir}: step(s) '
                                    f'{", ".join(map(str, damaged))} are damaged (left as they are)')

    def restore_newest_good(self, at_most=None, report=print):
        """Restored for the newest checkpoint (at most step `at_most`) that passes every check,
        or None when there is none.

        Each damaged one met on the way is reported (one line through `report`): a reader
        skips it, the writing Checkpointer moves it to DIR/checkpoints_damaged/. A step
        that disappears while it is read (the writing run's retention removed it) is passed
        over silently. With `at_most` None, finding nothing readable while damaged
        checkpoints exist raises NoReadableCheckpoint: starting over silently would mix a
        new run into this workdir's record."""
        damaged, passed = [], set()
        while True:
            candidates = self._candidates(at_most, passed)
            if not candidates:
                break
            step, manager = candidates[0]
            passed.add((manager.directory, step))
            try:
                tree, meta = self._read(manager, step)
            except DamagedCheckpoint as e:
                if fs.exists(e.path):
                    report(self._damaged(manager, step, e))
                    damaged.append(step)
                continue
            return Restored(step, tree, meta, fs.join(str(manager.directory), str(step)))
        error = self._nothing_readable(damaged) if at_most is None else None
        if error is not None:
            raise error
        return None


def open_reader(path):
    """(CheckpointReader, step or None) for `path`: a run directory (its checkpoints/, then
    checkpoints_best/), a directory of checkpoint steps, or one step directory in either
    (then that step)."""
    path = fs.absolute(str(path).rstrip('/'))
    if fs.exists(fs.join(path, 'checkpoints')) or fs.exists(fs.join(path, 'checkpoints_best')):
        return CheckpointReader(path), None
    parent, name = path.rsplit('/', 1)
    if name.isdigit():
        return CheckpointReader(parent, directories=[parent]), int(name)
    return CheckpointReader(path, directories=[path]), None


class Checkpointer(CheckpointReader):
    """The checkpoints of the run that owns the workdir: written, cleaned up (orbax's leftovers
    of an interrupted save), and damaged ones moved aside. On a host that does not write the
    workdir (fs.writes_workdir) it only reads, as a CheckpointReader does."""

    def __init__(self, workdir, keep, keep_best, async_save, is_main_host, shared_filesystem=False):
        workdir = fs.absolute(workdir)
        self.workdir = workdir
        self.writes = fs.writes_workdir(workdir, is_main_host, shared_filesystem)
        self._start()
        options = dict(enable_async_checkpointing=async_save, create=self.writes, read_only=not self.writes,
                       cleanup_tmp_directories=self.writes, save_interval_steps=1 if self.writes else 0)
        try:
            self._open_managers(workdir, keep, keep_best, options)
        except BaseException:
            self._orbax_errors.release()
            raise

    def _open_managers(self, workdir, keep, keep_best, options):
        with self._writing():
            self.latest = ocp.CheckpointManager(
                fs.join(workdir, 'checkpoints'),
                options=ocp.CheckpointManagerOptions(max_to_keep=keep, **options))
            self.best = None
            if keep_best > 0:
                self.best = ocp.CheckpointManager(
                    fs.join(workdir, 'checkpoints_best'),
                    options=ocp.CheckpointManagerOptions(
                        max_to_keep=keep_best, best_fn=lambda m: m['eval/exact_accuracy'], best_mode='max',
                        keep_checkpoints_without_metrics=False, **options))

    # ---- writing ----------------------------------------------------------------
    @contextlib.contextmanager
    def _writing(self):
        """A full disk or a refused directory, reported by orbax now or from an earlier
        asynchronous save, becomes one line; the newest complete checkpoint stays as it was."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - classified below, re-raised when not the user's to fix
            error = fs.storage_error(self.workdir, 'write a checkpoint in', e)
            if error is None:
                raise
            self._orbax_errors.discard()
            raise error from None

    def save(self, step, state, meta, eval_metrics=None):
        """Starts writing `state` (a tree of numpy arrays) for `step`; returns at once when async.
        A step already written is not written again, so a rerun may save what it owes (the
        best-K copy of a step whose newest-K copy exists) with the same call."""
        if not self.writes:
            return
        latest = step not in self.latest.all_steps()
        best = self.best is not None and eval_metrics is not None and step not in self.best.all_steps()
        if not (latest or best):
            return
        meta = checksums.attach(state, meta)
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        with self._writing():
            if latest:
                self.latest.save(step, args=args, force=True)
            if best:
                self.best.save(step, args=args, metrics={'eval/exact_accuracy': eval_metrics['eval/exact_accuracy']},
                               force=True)

    def wait(self):
        """Returns once every save in flight is complete on the storage; StorageError when one failed."""
        with self._writing():
            for manager in self._managers():
                manager.wait_until_finished()

    def close(self, reported=False):
        """Waits for the saves in flight and closes both managers, whatever either raises. A save
        that failed raises its one line; with `reported` (an exception already ends the run, often
        that same failure seen earlier) a storage failure adds nothing, any other error still raises."""
        failure = None
        for manager in self._managers():
            try:
                with self._writing():
                    try:
                        manager.wait_until_finished()
                    finally:
                        manager.close()   # its threads and stores, even after a failed save
            except Exception as e:  # noqa: BLE001 - every manager is closed before the first failure is raised
                failure = failure or e
        self._orbax_errors.release()
        if failure is not None and not (reported and isinstance(failure, fs.StorageError)):
            raise failure

    # ---- damaged checkpoints ------------------------------------------------------
    def _damaged(self, manager, step, error):
        if not self.writes:
            return f'{error}; skipped (the host that writes this workdir moves it aside)'
        moved = self._move_aside(manager, step, error.reason)
        return f'{error}; moved to {moved.destination}, trying the next newest'

    def _nothing_readable(self, damaged):
        damaged_dir = fs.join(self.workdir, DAMAGED)
        if not damaged and not (fs.exists(damaged_dir) and not _empty(damaged_dir)):
            return None
        what = f'step(s) {", ".join(map(str, damaged))} are damaged' if damaged else 'none is left'
        return NoReadableCheckpoint(
            f'no readable checkpoint in {self.workdir}: {what}, and damaged ones are kept in {damaged_dir}; '
            f'start a new run with another --workdir, or move that directory away to start this one over')

    def _move_aside(self, manager, step, reason):
        source = fs.join(str(manager.directory), str(step))
        prefix = '' if manager is self.latest else 'best-'
        name = f'{prefix}{step}-{time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())}'
        destination = fs.join(self.workdir, DAMAGED, name)
        n = 1
        while fs.exists(destination):
            n += 1
            destination = fs.join(self.workdir, DAMAGED, f'{name}.{n}')
        fs.move(source, destination)
        fs.write_text(fs.join(destination, 'DAMAGED.json'), json.dumps(
            {'step': step, 'moved_from': source, 'reason': reason, 'time': time.time()}, indent=2))
        manager.reload()
        moved = MovedAside(step, source, destination, reason)
        self.moved_aside.append(moved)
        return moved


def _empty(directory):
    if fs.is_remote(directory):
        return not fs._fs(directory).ls(directory)
    return not os.listdir(directory)


# ---- which step a pod resumes from ---------------------------------------------------------
def resume_decision(proposals):
    """What the hosts do next, from every host's proposal for this round (pure, for tests).

    proposals[i] is host i's: {'step': s} (its newest good checkpoint, at most the current
    bound; None: it has none), {'follow': True} (it reads what another host writes, and
    takes the writers' choice), or {'error': line}. Returns one of
      ('resume', step or None)  every writer proposes the same step: resume from it (None: fresh start)
      ('retry', bound)          writers differ: each looks again for its newest good step <= bound
      ('error', line)           a host failed, or a host has no checkpoint while another has
    """
    for i, p in enumerate(proposals):
        if 'error' in p:
            return 'error', p['error'] if len(proposals) == 1 else f'host {i}: {p["error"]}'
    writers = [(i, p['step']) for i, p in enumerate(proposals) if 'step' in p]
    if not writers:
        return 'error', 'no host writes this workdir, so no host can choose the checkpoint to resume from'
    steps = {s for _, s in writers}
    if len(steps) == 1:
        return 'resume', steps.pop()
    if None in steps:
        empty = next(i for i, s in writers if s is None)
        host, step = max(((i, s) for i, s in writers if s is not None), key=lambda w: w[1])
        return 'error', (f'host {empty} has no readable checkpoint while host {host} has step {step}: the hosts\' '
                         f'disks differ; copy host {host}\'s checkpoints to every host, or start a new --workdir')
    return 'retry', min(steps)


def restore_agreed(checkpointer, exchange, report=print):
    """Restored for the step every host resumes from (None on every host: a fresh start).

    `exchange(x)` gives every host's `x` in host order (hosts.exchanger). Writers (every host
    of host-local disks, host 0 of a shared workdir) each find their newest good checkpoint;
    while they differ, each looks again at or below the lowest; followers restore the agreed
    step from the shared storage. A failure on any host raises the same UserError on all."""
    bound, found = None, None
    while True:
        if checkpointer.writes:
            try:
                if found is None or bound is None or found.step > bound:
                    found = checkpointer.restore_newest_good(at_most=bound, report=report)
                proposal = {'step': None if found is None else found.step}
            except UserError as e:
                proposal = {'error': str(e)}
        else:
            proposal = {'follow': True}
        kind, value = resume_decision(exchange(proposal))
        if kind == 'error':
            raise UserError(value)
        if kind == 'resume':
            break
        bound = value
    problem = None
    if not checkpointer.writes and value is not None:
        try:
            found = checkpointer.restore_step(value)
        except UserError as e:
            problem = str(e)
    kind, line = resume_decision(exchange({'error': problem} if problem else {'step': value}))
    if kind == 'error':
        raise UserError(line)
    return found if value is not None else None
