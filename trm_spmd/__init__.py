"""trm_spmd: Tiny Recursive Models at scale.

orbax-checkpoint imports JAX; JAX must never claim the TPU inside a torch_xla process,
so it is pinned to the CPU here, before anything can import it.
"""

import os

os.environ.setdefault('JAX_PLATFORMS', 'cpu')

__version__ = '0.1.0'
