"""Config schema, argument parsing, validation and config-file loading.

On the map (README.md: Layout) config/ sits above tasks/, data/ and model/, which validation
asks for a run's sizes and the model's rules, and below runtime/ and train/, which it never
imports.
"""

from trm_spmd.config.args import ConfigArgError, parse_arg
from trm_spmd.config.family import SUDOKU_EXTREME_1K, family_config
from trm_spmd.config.files import ConfigFileError, expand_sweep, load_config
from trm_spmd.config.runlocal import apply_runlocal
from trm_spmd.config.schema import default_config
from trm_spmd.config.validate import ConfigError, config_hash, resolve_mesh_shape, validate

__all__ = [
    'ConfigArgError', 'ConfigError', 'ConfigFileError', 'SUDOKU_EXTREME_1K', 'apply_runlocal', 'config_hash',
    'default_config', 'expand_sweep', 'family_config', 'load_config', 'parse_arg', 'resolve_mesh_shape', 'validate',
]
