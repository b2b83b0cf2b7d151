"""Errors for people: one line with the cause and the fix, a non-zero exit, no traceback.

Every problem a user can fix (a bad flag, config, file or dataset) raises a subclass of
UserError; `run_main` prints it as `error: ...` and exits with status 2. Any other
exception is a bug and keeps its traceback.
"""

import sys


class UserError(Exception):
    """A problem the user can fix; the message is one line naming the cause and the fix."""


def run_main(main, before_flags=None):
    """absl's app.run(main), with user errors reported as one line and exit code 2.

    before_flags(argv), when given, runs before absl parses the flags: a check there (e.g. of
    the --config file and its overrides) reports its own UserError rather than absl's.
    """
    from absl import app
    try:
        if before_flags is not None:
            before_flags(sys.argv[1:])
        app.run(main)
    except UserError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
