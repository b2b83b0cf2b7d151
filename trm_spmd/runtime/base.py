"""The small interface the training code needs from a device backend."""

import os

import torch

from trm_spmd.batch import host_rows
from trm_spmd.errors import UserError


class Runtime:
    """One process's view of the devices: the mesh, batch placement, compilation, hosts.

    Attributes set by implementations: name, device, device_kind, device_count,
    local_device_count, process_index, process_count, mesh_shape, axis_names.
    """

    # True when one program holds the global batch (SPMD); False when each process holds
    # only its host slice and sums are all-reduced explicitly.
    global_view = True
    # True when every process of the run sees the same disk (processes of one machine).
    shared_filesystem = False
    # model.forward_dtype 'auto' resolves to this: what the devices compute fastest.
    fast_dtype = 'bfloat16'
    # model.attention_impl 'auto' resolves to this (model/attention.py): dense where the whole
    # score matrix is cheap (CPUs; CUDA, whose scaled_dot_product_attention is a fused kernel).
    fast_attention = 'dense'

    def local_rows(self, global_rows):
        """Rows of a global batch that this process's tensors hold."""
        return global_rows if self.global_view else global_rows // self.process_count

    def host_slice(self, global_rows):
        """(start, stop) of this process's rows in the global batch."""
        return host_rows(global_rows, self.process_index, self.process_count)

    def put_batch(self, host_batch):
        raise NotImplementedError

    def shard_along_data(self, tensor):
        return tensor

    def replicate(self, tensor):
        return tensor

    def shard_rows(self, tensor):
        """Marks a device tensor (a large table) as split by rows over every device."""
        return tensor

    def sharding_spec(self, tensor):
        return 'local'

    def serialize(self, tensors):
        """`tensors`, as new tensors that nothing downstream may read before every one of them
        is computed. Backends that run operations in program order need nothing."""
        return list(tensors)

    def all_reduce_sum_(self, tensors):
        """Sums tensors over processes in place; a no-op where one program sees the global batch."""

    def to_host(self, tensor):
        """The whole (global) tensor on the host CPU."""
        return tensor.detach().cpu()

    def read_scalars(self, tensors):
        """0-d tensors -> Python floats, in one transfer (waits for the steps that made them)."""
        if not tensors:
            return []
        return torch.stack([t.detach().float() for t in tensors]).cpu().tolist()

    def compile(self, fn, name, max_graphs=None):
        raise NotImplementedError

    def token_mix_kernel(self):
        """fn(h, gate_up weight, down weight, eps) -> rms_norm(h + mlp_t(h)) over positions: a
        block's token-mixing sublayer as this backend's kernel (TRM.use_token_mix_kernel)."""
        raise UserError(f'xla.token_mix_kernel=True runs Pallas kernels on a TPU; the {self.name} backend '
                        'has none: set xla.token_mix_kernel=False')

    def attention_kernel(self):
        """fn(q, k, v, mask) -> softmax(q k^T / sqrt(d), masked) v: self-attention's core as this
        backend's kernel (TRM.use_attention_kernel)."""
        raise UserError(f'xla.attention_kernel=True runs Pallas kernels on a TPU; the {self.name} backend '
                        'has none: set xla.attention_kernel=False')

    def sync(self):
        pass

    def wait(self):
        pass

    def counters(self):
        return {'uncached_compiles': 0, 'cpu_fallback_ops': 0, 'host_syncs': 0}

    def fallback_op_names(self):
        return []

    def memory_stats(self):
        return {}

    def barrier(self):
        pass

    @property
    def is_main_host(self):
        return self.process_index == 0

    def describe(self):
        data, model = self.mesh_shape
        return {
            'backend': self.name,
            'device_kind': self.device_kind,
            'devices': self.device_count,
            'devices_per_host': self.local_device_count,
            'hosts': self.process_count,
            'host_index': self.process_index,
            'mesh': f'({data}, {model}) axes {tuple(self.axis_names)}',
            'pid': os.getpid(),
        }
