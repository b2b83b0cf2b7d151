"""Device backends behind one small interface (see base.Runtime).

`xla`: torch_xla SPMD (TPU pods; CPU devices for tests and the quickstart).
`native`: plain torch on CPU or CUDA (torch_xla 2.9 has no GPU support).
"""

import os

import torch

from trm_spmd.errors import UserError

from trm_spmd.runtime.base import Runtime
from trm_spmd.runtime.native import NativeRuntime
from trm_spmd.runtime.xla import XlaRuntime, xla_available


class BackendError(UserError):
    """The requested backend cannot run here."""


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


def xla_cache_dir(setting):
    """'' -> ~/.cache/trm_spmd/xla_cache on TPUs (on CPUs torch_xla writes but never reads
    it), 'none' -> no cache, anything else is the directory."""
    if setting == 'none':
        return ''
    if setting:
        return setting
    if os.environ.get('PJRT_DEVICE', '').upper() == 'TPU':
        return os.path.join(os.path.expanduser('~'), '.cache', 'trm_spmd', 'xla_cache')
    return ''


def create_runtime(config):
    backend = select_backend(config.backend)
    if backend == 'xla':
        return XlaRuntime(config.mesh.shape, config.mesh.axis_names, xla_cache_dir(config.xla.cache_dir))
    return NativeRuntime(config.mesh.shape, config.mesh.axis_names, config.native.compile)


__all__ = ['BackendError', 'NativeRuntime', 'Runtime', 'XlaRuntime', 'create_runtime', 'select_backend']
