"""What `run` and `sweep` pass on to the trainer, checked here before any worker sees it: the
config path (relative to the repository root, which the workers run from) and the trainer's
own --config.KEY=VALUE overrides, whose keys are checked against the config schema when the
project's packages import here."""

import difflib
import os
import sys

from . import REPO
from .shell import LaunchError

OVERRIDE_PREFIXES = ('--config.', '--noconfig.')


def config_overrides(words):
    """The trainer's own override flags among the words argparse left over, in their order:
    ['--config.optim.lr=3e-4', '--config.seed', '7', '--noconfig.ema.enabled'] ->
    ['--config.optim.lr=3e-4', '--config.seed=7', '--noconfig.ema.enabled']."""
    flags, rest = [], list(words)
    while rest:
        word = rest.pop(0)
        if not word.startswith(OVERRIDE_PREFIXES):
            raise LaunchError(f'unrecognized argument {word!r}; config overrides are written as the trainer '
                              'takes them: --config.KEY=VALUE (e.g. --config.optim.lr=3e-4)')
        # `--config.KEY VALUE`, which absl also takes: run and sweep have no positional arguments,
        # so a plain word after an override can only be its value.
        if word.startswith('--config.') and '=' not in word and rest and not rest[0].startswith('--'):
            word += '=' + rest.pop(0)
        flags.append(word)
    check_override_keys(flags)
    return flags


def override_key(flag):
    """'--config.optim.lr=3e-4' -> 'optim.lr'; '--noconfig.ema.enabled' -> 'ema.enabled'."""
    return flag.partition('=')[0].partition('config.')[2]


def import_project():
    """Lets this checkout's trm_spmd be imported, whatever the working directory."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)


def schema_keys():
    """Every dotted key of the trainer's config schema, or None when the project's packages
    (ml_collections) are not importable here: the trainers check the keys then."""
    import_project()
    try:
        from trm_spmd.config import default_config
    except ImportError:
        return None
    keys = []

    def visit(node, prefix):
        for name, value in node.items():
            keys.append(prefix + name)
            if hasattr(value, 'items'):
                visit(value, f'{prefix}{name}.')

    visit(default_config(), '')
    return keys


def check_override_keys(flags):
    """A misspelt key fails here, on one line, rather than at start on every worker."""
    known = schema_keys() if flags else None
    if known is None:
        return
    for flag in flags:
        key = override_key(flag)
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            fix = f'did you mean --config.{close[0]}?' if close else 'trm_spmd/config/schema.py lists the keys'
            raise LaunchError(f'{flag}: the config has no key {key!r}; {fix}')


def check_config_path(spec):
    path = spec.partition(':')[0]
    if os.path.isabs(path):
        raise LaunchError(f'config path {path} is absolute; give it relative to the repository root, '
                          'which the workers run from (~/trm_spmd)')
    if not os.path.isfile(path):
        raise LaunchError(f'config file not found: {path}; run launch/tpu.py from the repository root '
                          '(config paths are relative to it, here and on the workers)')
