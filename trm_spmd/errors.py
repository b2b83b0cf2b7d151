"""Errors for people: one line with the cause and the fix, a non-zero exit, no traceback.

Every problem a user can fix (a bad flag, config, file or dataset) raises a subclass of
UserError; `run_main` prints it as `error: ...` and exits with status 2. A program the user
stopped (Ctrl-C) exits with EXIT_STOPPED after one line saying what was kept (Stopped), or
`stopped by Ctrl-C` when nothing was under way. Any other exception is a bug and keeps its
traceback.
"""

import sys

EXIT_STOPPED = 130   # 128 + SIGINT: what a shell reports for a program that Ctrl-C ended


class UserError(Exception):
    """A problem the user can fix; the message is one line naming the cause and the fix."""


class Stopped(Exception):
    """The user stopped the program (Ctrl-C) and what had to be kept is kept; the message is
    one line saying so and how to go on."""


def run_main(main, before_flags=None):
    """absl's app.run(main), with user errors reported as one line and exit code 2, and a
    program stopped by Ctrl-C as one line and EXIT_STOPPED.

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
    except Stopped as e:
        print(e, file=sys.stderr)
        sys.exit(EXIT_STOPPED)
    except KeyboardInterrupt:
        print('stopped by Ctrl-C', file=sys.stderr)
        sys.exit(EXIT_STOPPED)
