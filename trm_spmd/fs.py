"""Paths that may be local or on a bucket (gs://, through fsspec + gcsfs).

Files are written whole and atomically (write_text, write_bytes): a reader sees the old
file or the new one, never a part.

A write the filesystem refuses for a reason the user can fix (full disk, read-only or
foreign directory, a file where a directory should be) raises StorageError: one line
naming the path, the cause and the fix, instead of an OSError traceback. So does a bucket
that cannot be reached once the client's own retries are spent (the network, an outage):
from then on this process's every request to that bucket fails at once with the same line,
so that a run that stops does not spend its clients' retries again on each file it closes.
"""

import contextlib
import errno
import glob as globlib
import os
import tempfile

from trm_spmd import bucket
from trm_spmd.errors import UserError

_UMASK = os.umask(0)
os.umask(_UMASK)

# errno -> what to do. Everything else an OSError can be is a bug or a hardware fault: left as is.
_FIXES = {
    errno.ENOSPC: 'free space there (or use a --workdir on a larger disk) and rerun the same command: '
                  'it resumes from the newest complete checkpoint',
    errno.EDQUOT: 'raise the quota or free space, then rerun the same command: it resumes from the newest '
                  'complete checkpoint',
    errno.EROFS: 'pick a --workdir on a writable filesystem',
    errno.EACCES: 'pick a --workdir you can write, or fix its permissions',
    errno.EPERM: 'pick a --workdir you can write, or fix its permissions',
    errno.ENOTDIR: 'a file stands where a directory is needed: pick another --workdir',
    errno.EEXIST: 'a file stands where a directory is needed: pick another --workdir',
    errno.ENAMETOOLONG: 'pick a shorter --workdir',
}
# How tensorstore (orbax's storage layer) reports the same causes: an os error code in its message.
_TENSORSTORE_ERRNO = {f"[os_error_code='{code}']": code for code in _FIXES}


class StorageError(UserError):
    """The filesystem refused a write (or read) for a reason the user can fix."""


_unreachable = {}   # bucket -> the StorageError of its first request that could not reach it


def known_unreachable(path):
    """The StorageError of `path`'s bucket when this process already found it unreachable, else None."""
    return _unreachable.get(bucket.name(path)) if is_remote(path) else None


def storage_errno(error):
    """The errno behind `error` when it is one the user can fix (see _FIXES), else None."""
    if isinstance(error, OSError) and error.errno in _FIXES:
        return error.errno
    text = str(error)
    for marker, code in _TENSORSTORE_ERRNO.items():
        if marker in text:
            return code
    return None


def storage_error(path, action, error):
    """StorageError for `error` while `action`-ing `path`, or None when it is not a fixable cause."""
    if isinstance(error, UserError):   # already a line for the user
        return None
    if is_remote(path) and bucket.unreachable(error):
        return _unreachable.setdefault(bucket.name(path), StorageError(
            f'cannot reach the bucket {bucket.name(path)} to {action} {path} ({bucket.first_line(error)}); check '
            f'the network and the bucket, then rerun the same command: it resumes from the newest complete checkpoint'))
    code = storage_errno(error)
    if code is None:
        return None
    return StorageError(f'cannot {action} {path}: {os.strerror(code)}; {_FIXES[code]}')


@contextlib.contextmanager
def user_facing(path, action):
    """Re-raises a fixable error inside the block (an OSError; on a bucket, also any failure to
    reach it) as a one-line StorageError. On a bucket already found unreachable the block does
    not run: its StorageError is raised at once."""
    known = known_unreachable(path)
    if known is not None:
        raise known
    try:
        yield
    except Exception as e:  # noqa: BLE001 - classified below, re-raised when not the user's to fix
        converted = storage_error(path, action, e)
        if converted is None:
            raise
        raise converted from None


def is_remote(path):
    return '://' in str(path)


def absolute(path):
    """Local paths made absolute (orbax/tensorstore refuse relative ones); URLs unchanged."""
    return path if is_remote(path) else os.path.abspath(path)


def writes_workdir(workdir, is_main_host, shared_filesystem=False):
    """Whether this host writes `workdir`: host 0 of a bucket or of a filesystem the hosts share,
    every host of host-local disks (each keeps its own identical copy)."""
    return is_main_host or not (is_remote(workdir) or shared_filesystem)


