"""Running the launcher's commands, or with --dry_run printing them: one per line, shell-quoted,
exactly what a real run executes; and the one-line error every failure becomes."""

import dataclasses
import re
import shlex
import subprocess
import sys


class LaunchError(Exception):
    """A failure the user can act on; the message is one line: the cause and what to do."""


def info(message):
    # Progress goes to stderr so that --dry_run's stdout holds only commands.
    print(message, file=sys.stderr, flush=True)


def display(argv):
    """Shell-quoted command line, with --flag=VALUE written as --flag='VALUE' (same meaning)."""
    words = []
    for word in argv:
        flag, eq, value = word.partition('=')
        if word.startswith('--') and eq and re.fullmatch(r'--[\w-]+', flag):
            words.append(flag + '=' + shlex.quote(value))
        else:
            words.append(shlex.quote(word))
    return ' '.join(words)


def short(argv, width=160):
    """A failing command for an error line: the --command payload cut to stay readable."""
    return display([w if len(w) <= width else w[:width] + '...' for w in argv])


@dataclasses.dataclass
class Result:
    returncode: int
    stdout: str = ''


class Shell:
    """Runs commands, or with dry_run only prints them (shell-quoted, one per line)."""

    def __init__(self, dry_run):
        self.dry_run = dry_run

    def note(self, text):
        # In a dry run, what a step does besides running a command (a local file it writes).
        if self.dry_run:
            for line in text.splitlines():
                print(f'# {line}')

    def report(self, message):
        # Outcomes are printed only when something ran.
        if not self.dry_run:
            info(message)

    def run(self, argv, doing, fix, check=True, capture=False):
        if self.dry_run:
            print(display(argv), flush=True)
            return Result(0)
        try:
            proc = subprocess.run(argv, stdout=subprocess.PIPE if capture else None, text=True)
        except FileNotFoundError:
            raise LaunchError(f'{argv[0]} not found on PATH while {doing}; install the Google Cloud CLI '
                              '(https://cloud.google.com/sdk/docs/install) and run `gcloud auth login`') from None
        if check and proc.returncode != 0:
            raise LaunchError(f'{doing} failed (exit {proc.returncode}): {short(argv)}; {fix}')
        return Result(proc.returncode, proc.stdout or '')
