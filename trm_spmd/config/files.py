"""Loading config files by path, the way `--config=FILE.py:ARG` does, and expanding sweeps.

A config file defines `get_config(arg=None)` and `sweep()`. `sweep()` returns a list of
entries: an ARG for the same file ('t3_n6') or a full spec ('configs/ablations.py:ema_off').
A file may define more named sweeps as functions; `FILE.py:NAME` expands that one.
"""

import importlib.util
import os

from trm_spmd.errors import UserError


class ConfigFileError(UserError):
    """A config file, sweep or override key that does not exist."""


def load_module(path):
    if not os.path.isfile(path):
        raise ConfigFileError(f'config file not found: {path} (paths are relative to the current directory)')
    name = 'trm_config_' + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def split_spec(spec):
    path, _, arg = spec.partition(':')
    return path, arg


def load_config(spec):
    """'configs/tn_sweep.py:t3_n6' -> the ConfigDict that --config would give (before overrides)."""
    path, arg = split_spec(spec)
    module = load_module(path)
    return module.get_config(arg) if arg else module.get_config()


def expand_sweep(spec):
    """'configs/tn_sweep.py' or 'configs/sweeps.py:all_ablations' -> ['FILE.py:ARG', ...]."""
    path, name = split_spec(spec)
    module = load_module(path)
    fn_name = name or 'sweep'
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ConfigFileError(f'{path} defines no sweep {fn_name!r}')
    runs = []
    for entry in fn():
        runs.append(entry if ':' in entry or entry.endswith('.py') else f'{path}:{entry}')
    return runs
