"""The Cloud Storage server for rehearsals (trm_spmd.gcs_server) and what the lease needs of
Cloud Storage, against it: generation preconditions through google-cloud-storage (lease.GcsStore).
The server comes from the gs:// extra (the gcs_python fixture installs it as users do)."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from trm_spmd import bucket, fs

from conftest import GCS_BUCKET, REPO

def answers(url):
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f'{url}/storage/v1/b', timeout=2):
            return True
    except OSError:
        return False


def gone_within(url, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not answers(url):
            return True
        time.sleep(0.1)
    return False


def listens_only_on_loopback(port):
    """True when the port answers on 127.0.0.1 and no other address of this machine."""
    addresses = {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    for address in addresses - {'127.0.0.1'}:
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex((address, port)) == 0:
                return False
    return True


SERVE = '''
import sys, time
from trm_spmd.gcs_server import LocalGcsServer
server = LocalGcsServer(sys.argv[1], lifetime_s=int(sys.argv[2])).start()
print(server.url, flush=True)
time.sleep(600)
'''


def serve_in_child(gcs_python, root, lifetime_s=600):
    child = subprocess.Popen([gcs_python, '-c', SERVE, str(root), str(lifetime_s)], cwd=REPO,
                             stdout=subprocess.PIPE, text=True)
    url = child.stdout.readline().strip()
    assert url.startswith('http://127.0.0.1:') and answers(url)
    return child, url


@pytest.mark.slow   # a python with the gs:// extra
def test_the_server_ends_with_the_process_that_started_it_even_killed(gcs_python, tmp_path):
    child, url = serve_in_child(gcs_python, tmp_path / 'objects')
    assert listens_only_on_loopback(int(url.rsplit(':', 1)[1]))
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert gone_within(url, 10)


@pytest.mark.slow   # a python with the gs:// extra
def test_the_server_ends_after_its_lifetime(gcs_python, tmp_path):
    child, url = serve_in_child(gcs_python, tmp_path / 'objects', lifetime_s=2)
    try:
        assert gone_within(url, 15)
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow   # a python with the gs:// extra
def test_the_command_runs_against_the_server_which_then_stops(gcs_python, tmp_path):
    probe = ('import os, fsspec; '
             'print(os.environ["STORAGE_EMULATOR_HOST"], os.environ["TENSORSTORE_GCS_HTTP_URL"]); '
             'fsspec.filesystem("gs").pipe("gs://rehearsal/hello.txt", b"hi"); '
             'print(fsspec.filesystem("gs").cat("gs://rehearsal/hello.txt").decode())')
    result = subprocess.run([gcs_python, '-m', 'trm_spmd.gcs_server', '--bucket=rehearsal', f'--root={tmp_path / "o"}',
                             '--', gcs_python, '-c', probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    emulator, tensorstore_url, content = result.stdout.split()
    assert emulator == tensorstore_url and emulator.startswith('http://127.0.0.1:') and content == 'hi'
    assert not answers(emulator)
    assert (tmp_path / 'o' / 'rehearsal' / 'hello.txt').read_bytes() == b'hi'   # kept for the next rehearsal
    failed = subprocess.run([gcs_python, '-m', 'trm_spmd.gcs_server', '--bucket=rehearsal', f'--root={tmp_path / "o"}',
                             '--', gcs_python, '-c', 'raise SystemExit(3)'], cwd=REPO, capture_output=True, timeout=120)
    assert failed.returncode == 3


@pytest.mark.slow   # a python with the gs:// extra
def test_a_bad_bucket_name_is_one_line(gcs_python, tmp_path):
    result = subprocess.run([gcs_python, '-m', 'trm_spmd.gcs_server', '--bucket=b', f'--root={tmp_path / "o"}',
                             '--', 'true'], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith('error: cannot create '
                                                                                        'bucket b: ')
    assert 'Traceback' not in result.stderr


STORE = '''
import json, sys
from trm_spmd.lease import GcsStore
store, other = GcsStore(sys.argv[1]), GcsStore(sys.argv[1])
first = store.create_if_absent(b'{"holder": 1}')
out = {
    'first': first,
    'second_create': other.create_if_absent(b'{"holder": 2}'),
    'read': [store.read()[0].decode(), store.read()[1]],
    'stale_replace': other.replace_if_generation(b'{"holder": 2}', first + 1),
}
out['replace'] = store.replace_if_generation(b'{"holder": 3}', first)
out['old_generation_replace'] = other.replace_if_generation(b'{"holder": 2}', first)
out['after'] = [store.read()[0].decode(), store.read()[1]]
out['deleted'] = store.delete_if_generation(out['replace'])
out['gone'] = store.read()
out['replace_missing'] = store.replace_if_generation(b'{}', out['replace'])
print(json.dumps(out))
'''


@pytest.mark.slow   # a python with the gs:// extra
def test_the_lease_object_honours_generation_preconditions(gcs_python, gcs_server):
    result = subprocess.run([gcs_python, '-c', STORE, f'gs://{GCS_BUCKET}/preconditions/lease.json'], cwd=REPO,
                            env=dict(os.environ, **gcs_server.environment()), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)
    assert isinstance(out['first'], int) and out['second_create'] is None          # created only if absent
    assert out['read'] == ['{"holder": 1}', out['first']]
    assert out['stale_replace'] is None                                            # a generation it is not at
    assert isinstance(out['replace'], int) and out['replace'] != out['first']
    assert out['old_generation_replace'] is None                                   # the one it was at before
    assert out['after'] == ['{"holder": 3}', out['replace']]
    assert out['deleted'] is True and out['gone'] is None and out['replace_missing'] is None


def test_an_unreachable_bucket_is_recognised_in_each_clients_words():
    class HttpError(Exception):   # gcsfs's, by name: its package is an optional extra
        def __init__(self, code):
            super().__init__(f'{code}')
            self.code = code

    refused = ConnectionRefusedError(111, 'Connection refused')
    wrapped = RuntimeError('upload failed')
    wrapped.__cause__ = refused
    for error in (refused, wrapped, TimeoutError(), HttpError(503), HttpError(429),
                  ValueError('UNAVAILABLE: CURL error Could not connect to server'),
                  ValueError('ABORTED: All 32 retry attempts failed: CURL error Could not connect to server')):
        assert bucket.unreachable(error), error
    for error in (HttpError(404), HttpError(403), FileNotFoundError('gs://b/x'), ValueError('DATA_LOSS: bad'),
                  ValueError('ABORTED: generation mismatch')):
        assert not bucket.unreachable(error), error
    assert bucket.name('gs://trm-test/study/run/metrics.jsonl') == 'gs://trm-test'
    try:
        line = str(fs.storage_error('gs://b-0/x/metrics.jsonl', 'write', refused))
        assert line.startswith('cannot reach the bucket gs://b-0 to write gs://b-0/x/metrics.jsonl '
                               '(ConnectionRefusedError: ')
        with pytest.raises(fs.StorageError, match='^cannot reach the bucket gs://b-0 to write'):   # at once, after
            with fs.user_facing('gs://b-0/x/run.json', 'write'):
                raise AssertionError('not attempted once the bucket is known unreachable')
    finally:
        fs._unreachable.pop('gs://b-0', None)
    assert fs.storage_error('runs/x', 'write', refused) is None    # a local path: not a bucket's failure
