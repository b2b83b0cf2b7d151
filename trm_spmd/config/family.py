"""`family_config`: the skeleton every experiment family file shares.

A family file lists its variants as the config fields each one changes from the baseline
(the schema's defaults, i.e. the paper's run) and calls family_config, which parses the
`FILE.py:ARG` argument, refuses an unknown variant in one line, applies the fields, and
shrinks the result for `:runlocal`.
"""

from trm_spmd.config.args import ConfigArgError, parse_arg
from trm_spmd.config.runlocal import apply_runlocal
from trm_spmd.config.schema import default_config

# The paper's dataset, built once with python -m trm_spmd.build sudoku (README: Everyday commands).
SUDOKU_EXTREME_1K = 'data/sudoku-extreme-1k-aug-1000'
MAZE_HARD = 'data/maze-30x30-hard-1k-aug-8'   # python -m trm_spmd.build maze (configs/maze.py)


def family_config(name, variants, arg, default, runlocal=None, data_path=SUDOKU_EXTREME_1K):
    """The config of variant ARG (default `default`) of family `name`.

    variants: {variant: {dotted key: value}}, or a function variant -> that dict which
    raises ConfigArgError for a name it cannot decode (e.g. 't3_n6').
    runlocal: optional function(config, variant) run after apply_runlocal, for a variant
    whose CPU-sized run must keep a ratio the generic shrink would lose.
    """
    arg = parse_arg(arg, variant=default, runlocal=False)
    if callable(variants):
        fields = variants(arg.variant)
    elif arg.variant in variants:
        fields = variants[arg.variant]
    else:
        raise ConfigArgError(f'{name} variant {arg.variant!r} is not known; known: {", ".join(variants)}')
    c = default_config()
    c.name = name
    c.variant = arg.variant
    c.data.path = data_path
    c.update_from_flattened_dict(fields)
    if arg.runlocal:
        apply_runlocal(c)
        if runlocal is not None:
            runlocal(c, arg.variant)
    return c
