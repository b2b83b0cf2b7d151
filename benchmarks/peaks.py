"""Peak bf16 throughput per device, device detection, MFU, and the environment of a result.

MFU = achieved FLOP/s / (devices x peak FLOP/s per device), with FLOPs from the analytic
count (trm_spmd.model.flops), never from a profiler. Peaks are dense bf16 (no sparsity) per
chip: with megacore a TPU v4 or v5p chip is one PyTorch device, so device = chip there and
on v5e/v6e (one TensorCore per chip). A CPU has no meaningful peak here: its MFU is n/a.
"""

import dataclasses
import datetime
import os
import platform
import resource
import subprocess
import sys

from trm_spmd.hardware import PEAK_BF16_TFLOPS, canonical_kind, peak_tflops  # noqa: F401 (the benchmarks' API)


def mfu(flops_per_step, step_seconds, devices, peak_tflops_per_device):
    """Model FLOPs utilisation in [0, 1] (can exceed 1 only if the FLOP count or peak is wrong); None without a peak."""
    if not peak_tflops_per_device or step_seconds <= 0:
        return None
    return flops_per_step / step_seconds / (devices * peak_tflops_per_device * 1e12)


@dataclasses.dataclass
class Device:
    backend: str             # 'xla' or 'native'
    description: str         # what the hardware calls itself ('TPU v4', 'NVIDIA H100 ...', 'CPU')
    kind: str                # canonical kind ('tpu-v4', 'h100-sxm') or 'cpu' / 'unknown'
    devices: int             # devices in the mesh (= chips on TPU, = GPUs on native)
    hosts: int
    mesh: str
    peak_tflops: float       # per device; None where not applicable (CPU) or unknown

    @property
    def slug(self):
        """File-name part: 'tpu-v4-x32', 'h100-sxm-x1', 'cpu-xla-x8'."""
        base = self.kind if self.kind not in ('cpu', 'unknown') else f'{self.kind}-{self.backend}'
        return f'{base}-x{self.devices}'


def _tpu_description():
    """The accelerator type of this TPU VM ('v4-64'): under SPMD torch_xla 2.9 reports only 'TPU'."""
    if os.environ.get('TPU_ACCELERATOR_TYPE'):
        return os.environ['TPU_ACCELERATOR_TYPE']
    try:
        from torch_xla._internal import tpu   # reads the TPU VM's metadata server
        return tpu.get_tpu_type()
    except Exception:  # noqa: BLE001 - any failure just means "unknown generation"
        return 'TPU'


def detect(runtime, override=''):
    """The Device of a runtime; `override` (e.g. 'v5e', 'H100 SXM') names the hardware when detection cannot."""
    description = override or runtime.device_kind or 'unknown'
    if not override and description.upper() == 'TPU':
        description = _tpu_description()
    kind = canonical_kind(description)
    if kind is None:
        kind = 'cpu' if description.lower().startswith('cpu') else 'unknown'
    info = runtime.describe()
    return Device(backend=runtime.name, description=description, kind=kind, devices=runtime.device_count,
                  hosts=runtime.process_count, mesh=info['mesh'], peak_tflops=peak_tflops(description))


def host_memory():
    """Host RSS in bytes: peak (getrusage, KiB on Linux) and current (psutil when installed)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {'host_peak_rss_bytes': peak}
    try:
        import psutil
        out['host_rss_bytes'] = psutil.Process().memory_info().rss
    except ImportError:
        pass
    return out


def device_memory(runtime):
    """Device memory the runtime reports, with host RSS; a note where nothing is reported."""
    stats = dict(runtime.memory_stats())
    if not stats and runtime.name == 'xla':
        stats['note'] = 'not reported: torch_xla 2.9 gives no per-device memory info under SPMD'
    elif not stats and runtime.device.type == 'cpu':
        stats['note'] = 'the devices are host memory: see host RSS'
    return {**stats, **host_memory()}


def _gib(value):
    return f'{value / 2**30:.2f} GiB' if isinstance(value, (int, float)) else str(value)


def memory_text(memory):
    """'device peak_bytes_used 3.10 GiB; host peak RSS 1.60 GiB' from a memory dict."""
    device = [f'{k} {_gib(v)}' for k, v in memory.items() if k != 'note' and not k.startswith('host_')]
    parts = [f'device {", ".join(device)}' if device else f'device: {memory.get("note", "n/a")}']
    if 'host_peak_rss_bytes' in memory:
        parts.append(f'host peak RSS {_gib(memory["host_peak_rss_bytes"])}')
    return '; '.join(parts)


def _version(module):
    try:
        return __import__(module).__version__
    except (ImportError, AttributeError):
        return None


def _git_commit():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=root, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f'{commit}{"+local changes" if dirty else ""}' if commit else None


def environment():
    """Versions and host facts recorded with every result (the load average says how contended CPU timings were)."""
    load = os.getloadavg() if hasattr(os, 'getloadavg') else (None, None, None)
    return {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'python': platform.python_version(),
        'torch': _version('torch'),
        'torch_xla': _version('torch_xla') if 'torch_xla' in sys.modules else None,
        'numpy': _version('numpy'),
        'trm_spmd': _version('trm_spmd'),
        'git_commit': _git_commit(),
        'hostname': platform.node(),
        'cpu_cores': os.cpu_count(),
        'load_average_1m': load[0],
        'env': {k: os.environ[k] for k in ('PJRT_DEVICE', 'CPU_NUM_DEVICES', 'XLA_FLAGS', 'LIBTPU_INIT_ARGS')
                if k in os.environ},
    }


def contention_note(env):
    """A sentence for CPU results: how busy the machine was while they were taken."""
    cores, load = env.get('cpu_cores'), env.get('load_average_1m')
    if not cores or load is None:
        return ''
    busy = 'contended: other work shared the cores' if load > 0.5 * cores else 'lightly loaded'
    return f'{cores} CPU cores, 1-minute load average {load:.2f} at the start ({busy}); CPU timings vary run to run.'
