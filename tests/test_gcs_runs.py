"""gs:// workdirs end to end against a Cloud Storage server (the session's gcs_server: fake-gcs-server
on 127.0.0.1), through the real code paths: the trainer runs with the gs:// extra's python, its
files go through gcsfs, its lease through google-cloud-storage, its checkpoints through orbax and
tensorstore. The tests read and damage the bucket through the server's JSON API."""

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import GCS_BUCKET, REPO, gcloud_environment
from test_lifecycle import by_step

pytestmark = pytest.mark.slow   # CPU training runs in subprocesses

# 12 steps, a checkpoint every 3, an evaluation every 6, a log line every step.
RUN_FLAGS = ['--config=configs/baseline.py:runlocal', '--config.train.total_steps=12',
             '--config.checkpoint.every_steps=3', '--config.train.eval_every_steps=6',
             '--config.train.log_every_steps=1']
STUDY = f'gs://{GCS_BUCKET}/study'


class Bucket:
    """The session's bucket through the server's JSON API (urllib: nothing of the run's clients)."""

    def __init__(self, server):
        self.server = server
        self._open = urllib.request.build_opener(urllib.request.ProxyHandler({})).open

    def _url(self, obj='', upload=False, **query):
        base = f'{self.server.url}/{"upload/" if upload else ""}storage/v1/b/{GCS_BUCKET}/o'
        if obj:
            base += '/' + urllib.parse.quote(obj, safe='')
        return base + ('?' + urllib.parse.urlencode(query) if query else '')

    def objects(self, prefix):
        """{name: (size, generation)} of every object under `prefix`."""
        found, token = {}, None
        while True:
            query = {'prefix': prefix, **({'pageToken': token} if token else {})}
            with self._open(self._url(**query), timeout=30) as reply:
                page = json.load(reply)
            found.update({o['name']: (int(o['size']), int(o['generation'])) for o in page.get('items', [])})
            token = page.get('nextPageToken')
            if not token:
                return found

    def exists(self, name):
        try:
            self._open(self._url(name), timeout=30).close()
            return True
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return False
            raise

    def read(self, name):
        with self._open(self._url(name, alt='media'), timeout=30) as reply:
            return reply.read()

    def write(self, name, data):
        request = urllib.request.Request(self._url(upload=True, uploadType='media', name=name), data=data,
                                         method='POST', headers={'Content-Type': 'application/octet-stream'})
        self._open(request, timeout=30).close()

    def delete(self, name):
        self._open(urllib.request.Request(self._url(name), method='DELETE'), timeout=30).close()


@pytest.fixture(scope='session')
def gcs_bucket(gcs_server):
    return Bucket(gcs_server)


def run_env(server, tmp_path_factory):
    return dict(os.environ, **server.environment(), PJRT_DEVICE='CPU', CPU_NUM_DEVICES='8',
                TRM_SPMD_DATA=str(tmp_path_factory.getbasetemp() / 'datasets'))


def start(gcs_python, env, workdir, *extra):
    return subprocess.Popen([gcs_python, '-m', 'trm_spmd.main', *RUN_FLAGS, f'--workdir={workdir}', *extra],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process, timeout=600):
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


# tensorstore's notice that it uses the rehearsal's dummy token (trm_spmd.gcs_server): the one line a
# run against the server prints on stderr besides its own.
TOKEN_NOTICE = re.compile(r'^I\d{4} [\d:.]+ +\d+ google_auth_provider\.cc:\d+\] Using GOOGLE_AUTH_TOKEN_FOR_TESTING$')


def stderr_lines(err):
    return [line for line in err.splitlines() if not TOKEN_NOTICE.match(line)]


def the_error_line(err):
    """The one `error:` line of a failed run, which prints nothing else on stderr."""
    lines = stderr_lines(err)
    assert len(lines) == 1 and lines[0].startswith('error: '), err[-4000:]
    return lines[0]


def summary(gcs_bucket, prefix):
    """Objects under a workdir by what they are, for the rehearsal's record: {'checkpoints/6': 14, ...}."""
    counts = {}
    for name in gcs_bucket.objects(prefix + '/'):
        parts = name[len(prefix) + 1:].split('/')
        key = '/'.join(parts[:2]) if parts[0].startswith('checkpoints') else parts[0]
        counts[key] = counts.get(key, 0) + 1
    return counts


