"""Peak dense bfloat16 throughput of the accelerators trm_spmd runs on, by device name:
for MFU in the benchmarks and for the run's own estimate of a step's time (scale.py)."""

import re

# Dense bf16 TFLOP/s per chip (TPU) or per GPU, from the vendors' spec sheets.
PEAK_BF16_TFLOPS = {
    'tpu-v4': 275.0,
    'tpu-v5e': 197.0,
    'tpu-v5p': 459.0,
    'tpu-v6e': 918.0,
    'a100': 312.0,
    'h100-sxm': 989.0,
    'h100-pcie': 756.0,
    'h200': 989.0,
    'l40s': 362.0,
}

# HBM bandwidth in GB/s per chip (TPU), from the same spec sheets: for rooflines of kernels
# the TPU compiler's cost model cannot time (benchmarks/tpu_compile.py).
HBM_GBPS = {'tpu-v4': 1200.0, 'tpu-v5e': 819.0, 'tpu-v5p': 2765.0, 'tpu-v6e': 1640.0}

# (pattern on the lower-cased device description, canonical kind); first match wins.
# TPU descriptions come as accelerator types ('v4-64', 'v5litepod-16') or PJRT device
# kinds ('TPU v4', 'TPU v5 lite', 'TPU v5', 'TPU v6 lite'); GPUs as torch.cuda names.
_KIND_PATTERNS = (
    (r'v5\s*lite|v5litepod|v5e', 'tpu-v5e'),
    (r'v6\s*lite|v6e', 'tpu-v6e'),
    (r'v5p|tpu v5\b|^v5-', 'tpu-v5p'),
    (r'(tpu\s*)?v4\b|^v4-', 'tpu-v4'),
    (r'h200', 'h200'),
    (r'h100.*pcie', 'h100-pcie'),
    (r'h100', 'h100-sxm'),
    (r'a100', 'a100'),
    (r'l40s', 'l40s'),
)


def canonical_kind(description):
    """'TPU v4' / 'v4-64' / 'NVIDIA H100 80GB HBM3' -> a PEAK_BF16_TFLOPS key; None if unknown (CPU)."""
    text = (description or '').strip().lower()
    for pattern, kind in _KIND_PATTERNS:
        if re.search(pattern, text):
            return kind
    return None


def peak_tflops(description):
    kind = canonical_kind(description)
    return PEAK_BF16_TFLOPS[kind] if kind else None
