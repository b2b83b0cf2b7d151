"""Native torch runtime for CPU and CUDA without XLA.

One process per device under torchrun (`torch.distributed`, NCCL on GPU, gloo on CPU), or
a single process. Each process is a "host" with one device: its batch slice is the host
slice of the global batch, and gradients and metric sums are all-reduced explicitly.
"""

import logging
import os
import warnings

import numpy as np
import torch
import torch.distributed as dist

from trm_spmd.config.validate import resolve_mesh_shape
from trm_spmd.runtime.base import Runtime


def fast_dtype(device):
    """bfloat16 where the hardware computes it natively (a CUDA GPU, a CPU with AVX512-BF16 or
    AMX), else float32: an AVX2-only CPU emulates bfloat16 matmuls ~13x slower than float32."""
    if device.type == 'cuda':
        return 'bfloat16' if torch.cuda.is_bf16_supported() else 'float32'
    return 'bfloat16' if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported() else 'float32'


class NativeRuntime(Runtime):
    name = 'native'
    global_view = False
    shared_filesystem = True   # torchrun processes of one machine

    def __init__(self, mesh_shape=(-1, 1), axis_names=('data', 'model'), compile_mode='none'):
        world = int(os.environ.get('WORLD_SIZE', '1'))
        if world > 1 and not dist.is_initialized():
            dist.init_process_group('nccl' if torch.cuda.is_available() else 'gloo')
        self.process_index = dist.get_rank() if world > 1 else 0
        self.process_count = world
        if torch.cuda.is_available():
            local = int(os.environ.get('LOCAL_RANK', '0'))
            torch.cuda.set_device(local)
            self.device = torch.device('cuda', local)
            self.device_kind = torch.cuda.get_device_name(local)
        else:
            self.device = torch.device('cpu')
            self.device_kind = 'CPU'
        self.device_count = world
        self.local_device_count = 1
        self.mesh_shape = resolve_mesh_shape(mesh_shape, world)
        self.axis_names = tuple(axis_names)
        self.compile_mode = compile_mode
        self.fast_dtype = fast_dtype(self.device)
        if compile_mode != 'none' and self.device.type == 'cpu':
            # inductor's CUDA and TF32 notes mislead here
            logging.getLogger('torch.utils.cpp_extension').setLevel(logging.ERROR)
            warnings.filterwarnings('ignore', message='Please use the new API settings to control TF32')
            # Else inductor sums the embedding gradient with parallel atomic adds and no two runs
            # (nor a resumed one) agree; the deterministic lowering costs nothing measurable here.
            torch.use_deterministic_algorithms(True, warn_only=True)

    def put_batch(self, host_batch):
        return {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device, non_blocking=True)
                for k, v in host_batch.items()}

    def compile(self, fn, name, max_graphs=None):
        if self.compile_mode == 'none':
            return fn
        return torch.compile(fn, mode=None if self.compile_mode == 'default' else self.compile_mode)

    def all_reduce_sum_(self, tensors):
        if self.process_count > 1:
            for t in tensors:
                dist.all_reduce(t)

    def to_host(self, tensor):
        """The global tensor: every process's rows, gathered along dim 0."""
        tensor = tensor.detach()
        if self.process_count > 1:
            parts = [torch.empty_like(tensor) for _ in range(self.process_count)]
            dist.all_gather(parts, tensor.contiguous())
            tensor = torch.cat(parts)
        return tensor.cpu()

    def wait(self):
        if self.device.type == 'cuda':
            torch.cuda.synchronize(self.device)

    def memory_stats(self):
        if self.device.type == 'cuda':
            return {'max_allocated_bytes': torch.cuda.max_memory_allocated(self.device)}
        return {}

    def cpu_process_group(self):
        if not hasattr(self, '_group'):
            self._group = dist.new_group(backend='gloo')
        return self._group

    def barrier(self):
        if self.process_count > 1:
            dist.barrier()
