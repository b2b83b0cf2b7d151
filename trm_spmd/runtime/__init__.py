"""Device backends behind one small interface (see base.Runtime).

`xla`: torch_xla SPMD (TPU pods; CPU devices for tests and the quickstart).
`native`: plain torch on CPU or CUDA (torch_xla 2.9 has no GPU support).
"""

import torch

from trm_spmd.runtime.base import Runtime
from trm_spmd.runtime.native import NativeRuntime
from trm_spmd.runtime.xla import XlaRuntime, xla_available


class BackendError(RuntimeError):
    pass


def select_backend(requested):
    """'auto' -> 'native' on a CUDA machine or without torch_xla, else 'xla'."""
    if requested == 'auto':
        if torch.cuda.is_available() or not xla_available():
            return 'native'
        return 'xla'
    if requested == 'xla' and not xla_available():
        raise BackendError('backend xla needs torch_xla (Linux: bash launch/setup.sh); '
                           'or run with --config.backend=native')
    return requested


def create_runtime(config):
    backend = select_backend(config.backend)
    if backend == 'xla':
        return XlaRuntime(config.mesh.shape, config.mesh.axis_names, config.xla.cache_dir)
    return NativeRuntime(config.mesh.shape, config.mesh.axis_names, config.native.compile)


__all__ = ['BackendError', 'NativeRuntime', 'Runtime', 'XlaRuntime', 'create_runtime', 'select_backend']
