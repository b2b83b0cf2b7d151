"""The torch_xla SPMD runtime: the only module of trm_spmd that imports torch_xla.

One process per host drives every device of the slice through one SPMD program: the
parameters are replicated, each batch is sharded along the mesh's `data` axis, and the
XLA partitioner inserts the gradient all-reduce (no DDP, no per-device processes).
"""

import os

import numpy as np
import torch

from trm_spmd.config.validate import resolve_mesh_shape
from trm_spmd.errors import UserError
from trm_spmd.runtime.base import Runtime


def _default_device():
    # Without PJRT_DEVICE torch_xla guesses (and warns); off a TPU VM the CPU is meant.
    if 'PJRT_DEVICE' not in os.environ and not on_tpu_vm():
        os.environ['PJRT_DEVICE'] = 'CPU'


def xla_available():
    _default_device()
    try:
        import torch_xla  # noqa: F401
    except ImportError:
        return False
    return True


class XlaRuntime(Runtime):
    name = 'xla'
    # The partitioner all-reduces a weight gradient where its partial sums arise, at the
    # matmul: rounded to bfloat16 there, once per use of the weight; left in float32, the
    # compiler sums the uses and all-reduces once (TRM.use_float32_weight_grads).
    float32_weight_grads = True

    def __init__(self, mesh_shape=(-1, 1), axis_names=('data', 'model'), cache_dir=''):
        _default_device()
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
        import torch_xla.distributed.spmd as xs
        import torch_xla.runtime as xr
        self._torch_xla, self._xm, self._met, self._xs, self._xr = torch_xla, xm, met, xs, xr

        # Both must happen before the first XLA computation.
        if cache_dir:
            os.makedirs(cache_dir, exist_ok=True)
            xr.initialize_cache(cache_dir, readonly=False)
        if not xr.is_spmd():
            xr.use_spmd()

        count = xr.global_runtime_device_count()
        self.mesh_shape = resolve_mesh_shape(mesh_shape, count)
        self.axis_names = tuple(axis_names)
        self.mesh = xs.Mesh(np.arange(count), self.mesh_shape, self.axis_names)
        xs.set_global_mesh(self.mesh)
        self.device = torch_xla.device()
        self.device_count = count
        self.local_device_count = xr.addressable_runtime_device_count()
        self.process_index = xr.process_index()
        self.process_count = xr.process_count()
        self.device_kind = xr.device_type() or 'CPU'
        self.fast_dtype = 'float32' if self.device_kind == 'CPU' else 'bfloat16'
        # On a TPU the blockwise attention keeps no [L, L] tensor in HBM (benchmarks/README.md);
        # on CPU devices dense attention is faster.
        self.fast_attention = 'dense' if self.device_kind == 'CPU' else 'blockwise'
        self._group = None
        # Set where steps are only traced for the TPU compiler: TPU kernels may then be traced
        # on other devices (they are never run there).
        self.trace_only = False

    # ---- data ---------------------------------------------------------------------
    def put_batch(self, host_batch):
        """Host-local numpy slices -> global tensors sharded along `data` (dim 0)."""
        out = {}
        for key, value in host_batch.items():
            tensor = torch.from_numpy(np.ascontiguousarray(value))
            # torch_xla 2.9's minibatch transfer fails on 1-D tensors: send [B, 1], view back.
            flat = tensor.dim() == 1
            if flat:
                tensor = tensor.unsqueeze(-1)
            spec = self._xs.ShardingSpec(self.mesh, ('data',) + (None,) * (tensor.dim() - 1),
                                         minibatch=True)
            placed = self._xm.send_cpu_data_to_device([tensor], self.device, spec)[0]
            out[key] = placed.view(-1) if flat else placed
        # Run the views now (one small cached graph): left pending, they would be folded
        # into whichever compiled function runs next and change its graph.
        self._torch_xla.sync()
        return out

    def shard_along_data(self, tensor):
        """Marks a device tensor (e.g. the ACT carry) as sharded along `data` on dim 0."""
        self._xs.mark_sharding(tensor, self.mesh, ('data',) + (None,) * (tensor.dim() - 1))
        return tensor

    def to_host(self, tensor):
        if self.process_count > 1:
            # Rows of other hosts are not addressable here: replicate (an all-gather) first.
            tensor = tensor.detach().clone()
            self._xs.mark_sharding(tensor, self.mesh, (None,) * tensor.dim())
        return tensor.detach().cpu()

    def read_scalars(self, tensors):
        # One batched transfer of the existing buffers: stacking them would trace a new
        # graph for every count of tensors.
        tensors = [t.detach() for t in tensors]
        self._torch_xla._XLAC._xla_sync_multi(tensors, devices=[], wait=True, sync_xla_data=False)
        return [float(t) for t in self._torch_xla._XLAC._xla_get_cpu_tensors(tensors)]

    def replicate(self, tensor):
        """Marks a device tensor replicated, as the outputs of a step are: without the mark,
        freshly uploaded state traces a different first graph than every later step."""
        self._xs.mark_sharding(tensor, self.mesh, (None,) * tensor.dim())
        return tensor

    def shard_rows(self, tensor):
        """Marks a device tensor as split by rows over every device of the mesh (both axes):
        a table too large to replicate, e.g. ARC's puzzle embedding. A lookup from it is a
        local gather of the rows each device holds and an all-reduce of the batch's rows."""
        self._xs.mark_sharding(tensor, self.mesh, (self.axis_names,) + (None,) * (tensor.dim() - 1))
        return tensor

    def sharding_spec(self, tensor):
        return self._torch_xla._XLAC._get_xla_sharding_spec(tensor)

    # ---- execution ----------------------------------------------------------------
    def checkpoint_fn(self, function, *args):
        """Activation rematerialisation for XLA tensors: torch.utils.checkpoint looks up a
        torch.xla device module that does not exist; torch_xla ships its own."""
        import torch_xla.utils.checkpoint
        return torch_xla.utils.checkpoint.checkpoint(function, *args, use_reentrant=True)

    def compile(self, fn, name, max_graphs=None):
        return self._torch_xla.compile(fn, full_graph=True, name=name, max_different_graphs=max_graphs)

    def token_mix_kernel(self):
        """Each block's token-mixing sublayer as the Pallas kernels of runtime/token_mix_kernel.py,
        each chip running them on its own examples (manual sharding); the weight gradients'
        per-chip sums are added by the partitioner. On a TPU, or where the step is only traced
        for the TPU compiler (trace_only)."""
        if self.device_kind != 'TPU' and not self.trace_only:
            raise UserError(f'xla.token_mix_kernel=True runs Pallas kernels on a TPU; this run\'s devices are '
                            f'{self.device_kind}: set xla.token_mix_kernel=False')
        runtime = self

        class TokenMix(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w_gate_up, w_down, eps):
                ctx.save_for_backward(x, w_gate_up, w_down)
                ctx.eps = eps
                return runtime._token_mix_call('forward', eps, x, w_gate_up, w_down)[0]

            @staticmethod
            def backward(ctx, dout):
                x, w_gate_up, w_down = ctx.saved_tensors
                dx, d_gate_up, d_down = runtime._token_mix_call('backward', ctx.eps, x, w_gate_up, w_down, dout)
                return dx, d_gate_up.to(w_gate_up.dtype), d_down.to(w_down.dtype), None

        return TokenMix.apply

    def attention_kernel(self):
        """Self-attention's core as the Pallas kernels of runtime/attention_kernel.py, each chip
        running them on its own examples (runtime/xla_attention.py). On a TPU, or where the step
        is only traced for the TPU compiler (trace_only)."""
        if self.device_kind != 'TPU' and not self.trace_only:
            raise UserError(f'xla.attention_kernel=True runs Pallas kernels on a TPU; this run\'s devices are '
                            f'{self.device_kind}: set xla.attention_kernel=False')
        from trm_spmd.runtime.xla_attention import attention_kernel_fn
        return attention_kernel_fn(self)

    def _token_mix_call(self, kind, eps, x, w_gate_up, w_down, dout=None):
        """One kernel call on x [B, L, D], each chip on its own examples ('forward': [out];
        'backward': [dx, d w_gate_up, d w_down], the weight gradients float32, summed)."""
        xs, mesh = self._xs, self.mesh
        shards = self.mesh_shape[0]
        by_example, whole = ('data', None, None), (None, None)

        def local(t, spec):
            return xs.enable_manual_sharding(t, spec, mesh=mesh).global_tensor

        inputs = [local(x, by_example)] + ([local(dout, by_example)] if dout is not None else [])
        inputs += [local(w_gate_up.to(x.dtype), whole), local(w_down.to(x.dtype), whole)]
        outputs = self._kernel_outputs(kind, eps, inputs)
        y = xs.disable_manual_sharding(outputs[0], by_example, x.shape, mesh=mesh).global_tensor
        if kind == 'forward':
            return [y]

        def summed(partials):   # [cores, ...] per chip -> the sum over every chip's cores
            full = (shards * partials.shape[0],) + tuple(partials.shape[1:])
            spec = ('data',) + (None,) * (partials.dim() - 1)
            return xs.disable_manual_sharding(partials, spec, full, mesh=mesh).global_tensor.sum(0)

        return [y, summed(outputs[1]), summed(outputs[2])]

    def _kernel_outputs(self, kind, eps, inputs):
        """The kernel's tpu_custom_call on one chip's tensors: `inputs` x (and dout), w_gate_up,
        w_down as token_mix_kernel.forward / backward_partials take them; their outputs."""
        # The TPU is torch_xla's: JAX only lowers the kernels and must open no device.
        os.environ.setdefault('JAX_PLATFORMS', 'cpu')
        from torch_xla.experimental.custom_kernel import _extract_backend_config
        from trm_spmd.runtime import token_mix_kernel as kernel
        x, w_gate_up, w_down = inputs[0], inputs[-2], inputs[-1]
        lowered = kernel.lowered_for_tpu(kind, tuple(x.shape), w_down.shape[1], eps,
                                         str(x.dtype).removeprefix('torch.'))
        shapes, dtypes = [list(x.shape)], [x.dtype]
        if kind == 'backward':
            cores = kernel.partial_sums(x.shape[0], x.shape[2])
            shapes += [[cores] + list(w_gate_up.shape), [cores] + list(w_down.shape)]
            dtypes += [torch.float32, torch.float32]
        return self._torch_xla._XLAC._xla_tpu_custom_call(inputs, _extract_backend_config(lowered), shapes, dtypes)

    def serialize(self, tensors):
        """An optimization barrier: XLA schedules a graph's operations freely, and may start
        work that reads the returned tensors early; through the barrier it can start none of
        it before all of `tensors` exist. The clones keep the callers' tensors (views of a
        step's inputs, say) out of the in-place rewrite."""
        out = [t.clone() for t in tensors]
        self._xm.optimization_barrier_(out)
        return out

    def hlo_module_proto(self, tensors):
        """The pending computation of `tensors` as a serialized HloModuleProto, with the SPMD
        sharding annotations of its parameters and marked values; nothing is compiled or run.

        Call it where a compiled function would sync, with every tensor that sync would
        write (outputs and the state updated in place): the module is then the graph the
        compiled function sends to the compiler, before partitioning. Tensors with no
        pending work (unchanged device data) are left out, as a sync leaves them.
        """
        return self._torch_xla._XLAC._get_xla_tensors_hlo_proto(list(tensors))

    def sync(self):
        self._torch_xla.sync()

    def wait(self):
        self._xm.wait_device_ops()

    def counters(self):
        met = self._met
        fallbacks = sum(met.counter_value(n) or 0 for n in met.counter_names()
                        if n.startswith('aten::') and n != 'aten::_local_scalar_dense')
        return {
            'uncached_compiles': met.counter_value('UncachedCompile') or 0,
            'cpu_fallback_ops': fallbacks,
            'host_syncs': met.counter_value('aten::_local_scalar_dense') or 0,
        }

    def fallback_op_names(self):
        return sorted(n for n in self._met.counter_names()
                      if n.startswith('aten::') and n != 'aten::_local_scalar_dense')

    def memory_stats(self):
        try:
            return dict(self._xm.get_memory_info(self.device))
        except (RuntimeError, AttributeError):
            return {}

    # ---- hosts --------------------------------------------------------------------
    def cpu_process_group(self):
        """A gloo group over all hosts, found through the TPU metadata (`xla://`)."""
        if self._group is None:
            import torch.distributed as dist
            import torch_xla.distributed.xla_backend  # noqa: F401  (registers xla://)
            if not dist.is_initialized():
                dist.init_process_group('gloo', init_method='xla://')
            self._group = dist.group.WORLD
        return self._group

    def barrier(self):
        if self.process_count > 1:
            import torch.distributed as dist
            dist.barrier(group=self.cpu_process_group())


def on_tpu_vm():
    return os.path.exists('/dev/accel0') or os.path.exists('/dev/vfio/0')
