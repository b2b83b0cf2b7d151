"""Device backends behind one small interface (see base.Runtime).

`xla`: torch_xla SPMD (TPU pods; CPU devices for tests and the quickstart).
`native`: plain torch on CPU or CUDA (torch_xla 2.9 has no GPU support).

Above config/ (the mesh rule) and the floor, below train/: the runtime knows no TRM and no task.
"""

import os

import torch

from trm_spmd.errors import UserError

from trm_spmd.runtime.base import Runtime
from trm_spmd.runtime.native import NativeRuntime
from trm_spmd.runtime.xla import XlaRuntime, on_tpu_vm, xla_available


class BackendError(UserError):
    """The requested backend cannot run here."""


def select_backend(requested):
    """'auto' -> the fastest backend where it runs: 'xla' on a TPU VM or when PJRT_DEVICE names
    the devices (SPMD over virtual CPU devices), else 'native' (CUDA, and a plain CPU, where
    torch.compile beats XLA's CPU backend per step: benchmarks/README.md)."""
    if requested == 'auto':
        wants_xla = 'PJRT_DEVICE' in os.environ or on_tpu_vm()
        return 'xla' if wants_xla and not torch.cuda.is_available() and xla_available() else 'native'
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
