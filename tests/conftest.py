"""Test set-up: XLA runs on 8 virtual CPU devices, set before anything imports torch_xla.

Tests that need another device count (1, 64) run in their own process (see run_in_subprocess).
"""

import os
import subprocess
import sys
import threading

os.environ.setdefault('PJRT_DEVICE', 'CPU')
os.environ.setdefault('CPU_NUM_DEVICES', '8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pytest  # noqa: E402

# Autograd sizes its per-device queues at the first backward pass of the process; when that
# is a CPU-only one, every later XLA backward fails. One tiny XLA backward first.
try:
    import torch  # noqa: E402
    import torch_xla  # noqa: E402
    import torch_xla.runtime as xr  # noqa: E402
except ImportError:
    pass
else:
    xr.use_spmd()
    _x = torch.ones(1, device=torch_xla.device(), requires_grad=True)
    (_x * 2).sum().backward()   # (a bare leaf.sum().backward() trips the same assert)
    del _x

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), 'shared', 'sudoku_data')


def run_in_subprocess(args, devices, timeout=600, cwd=REPO, env=None):
    """Runs `python ARGS` with CPU_NUM_DEVICES=devices; returns the CompletedProcess."""
    full_env = dict(os.environ, CPU_NUM_DEVICES=str(devices), PJRT_DEVICE='CPU', **(env or {}))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


class ThreadExchange:
    """all_gather_object between threads standing in for hosts: every host's value, in host order."""

    def __init__(self, hosts):
        self.values = [None] * hosts
        self.barrier = threading.Barrier(hosts)

    def for_host(self, i):
        def exchange(value):
            self.values[i] = value
            self.barrier.wait()
            gathered = list(self.values)
            self.barrier.wait()
            return gathered
        return exchange


def run_as_hosts(count, work, timeout=120):
    """work(i, exchange) on `count` threads standing in for hosts -> each host's result, or
    the UserError it raised."""
    from trm_spmd.errors import UserError
    exchange, results = ThreadExchange(count), [None] * count

    def host(i):
        try:
            results[i] = work(i, exchange.for_host(i))
        except UserError as e:
            results[i] = e

    threads = [threading.Thread(target=host, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results


@pytest.fixture
def shared_data():
    if not os.path.isdir(SHARED_DATA):
        pytest.skip(f'{SHARED_DATA} is absent (the shared Sudoku collections live beside the repository)')
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _isolated_data_cache(tmp_path_factory, monkeypatch):
    # Generated datasets are cached per session, never in the user's ~/.cache.
    monkeypatch.setenv('TRM_SPMD_DATA', str(tmp_path_factory.getbasetemp() / 'datasets'))
