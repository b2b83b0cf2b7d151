"""trm_spmd: Tiny Recursive Models at scale.

The package's map is README.md's Layout: one row per folder, imports only down the rows
(tests/test_layout.py), from the floor (errors, fs, ...) through data/, tasks/, model/ and
optim/, config/, runtime/, the run around training (checkpoint, lease/, hosts) and train/,
up to the commands (main, build, solve, sweep, analysis).

orbax-checkpoint imports JAX; JAX must never claim the TPU inside a torch_xla process,
so it is pinned to the CPU here, before anything can import it.
"""

import os

os.environ.setdefault('JAX_PLATFORMS', 'cpu')

__version__ = '0.1.0'
