"""Errors of data building and loading, and the collector of bad input rows.

Every problem with a row is reported as `FILE:LINE: reason`, so a person can open the
file at that line.
"""

from trm_spmd.errors import UserError


class DataError(UserError):
    """Bad data or arguments; the message is one line with the cause and the fix."""


class PuzzleError(DataError):
    """A malformed row, reported as FILE:LINE: reason."""


class Problems:
    """Collects bad rows: raises at the first one (on_error='fail') or counts them ('skip')."""

    def __init__(self, on_error):
        if on_error not in ('fail', 'skip'):
            raise DataError(f"on_error={on_error!r} must be 'fail' or 'skip'")
        self.on_error = on_error
        self.messages = []

    def report(self, message):
        if self.on_error == 'fail':
            raise PuzzleError(message)
        self.messages.append(message)

