"""Test set-up: XLA runs on 8 virtual CPU devices, set before anything imports torch_xla.

Tests that need another device count (1, 64) run in their own process (see run_in_subprocess).
"""

import hashlib
import json
import http.server
import os
import subprocess
import sys
import threading

os.environ.setdefault('PJRT_DEVICE', 'CPU')
os.environ.setdefault('CPU_NUM_DEVICES', '8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# Every graph XLA compiles for the CPU is JIT code in some hundred memory maps, kept while
# torch_xla caches the graph (1,024 by default). The suite compiles well over a thousand in
# this one process: past the kernel's 65,530 maps per process the next compile segfaults.
# Keeping the newest 64 bounds the maps; a graph evicted and needed again is recompiled.
os.environ.setdefault('XLA_COMPILATION_CACHE_SIZE', '64')

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


def assert_compiled_once_on_the_device(workdir, steps):
    """A run of `steps` train steps, logged every step with an evaluation at step 5, compiled
    nothing after its warm-up, fell back to the CPU for no op and synced the host a fixed
    number of times per step (its metrics.jsonl)."""
    with open(os.path.join(workdir, 'metrics.jsonl')) as f:
        train = [r for r in map(json.loads, f) if 'train/loss' in r]
    assert [r['step'] for r in train] == list(range(1, steps + 1))
    # Warm-up: the first train step and the first evaluation (step 5), read at step 6.
    assert len({r['xla/uncached_compiles'] for r in train if r['step'] >= 6}) == 1
    assert all(r['xla/cpu_fallback_ops'] == 0 for r in train)
    assert len({r['xla/host_syncs'] for r in train}) == 1


# Overrides under which one optimizer update is about lr x gradient (AdamW with eps 1): a
# wrongly scaled or missing gradient changes the parameters visibly.
UPDATE_IS_GRADIENT = {'optim.name': 'adamw', 'optim.eps': 1.0, 'optim.lr': 1.0, 'optim.warmup_steps': 0,
                      'optim.weight_decay': 0.0, 'ema.enabled': False}


def random_host_batch(config, rows, seed=0):
    """A batch of `rows` random puzzles of the config's task (60% of the cells blank)."""
    import numpy as np
    from trm_spmd import tasks
    sizes = tasks.sizes(config)
    rng = np.random.default_rng(seed)
    labels = rng.integers(2, sizes['vocab_size'], size=(rows, sizes['seq_len']), dtype=np.int32)
    return {'inputs': np.where(rng.random(labels.shape) < 0.6, 1, labels).astype(np.int32), 'labels': labels,
            'puzzle_identifiers': np.zeros(rows, np.int32)}


def optimization_barriers(proto):
    """The optimization barriers of a serialized HloModuleProto (one_train_step's module):
    counts the instructions' opcode field (length-prefixed; their names start with it too)."""
    return proto.count(b'\x0bopt-barrier')


def one_train_step(config, host_batch, prepare_runtime=None):
    """(parameters before, after, the step's HLO module) of one train step of `config` on
    `host_batch`, uncompiled; prepare_runtime(runtime) runs before the model is built."""
    from trm_spmd.runtime import create_runtime
    from trm_spmd.train.setup import build_trainer, initial_state
    from trm_spmd.train.step import make_train_step
    runtime = create_runtime(config)
    if prepare_runtime:
        prepare_runtime(runtime)
    trainer = build_trainer(config, runtime)
    before = {n: p.detach().cpu().clone() for n, p in trainer.model.named_main_parameters()}
    state = initial_state(trainer, runtime, config.data.global_batch_size)
    step = make_train_step(trainer, config, runtime, 10, config.model.H_cycles, config.model.L_cycles)
    new_state, metrics = step(state, runtime.put_batch(host_batch))
    proto = runtime.hlo_module_proto(list(new_state.carry.values()) + list(metrics.values())
                                     + trainer.persistent_tensors())
    runtime.sync()
    return before, {n: p.detach().cpu() for n, p in trainer.model.named_main_parameters()}, proto


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


class _StandInHub(http.server.BaseHTTPRequestHandler):
    """The Hugging Face Hub's file endpoint for dataset repos, the part hf_hub_download
    uses: HEAD and GET /datasets/OWNER/NAME/resolve/REVISION/FILE."""
    files = {}   # (repo, filename) -> bytes

    def _find(self):
        parts = self.path.split('?')[0].split('/')
        if len(parts) >= 7 and parts[1] == 'datasets' and parts[4] == 'resolve':
            return self.files.get(('/'.join(parts[2:4]), '/'.join(parts[6:])))
        return None

    def _answer(self):
        body = self._find()
        self.send_response(200 if body is not None else 404)
        self.send_header('Content-Length', str(len(body or b'')))
        self.send_header('ETag', '"' + hashlib.sha256(body or b'').hexdigest() + '"')
        self.send_header('X-Repo-Commit', '0' * 40)
        self.end_headers()
        return body

    def do_HEAD(self):
        self._answer()

    def do_GET(self):
        self.wfile.write(self._answer() or b'')

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in_hub(tmp_path):
    """serve({'hf://OWNER/NAME/FILE': bytes}) -> the environment that points huggingface_hub at
    a stand-in Hub on the loopback address serving those files (never the network)."""
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _StandInHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def serve(files):
        _StandInHub.files = {}
        for path, data in files.items():
            owner, name, filename = path[len('hf://'):].split('/', 2)
            _StandInHub.files[f'{owner}/{name}', filename] = data
        return dict(os.environ, HF_ENDPOINT=f'http://127.0.0.1:{server.server_port}', HF_HOME=str(tmp_path / 'hf'),
                    HF_HUB_DISABLE_TELEMETRY='1')
    yield serve
    server.shutdown()


# Credentials a run may find in its environment; none of them may reach its files or its output.
SECRETS = {
    'WANDB_API_KEY': 'wandb-secret-0f3a9c51d2e84b7a',
    'HF_TOKEN': 'hf_secretTokenQ8v2LmZr4T',
    'HUGGING_FACE_HUB_TOKEN': 'hf_otherSecretK3p9Xw',
    'AWS_SECRET_ACCESS_KEY': 'aws-secret-7Hq2nB5vR9kL',
    'GOOGLE_APPLICATION_CREDENTIALS': '/secret/path/service-account-4d1e.json',
    'GCS_OAUTH_TOKEN': 'ya29.secret-oauth-token-55e1',
}


def extra_python(name):
    """A python that sees this environment and the optional extra `name` (requirements-NAME.lock),
    installed as users install it (launch/extras.sh, from PyPI the first time, then reused)."""
    result = subprocess.run(['bash', os.path.join(REPO, 'launch', 'extras.sh'), sys.executable, name],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope='session')
def wandb_python():
    return extra_python('wandb')


@pytest.fixture(scope='session')
def gcs_python():
    return extra_python('gcs')


def gcloud_environment(tmp_path, project=None):
    """The environment of a gcloud with an empty configuration of its own under tmp_path: no
    credentials, no project but `project`, no update check or metadata-server probe."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('CLOUDSDK_', 'GOOGLE_', 'GCE_', 'STORAGE_EMULATOR')) and k != 'PYTHONPATH'}
    config = tmp_path / 'gcloud-config'
    config.mkdir(exist_ok=True)
    # gcloud asks the metadata server whether it runs on GCE the first time a configuration is
    # used, whatever core/check_gce_metadata says, and caches the answer in this file.
    (config / 'gce').write_text('False')
    env.update(CLOUDSDK_CONFIG=str(config), CLOUDSDK_CORE_DISABLE_PROMPTS='1', CLOUDSDK_CORE_CHECK_GCE_METADATA='false',
               CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK='true', CLOUDSDK_CORE_DISABLE_USAGE_REPORTING='true',
               GCE_METADATA_ROOT='127.0.0.1:1')   # any probe left: a closed port on the loopback
    if project:
        env['CLOUDSDK_CORE_PROJECT'] = project
    return env


GCS_BUCKET = 'trm-test'


@pytest.fixture(scope='session')
def gcs_server(gcs_python, tmp_path_factory):
    """One Cloud Storage server for the session (trm_spmd.gcs_server: fake-gcs-server on
    127.0.0.1, from the gs:// extra) holding the bucket GCS_BUCKET; its environment() points a
    run's clients at it. Stopped at the end, and by itself should this process die."""
    from trm_spmd.gcs_server import LocalGcsServer
    found = subprocess.run([gcs_python, '-c', 'from trm_spmd.gcs_server import binary; print(binary())'],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-3000:]
    server = LocalGcsServer(tmp_path_factory.mktemp('gcs') / 'objects', executable=found.stdout.strip()).start()
    server.create_bucket(GCS_BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope='session')
def wandb_runs(wandb_python, tmp_path_factory):
    """A tiny run with logging.wandb in W&B's offline mode, then the same workdir resumed and
    run longer, with SECRETS in the environment -> (workdir, wandb's own environment, outputs)."""
    base = tmp_path_factory.mktemp('wandb')
    workdir = base / 'tiny_run'
    # wandb's caches and settings stay in the test's directory, not the user's home.
    wandb_env = {f'WANDB_{name}_DIR': str(base / name.lower()) for name in ('CACHE', 'CONFIG', 'DATA')}
    env = dict(os.environ, **SECRETS, **wandb_env, WANDB_MODE='offline', PJRT_DEVICE='CPU', CPU_NUM_DEVICES='8',
               TRM_SPMD_DATA=str(tmp_path_factory.getbasetemp() / 'datasets'))
    flags = ['--config=configs/baseline.py:runlocal', f'--workdir={workdir}', '--config.logging.wandb=True',
             '--config.logging.wandb_tags=tiny', '--config.logging.wandb_tags=test',
             '--config.optim.lr_min_ratio=1.0']   # a constant rate: the resume may lengthen the run
    outputs = []
    for extra in ([], ['--config.train.total_steps=6']):
        result = subprocess.run([wandb_python, '-m', 'trm_spmd.main', *flags, *extra], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.append(result.stdout + result.stderr)
    return workdir, dict(os.environ, **wandb_env), outputs

# ---- real full and read-only filesystems: small tmpfs mounts (root only; skipped elsewhere) ----
def _mount_tmpfs(path, options):
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(['mount', '-t', 'tmpfs', '-o', options, 'tmpfs', str(path)], capture_output=True,
                            text=True)
    if result.returncode != 0:
        pytest.skip(f'cannot mount a tmpfs here ({result.stderr.strip() or "mount failed"}); '
                    f'the full and read-only filesystem tests need root and mount permission')


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size, read_only=False, at=None) -> a fresh tmpfs directory (at `at`, else a new one
    under tmp_path); unmounted at the end."""
    mounted = []

    def mount(size, read_only=False, at=None):
        path = at or tmp_path / f'mnt{len(mounted)}'
        _mount_tmpfs(path, f'size={size}' + (',ro' if read_only else ''))
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        # Lazy: detached even while a file a failed writer left open keeps it busy.
        subprocess.run(['umount', '-l', str(path)], check=False)


def remount(path, options):
    subprocess.run(['mount', '-o', f'remount,{options}', str(path)], check=True)
