"""Errors for people: one line with the cause and the fix, a non-zero exit, no traceback."""

import re
import sys


class UserError(Exception):
    """A problem the user can fix (bad flag, missing file, ...); the message says how."""


def user_error_types():
    # Imported here so that `errors` stays importable before the packages that define them.
    from trm_spmd.config import ConfigArgError, ConfigError, ConfigFileError
    from trm_spmd.data.dataset import DatasetError
    from trm_spmd.data.sudoku import DataError
    from trm_spmd.model.official import CheckpointMismatchError
    from trm_spmd.runtime import BackendError
    return (UserError, ConfigError, ConfigArgError, ConfigFileError, DatasetError, DataError,
            CheckpointMismatchError, BackendError)


def run_main(app_run, main):
    """absl's app.run(main), with user errors reported as one line and exit code 2."""
    try:
        app_run(main)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - classify, then re-raise what is not ours
        message = one_line(e)
        if message is None:
            raise
        print(f'error: {message}', file=sys.stderr)
        sys.exit(2)


def one_line(error):
    """The user-facing line for `error`, or None when it is a bug (keep the traceback)."""
    if isinstance(error, user_error_types()):
        return str(error)
    match = re.search(r'Did you mean "([^"]+)" instead of "([^"]+)"', str(error))
    if isinstance(error, AttributeError) and match:
        # ml_collections' locked-config refusal, e.g. --config.model.hiden_size=3.
        return f'unknown config key "{match.group(2)}": did you mean "{match.group(1)}"?'
    return None