def wait_for(process, predicate, timeout, what):
    """Returns once predicate() holds; fails with the process's output when it ends first or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if predicate():
            return
        time.sleep(0.2)
    if process.poll() is None:
        process.kill()
    out, err = process.communicate()
    raise AssertionError(f'{what} did not come (exit {process.returncode}):\n{out[-3000:]}\n{err[-3000:]}')


def committed_steps(gcs_bucket, directory):
    """Steps of DIR (checkpoints/ or checkpoints_best/) that orbax committed on the bucket."""
    names = gcs_bucket.objects(directory + '/')
    return sorted(int(n[len(directory) + 1:].split('/')[0]) for n in names
                  if n.count('/') == directory.count('/') + 2 and n.endswith('/commit_success.txt'))


def largest_array_file(gcs_bucket, step):
    """The largest of a checkpoint step's tensorstore data files (the one the arrays are in)."""
    files = {n: size for n, (size, _) in gcs_bucket.objects(step + 'state/').items() if '/d/' in n}
    return max(files, key=files.get)


def metrics_lines(gcs_bucket, workdir):
    return [json.loads(line) for line in gcs_bucket.read(f'{workdir}/metrics.jsonl').decode().splitlines()]


def event_scalars(data):
    """{(tag, step): value} of a TensorBoard event file's scalars (TFRecord framing, Event protos)."""
    from tensorboardX.proto.event_pb2 import Event
    scalars, offset = {}, 0
    while offset < len(data):
        length, = struct.unpack('<Q', data[offset:offset + 8])
        event = Event.FromString(data[offset + 12:offset + 12 + length])
        offset += 12 + length + 4
        for value in event.summary.value:
            scalars[value.tag, event.step] = value.simple_value
    return scalars


FINAL_STATES = '''
import json, sys
import numpy as np
from trm_spmd.checkpoint import CheckpointReader

def flatten(tree, prefix=''):
    out = {}
    for key, value in tree.items():
        out.update(flatten(value, f'{prefix}{key}/') if isinstance(value, dict) else {prefix + key: np.asarray(value)})
    return out

def final(workdir):
    reader = CheckpointReader(workdir)
    try:
        step = reader.latest_step()
        tree, meta = reader.restore(step)
        return step, meta, flatten(tree), reader.latest.all_steps()
    finally:
        reader.close()

(step_a, meta_a, a, _), (step_b, meta_b, b, steps_b) = final(sys.argv[1]), final(sys.argv[2])
print(json.dumps({'steps': [step_a, step_b], 'loaders_equal': meta_a['loader'] == meta_b['loader'],
                  'keys_equal': sorted(a) == sorted(b), 'arrays': len(a), 'steps_listed': list(steps_b),
                  'differ': [k for k in a if k in b and not np.array_equal(a[k], b[k])]}))
'''


def compare_final_states(gcs_python, env, workdir_a, workdir_b):
    result = subprocess.run([gcs_python, '-c', FINAL_STATES, workdir_a, workdir_b], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope='session')
def reference_run(gcs_python, gcs_server, gcs_bucket, tmp_path_factory):
    """An uninterrupted run in gs://trm-test/study/ref -> (workdir, exit code, stdout, stderr)."""
    workdir = f'{STUDY}/ref'
    code, out, err = finish(start(gcs_python, run_env(gcs_server, tmp_path_factory), workdir))
    return workdir, code, out, err


def test_a_run_on_a_bucket_keeps_everything_there(reference_run, gcs_bucket):
    workdir, code, out, err = reference_run
    assert code == 0, err[-4000:]
    prefix = workdir[len(f'gs://{GCS_BUCKET}/'):]
    run = json.loads(gcs_bucket.read(f'{prefix}/run.json'))
    assert run['status'] == 'done' and run['total_steps'] == 12
    assert json.loads(gcs_bucket.read(f'{prefix}/config.json'))['train']['total_steps'] == 12
    train, evals = by_step(metrics_lines(gcs_bucket, prefix))
    assert sorted(train) == list(range(1, 13)) and sorted(evals) == [6, 12]
    # orbax through tensorstore: the newest 3 steps and the best one, each committed.
    assert committed_steps(gcs_bucket, f'{prefix}/checkpoints') == [6, 9, 12]
    assert len(committed_steps(gcs_bucket, f'{prefix}/checkpoints_best')) == 1
    assert not gcs_bucket.exists(f'{prefix}/lease.json')   # released at the end
    (events,) = [n for n in gcs_bucket.objects(f'{prefix}/tensorboard/')]
    scalars = event_scalars(gcs_bucket.read(events))
    for step, record in train.items():
        assert scalars['train/loss', step] == pytest.approx(record['train/loss'], rel=1e-6)
    assert scalars['eval/exact_accuracy', 12] == pytest.approx(evals[12]['eval/exact_accuracy'])
    assert f'checkpoints: {workdir}/checkpoints' in out
    assert stderr_lines(err) == [], err[-4000:]


