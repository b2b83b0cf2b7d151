"""Paths that may be local or on a bucket (gs://, through fsspec + gcsfs).

Files are written whole and atomically (write_text, write_bytes): a reader sees the old
file or the new one, never a part.
"""

import os
import tempfile

from trm_spmd.errors import UserError


_UMASK = os.umask(0)
os.umask(_UMASK)


def is_remote(path):
    return '://' in str(path)


def absolute(path):
    """Local paths made absolute (orbax/tensorstore refuse relative ones); URLs unchanged."""
    return path if is_remote(path) else os.path.abspath(path)


def join(*parts):
    return '/'.join([str(parts[0]).rstrip('/')] + [str(p).strip('/') for p in parts[1:]])


def _fs(path):
    try:
        import fsspec
        return fsspec.core.url_to_fs(path)[0]
    except ImportError:
        raise UserError(f'{path}: bucket paths need fsspec and gcsfs: pip install -e ".[gcs]"') from None


def exists(path):
    return _fs(path).exists(path) if is_remote(path) else os.path.exists(path)


def makedirs(path):
    if is_remote(path):
        _fs(path).makedirs(path, exist_ok=True)
    else:
        os.makedirs(path, exist_ok=True)


def read_text(path):
    if is_remote(path):
        with _fs(path).open(path, 'r') as f:
            return f.read()
    with open(path) as f:
        return f.read()


def write_text(path, text):
    """Replaces the file at `path` with `text`, never leaving a partly written file."""
    write_bytes(path, text.encode())


def write_bytes(path, data):
    """Replaces the file at `path` with `data`: a local temp file synced and renamed into
    place, or one object upload (objects on a bucket appear whole or not at all)."""
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
