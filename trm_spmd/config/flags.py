"""The --config flag every command shares: `--config=FILE.py[:ARG]` plus `--config.a.b=VALUE`
overrides (ml_collections config_flags, the config locked so a misspelt key fails).

    python -m trm_spmd.main --config=configs/tn_sweep.py:t3_n6 --config.optim.lr=3e-4 ...
    python benchmarks/step_time.py --config=configs/quickstart.py --config.model.hidden_size=256
"""

import difflib

from absl import flags
from ml_collections import config_flags

from trm_spmd.config.files import ConfigFileError, load_config


def define_config_flag(default=None, help_text='Config file and argument: FILE.py[:ARG].'):
    config_flags.DEFINE_config_file('config', default, help_text, lock_config=True)


def config_source(flag_values=None):
    """What the run was launched with: the file:arg and the --config.* overrides."""
    holder = (flag_values or flags.FLAGS)['config']
    return {'config_file': holder.config_filename, 'overrides': dict(holder.override_values)}


def _leaf_paths(config, prefix=''):
    paths = []
    for key, value in config.items():
        path = f'{prefix}{key}'
        paths.append(path)
        if hasattr(value, 'items'):
            paths.extend(_leaf_paths(value, path + '.'))
    return paths


def _override_key(arg):
    """'--config.model.T=7' / '--noconfig.ema.enabled' -> 'model.T' / 'ema.enabled'; else None."""
    name = arg.lstrip('-').split('=', 1)[0]
    for prefix in ('config.', 'noconfig.'):
        if arg.startswith('-') and name.startswith(prefix):
            return name[len(prefix):]
    return None


def check_config_argv(argv, default=None):
    """Loads --config (or `default`) once before absl does, and checks that every override
    names a field, so a bad file, argument or key is one line rather than a traceback."""
    spec = default
    for i, arg in enumerate(argv):
        if arg.startswith('--config='):
            spec = arg.split('=', 1)[1]
        elif arg == '--config' and i + 1 < len(argv):
            spec = argv[i + 1]
    if spec is None:
        return
    config = load_config(spec)
    known = _leaf_paths(config)
    for arg in argv:
        key = _override_key(arg)
        if key is not None and key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f': did you mean "{close[0]}"?' if close else ' (see trm_spmd/config/schema.py)'
            raise ConfigFileError(f'unknown config key "{key}" in {arg.split("=", 1)[0]}{hint}')
    _check_override_values(argv, default)


def _check_override_values(argv, default):
    """Parses the --config flags alone, as absl will, so a value of the wrong type (or an
    override before --config) is one line rather than absl's fatal flag error."""
    args = []
    for i, arg in enumerate(argv):
        name = arg.lstrip('-').split('=', 1)[0]
        if arg.startswith('-') and (name == 'config' or _override_key(arg) is not None):
            args.append(arg)
            if '=' not in arg and i + 1 < len(argv) and not argv[i + 1].startswith('-'):
                args.append(argv[i + 1])
    parser = flags.FlagValues()
    config_flags.DEFINE_config_file('config', default, flag_values=parser, lock_config=True)
    try:
        parser(['check', *args])
    except flags.Error as e:
        raise ConfigFileError(f'{e}: give each --config.KEY a value of its field\'s type '
                              f'(trm_spmd/config/schema.py)') from None