def test_kill_second_run_stale_lease_damage_and_outage_then_an_exact_resume(
        reference_run, gcs_python, gcs_server, gcs_bucket, tmp_path_factory):
    """One run through everything a pod's bucket can do to it, ending bit-identical to the
    uninterrupted reference run."""
    assert reference_run[1] == 0, reference_run[3][-3000:]
    env = run_env(gcs_server, tmp_path_factory)
    workdir = f'{STUDY}/run'
    prefix = workdir[len(f'gs://{GCS_BUCKET}/'):]
    lease_name = f'{prefix}/lease.json'

    # A second run on a workdir a live run holds is refused in one line; it writes nothing.
    first = start(gcs_python, env, workdir)
    wait_for(first, lambda: gcs_bucket.exists(f'{prefix}/checkpoints/3/commit_success.txt'), 300, 'checkpoint 3')
    first.send_signal(signal.SIGSTOP)   # holds its lease, changes nothing while the second run starts
    time.sleep(1)
    before = gcs_bucket.objects(prefix)
    record = [('second run', summary(gcs_bucket, prefix))]
    code, _, err = finish(start(gcs_python, env, workdir))
    assert code == 2
    line = the_error_line(err)
    record[-1] += (code, line, summary(gcs_bucket, prefix))
    assert f'workdir {workdir} is in use by another run' in line and f'pid {first.pid},' in line
    assert gcs_bucket.objects(prefix) == before
    assert json.loads(gcs_bucket.read(lease_name))['pid'] == first.pid

    # kill -9 mid-run, once its second checkpoint and its best copy are committed.
    first.send_signal(signal.SIGCONT)
    wait_for(first, lambda: gcs_bucket.exists(f'{prefix}/checkpoints_best/6/commit_success.txt'), 300, 'checkpoint 6')
    first.send_signal(signal.SIGKILL)
    first.wait()

    # The newest complete checkpoint damaged (its newest-K copy truncated, its best copy missing an
    # object); a step written but never committed; the lease left by a run on another host, stale.
    newest = committed_steps(gcs_bucket, f'{prefix}/checkpoints')[-1]
    steps = f'{prefix}/checkpoints/{newest}/'
    arrays = largest_array_file(gcs_bucket, steps)
    gcs_bucket.write(arrays, gcs_bucket.read(arrays)[:gcs_bucket.objects(arrays)[arrays][0] // 2])
    best_copy = f'{prefix}/checkpoints_best/{newest}/'
    if gcs_bucket.objects(best_copy):
        gcs_bucket.delete(largest_array_file(gcs_bucket, best_copy))
    for name in gcs_bucket.objects(steps):
        if name != steps + 'commit_success.txt':
            gcs_bucket.write(name.replace(steps, f'{prefix}/checkpoints/11/'), gcs_bucket.read(name))
    good = [s for s in committed_steps(gcs_bucket, f'{prefix}/checkpoints')
            + committed_steps(gcs_bucket, f'{prefix}/checkpoints_best') if s < newest]
    now = time.time()
    gcs_bucket.write(lease_name, json.dumps({
        'host': 'worker-elsewhere', 'pid': 4242, 'started': now - 900, 'heartbeat': now - 600, 'config_hash': '',
        'boot_id': 'another-machine', 'pid_namespace': 1, 'token': 'f' * 32}).encode())

    # Without the flag the stale lease is refused, and nothing changes.
    before = gcs_bucket.objects(prefix)
    record.append(('stale lease, no flag', summary(gcs_bucket, prefix)))
    code, _, err = finish(start(gcs_python, env, workdir))
    assert code == 2
    line = the_error_line(err)
    record[-1] += (code, line, summary(gcs_bucket, prefix))
    assert 'host worker-elsewhere, pid 4242' in line and 'whose lease is stale' in line
    assert '--takeover_stale_lease' in line
    assert gcs_bucket.objects(prefix) == before

    # With it the run takes the workdir over, sets the damaged step aside and resumes from the one
    # before it (never from the uncommitted step); then the server stops under it.
    record.append(('takeover, damage, outage', summary(gcs_bucket, prefix)))
    resumed = start(gcs_python, env, workdir, '--takeover_stale_lease')
    out = ''
    for line in resumed.stdout:
        out += line
        if line.startswith('resuming from step'):
            break
    resumed.send_signal(signal.SIGSTOP)   # between its restore and its next write
    gcs_server.stop()
    stopped = time.time()
    resumed.send_signal(signal.SIGCONT)
    try:
        code, rest, err = finish(resumed, timeout=600)
        waited = time.time() - stopped
    finally:
        gcs_server.start()
    out += rest
    assert code == 2, out[-3000:] + err[-4000:]
    line = the_error_line(err)
    record[-1] += (code, line + ' | ' + ' | '.join(o for o in out.splitlines() if not o.startswith('step ')),
                   summary(gcs_bucket, prefix))
    assert line.startswith(f'error: cannot reach the bucket gs://{GCS_BUCKET} to ') and 'rerun the same command' in line
    assert 'took over the stale lease of ' + workdir + ' from host worker-elsewhere, pid 4242' in out
    assert f'resuming from step {max(good)} ' in out
    moved = [o for o in out.splitlines() if ' is unreadable: ' in o]
    assert moved and all('moved to ' + workdir + '/checkpoints_damaged/' in o for o in moved), out[-3000:]
    assert f'checkpoint {workdir}/checkpoints/{newest} is unreadable: ' in out
    damaged = gcs_bucket.objects(f'{prefix}/checkpoints_damaged/')
    records = [json.loads(gcs_bucket.read(n)) for n in damaged if n.endswith('/DAMAGED.json')]
    assert {r['step'] for r in records} == {newest} and len(records) == len(moved)
    assert max(good) in committed_steps(gcs_bucket, f'{prefix}/checkpoints')   # nothing good lost

    # With the server back, the same command resumes (the lease of the run that stopped is its
    # own machine's dead process: taken at once) and ends exactly like the uninterrupted run.
    record.append(('rerun', summary(gcs_bucket, prefix)))
    code, out, err = finish(start(gcs_python, env, workdir))
    record[-1] += (code, ' | '.join(o for o in out.splitlines() if 'resuming' in o or 'took over' in o),
                   summary(gcs_bucket, prefix))
    assert code == 0, err[-4000:]
    assert f'resuming from step {max(good)} ' in out
    assert stderr_lines(err) == [], err[-4000:]
    states = compare_final_states(gcs_python, env, reference_run[0], workdir)
    assert states['steps'] == [12, 12] and states['loaders_equal'] and states['keys_equal']
    assert states['arrays'] > 0 and states['differ'] == [] and 11 not in states['steps_listed']
    reference_train, _ = by_step(metrics_lines(gcs_bucket, reference_run[0][len(f'gs://{GCS_BUCKET}/'):]))
    train, _ = by_step(metrics_lines(gcs_bucket, prefix))
    assert [train[s]['train/loss'] for s in range(1, 13)] == [reference_train[s]['train/loss'] for s in range(1, 13)]
    assert json.loads(gcs_bucket.read(f'{prefix}/run.json'))['status'] == 'done'
    for case, before, code, line, after in record:   # shown with -s: the rehearsal, case by case
        print(f'{case}: exit {code}; {line}\n  before {before}\n  after  {after}')
    print(f'outage: the run stopped {waited:.0f} s after the server')


def test_the_analysis_reads_and_writes_a_study_on_the_bucket(reference_run, gcs_python, gcs_server, gcs_bucket,
                                                              tmp_path_factory, tmp_path):
    assert reference_run[1] == 0, reference_run[3][-3000:]
    env = run_env(gcs_server, tmp_path_factory)

    def analysis(*args):
        result = subprocess.run([gcs_python, '-m', 'trm_spmd.analysis', *args], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    status = analysis('status', STUDY)
    assert re.search(r'^\| ref \| baseline \|.*\| done +\| 12/12 \|', status, re.M), status
    table = analysis('compare', f'{STUDY}/*', f'--out={STUDY}/results')
    assert 'ref' in table
    assert gcs_bucket.read('study/results/compare.md').decode() == table
    assert gcs_bucket.read('study/results/compare.csv').decode().count('\n') >= 2
    plotted = analysis('plot', STUDY, f'--out={STUDY}/plots')
    pngs = [n for n in gcs_bucket.objects('study/plots/') if n.endswith('.png')]
    assert pngs and all(gcs_bucket.read(n).startswith(b'\x89PNG') for n in pngs), plotted


def test_the_queue_reads_a_run_status_on_the_bucket_with_gcloud(reference_run, gcs_python, gcs_server, tmp_path):
    """launch/run_status.sh, which the queue runner and the launcher's remote commands use to skip
    finished runs, reads run.json with `gcloud storage cat` (even under a PYTHONPATH that would
    break gcloud's own Python: the gs:// extra's)."""
    if not shutil.which('gcloud'):
        pytest.skip('gcloud is not installed: launch/run_status.sh reads gs:// through it')
    assert reference_run[1] == 0, reference_run[3][-3000:]
    env = dict(gcloud_environment(tmp_path), **gcs_server.environment(),
               PYTHONPATH=os.path.join(os.path.dirname(gcs_python), 'site'))

    def status(workdir):
        result = subprocess.run(['bash', 'launch/run_status.sh', workdir], cwd=REPO, env=env, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    assert status(reference_run[0]) == 'done'
    assert status(reference_run[0] + '/') == 'done'
    assert status(f'{STUDY}/never-ran') == ''
