"""Keeping orbax's failure noise off the screen without hiding a failure.

When a checkpoint read or write fails (a damaged file, a full disk), the failure reaches
the caller as one exception, which the checkpointer turns into one line. Two kinds of
noise come with it, both redundant with that exception:

1. tensorstore operations still in flight when orbax gives up complete into the asyncio
   event loop orbax has already closed. Each reports `RuntimeError: Event loop is closed`
   as an "unraisable" exception: dozens of tracebacks per failure. Their operation has
   already failed as a whole. `drop_closed_loop_callbacks()` installs (once per process) a
   sys.unraisablehook that drops exactly these and passes everything else on.
2. orbax logs a failed background save at ERROR, with tracebacks, from its threads, before
   the failure reaches the caller at the next save or wait. `OrbaxErrorLog` holds such
   records back while a checkpointer is open; `release()` prints them when no exception
   reported their failure (so nothing is ever swallowed), `discard()` drops them when one did.

And two notices: opening a checkpoint directory read-only (a CheckpointReader: solve
reading a run) makes orbax warn "Given directory is read only", which reads like a fault and is
not; `hide_read_only_notice()` drops that warning alone. And listing the steps warns
"Metadata file does not exist" (from several threads) for a step without its
_CHECKPOINT_METADATA (on a bucket, "Failed to read Metadata file" when it vanished between
orbax's check and its read): such a step is damaged, and the checkpointer's check reports it in
one line before any of it is used; `hide_missing_metadata_notice()` drops that warning, and
asyncio's "Task exception was never retrieved" for the damaged step's other reads, which
fail after the first one already reported the damage.
"""

import logging
import os
import sys
import threading
import traceback

_installed = False
_missing_metadata_hidden = False
_read_only_hidden = False
_lock = threading.Lock()


def _is_closed_loop_callback(unraisable):
    if unraisable.exc_type is not RuntimeError or str(unraisable.exc_value) != 'Event loop is closed':
        return False
    frames = traceback.extract_tb(unraisable.exc_traceback)
    # Raised by asyncio itself, called straight from native code: no Python caller above it.
    return (len(frames) == 2 and frames[0].name == 'call_soon_threadsafe' and frames[1].name == '_check_closed'
            and all(os.path.basename(f.filename) == 'base_events.py' for f in frames))


def drop_closed_loop_callbacks():
    global _installed
    with _lock:
        if _installed:
            return
        previous = sys.unraisablehook

        def hook(unraisable):
            if not _is_closed_loop_callback(unraisable):
                previous(unraisable)

        sys.unraisablehook = hook
        _installed = True


class OrbaxErrorLog(logging.Filter):
    """Holds back ERROR records that orbax logs (on absl's logger) while installed."""

    def __init__(self):
        super().__init__()
        self._held = []
        self._logger = logging.getLogger('absl')
        self._logger.addFilter(self)

    def filter(self, record):
        if record.levelno >= logging.ERROR and f'{os.sep}orbax{os.sep}' in record.pathname:
            self._held.append(record)
            return False
        return True

    def discard(self):
        """Forget the held records: an exception has reported their failure."""
        self._held = []

    def release(self):
        """Uninstall, printing what was held back and never reported."""
        self._logger.removeFilter(self)
        held, self._held = self._held, []
        for record in held:
            self._logger.handle(record)


def _is_read_only_notice(record):
    return (f'{os.sep}orbax{os.sep}' in record.pathname
            and str(record.msg).startswith('Given directory is read only'))


def hide_read_only_notice():
    """Drops orbax's 'Given directory is read only' warning (restoring needs no writes);
    installed once per process."""
    global _read_only_hidden
    with _lock:
        if not _read_only_hidden:
            logging.getLogger('absl').addFilter(lambda record: not _is_read_only_notice(record))
            _read_only_hidden = True


def _is_missing_metadata_notice(record):
    """orbax's 'Metadata file does not exist', or on a bucket 'Failed to read Metadata file' for a
    file gone between orbax's check and its read (a step being moved aside is copied, then
    deleted, while orbax lists the steps)."""
    args = record.args if isinstance(record.args, tuple) else ()
    message = str(record.msg)
    return (f'{os.sep}orbax{os.sep}' in record.pathname
            and str(args[0] if args else '').endswith('_CHECKPOINT_METADATA')
            and (message.startswith('Metadata file does not exist')
                 or (message.startswith('Failed to read Metadata file') and len(args) > 1
                     and isinstance(args[1], FileNotFoundError))))


def _is_unretrieved_storage_error(record):
    """asyncio's 'Task/Future exception was never retrieved' for a tensorstore read or write
    (a ValueError 'STATUS_CODE: ...'): when orbax gives up on a checkpoint at its first failed
    read, the other reads in flight fail too and nobody awaits them; the first failure has
    reached the caller already."""
    exc = record.exc_info[1] if record.exc_info else None
    text = str(exc) if exc is not None else ''
    status = text.split(':', 1)[0]
    return ('exception was never retrieved' in str(record.msg) and isinstance(exc, ValueError)
            and status.isupper() and status.replace('_', '').isalpha())


def hide_missing_metadata_notice():
    """Drops the missing-metadata warning and the unretrieved storage errors of a damaged
    checkpoint's other reads (installed once per process)."""
    global _missing_metadata_hidden
    with _lock:
        if not _missing_metadata_hidden:
            logging.getLogger('absl').addFilter(lambda record: not _is_missing_metadata_notice(record))
            logging.getLogger('asyncio').addFilter(lambda record: not _is_unretrieved_storage_error(record))
            _missing_metadata_hidden = True