def join(*parts):
    return '/'.join([str(parts[0]).rstrip('/')] + [str(p).strip('/') for p in parts[1:]])


def _fs(path):
    try:
        import fsspec
        return fsspec.core.url_to_fs(path)[0]
    except ImportError:   # fsspec itself, or its implementation of the protocol (gcsfs for gs://)
        raise UserError(f'{path}: bucket paths need gcsfs, in the gs:// extra: PY=$(bash launch/setup.sh --gcs) '
                        f'and run with that $PY') from None


def exists(path):
    if not is_remote(path):
        return os.path.exists(path)
    with user_facing(path, 'read'):
        return _fs(path).exists(path)


def makedirs(path):
    with user_facing(path, 'create'):
        if is_remote(path):
            _fs(path).makedirs(path, exist_ok=True)
        else:
            os.makedirs(path, exist_ok=True)


def read_text(path):
    if is_remote(path):
        return read_bytes(path).decode()
    with open(path) as f:
        return f.read()


def move(source, destination):
    """Moves a directory to a new name. On a bucket this is a copy of every object and then
    a delete: an interruption leaves both copies, never neither."""
    with user_facing(destination, 'move a directory to'):
        if is_remote(source):
            # Spelled out: gcsfs's mv first tries Cloud Storage's object-move call and, where it is
            # refused (fake-gcs-server has none), logs a warning per object before this same copy
            # and delete.
            filesystem = _fs(source)
            filesystem.copy(source, destination, recursive=True)
            filesystem.rm(source, recursive=True)
            return
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        os.rename(source, destination)


def write_text(path, text):
    """Replaces the file at `path` with `text`, never leaving a partly written file."""
    write_bytes(path, text.encode())


def write_bytes(path, data):
    """Replaces the file at `path` with `data`: a local temp file synced and renamed into
    place, or one object upload (objects on a bucket appear whole or not at all)."""
    with user_facing(path, 'write'):
        _write_bytes(path, data)


def _write_bytes(path, data):
    if is_remote(path):
        with _fs(path).open(path, 'wb') as f:
            f.write(data)
        return
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.' + os.path.basename(path) + '.')
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)   # mkstemp makes it private; a run's files are not
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---- reading and listing trees, for tools that read many runs (trm_spmd.analysis) --------
# Local paths go through os and glob as before; bucket paths through fsspec. fsspec names
# the paths it returns without their protocol, so it is put back: what these functions
# return can be passed to them again.


def read_bytes(path):
    if is_remote(path):
        with user_facing(path, 'read'):
            return _fs(path).cat_file(path)   # one request: no read-ahead left running after it
    with open(path, 'rb') as f:
        return f.read()


def isdir(path):
    if not is_remote(path):
        return os.path.isdir(path)
    with user_facing(path, 'read'):
        return _fs(path).isdir(path)


def isfile(path):
    if not is_remote(path):
        return os.path.isfile(path)
    with user_facing(path, 'read'):
        return _fs(path).isfile(path)


def getmtime(path):
    """Unix time of the file's last change; OSError (FileNotFoundError) when it is missing."""
    if is_remote(path):
        with user_facing(path, 'read'):
            return _fs(path).modified(path).timestamp()
    return os.path.getmtime(path)


def glob(pattern):
    """The paths matching `pattern`, sorted; `**` matches any number of directories."""
    if is_remote(pattern):
        with user_facing(pattern, 'list'):
            filesystem = _fs(pattern)
            return sorted(filesystem.unstrip_protocol(p) for p in filesystem.glob(pattern))
    return sorted(globlib.glob(pattern, recursive=True))


def walk(top):
    """os.walk(top), top-down, for local or bucket paths: (directory, subdirectory names,
    file names). Removing names from the subdirectory list in place prunes the walk."""
    if not is_remote(top):
        yield from os.walk(top)
        return
    with user_facing(top, 'list'):
        filesystem = _fs(top)
        for directory, subdirectories, files in filesystem.walk(top, topdown=True):
            yield filesystem.unstrip_protocol(directory), subdirectories, files

