"""launch/tpu.py against a stand-in `gcloud` that records its arguments.

The remote commands are also executed here with bash, against a fake worker home
(a checkout whose setup.sh names a fake python that records how it was called, with the
real launch/run_status.sh), and so is the real launch/queue_runner.sh, so quoting, ~
expansion, skipping finished runs, stopping after a stopped one and exit codes are
checked for real.
"""

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPU_PY = os.path.join(REPO, 'launch', 'tpu.py')
QUEUE_RUNNER = os.path.join(REPO, 'launch', 'queue_runner.sh')
RUN_STATUS = os.path.join(REPO, 'launch', 'run_status.sh')
SUBCOMMANDS = ['create', 'setup', 'data', 'run', 'sweep', 'status', 'logs', 'stop', 'delete']
GCLOUD_PREFIX = ['compute', 'tpus', 'tpu-vm']

_spec = importlib.util.spec_from_file_location('trm_launch_tpu', TPU_PY)
tpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tpu)
from tpu_vm import overrides, remote  # noqa: E402 - the package launch/tpu.py runs, importable once it is loaded

FAKE_GCLOUD = '''#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ['FAKE_GCLOUD_RECORD'], 'a') as f:
    f.write(json.dumps(args) + '\\n')
line = ' '.join(args)
for key, reply in json.loads(os.environ.get('FAKE_GCLOUD_REPLIES', '{{}}')).items():
    if key in line:
        sys.stdout.write(reply)
for key, code in json.loads(os.environ.get('FAKE_GCLOUD_EXIT', '{{}}')).items():
    if key in line:
        sys.exit(code)
'''

CONFIG_FILE = '''from trm_spmd.config import default_config


def get_config(arg=None):
    c = default_config()
    c.name = {name!r}
    c.variant = arg or ''
    return c


def sweep():
    return {runs!r}
'''

MIXED_SWEEPS = '''def mixed():
    return ['configs/abl.py:ema_off', 'configs/fam.py:t1_n2']


def twice():
    return ['configs/fam.py:t1_n2', 'configs/fam.py:t1_n2']


def stopping():
    return ['configs/fam.py:t1_n2', 'configs/fam.py:t2_stop', 'configs/fam.py:t3_n6']
'''

FAM_RUNS = ['t3_n6', 't2_fail', 't1_n2']


class Env:
    """A workspace with config files, a stand-in gcloud first on PATH, and a fake HOME."""

    def __init__(self, tmp_path, monkeypatch):
        self.root = tmp_path
        self.home = tmp_path / 'home'
        self.record = tmp_path / 'gcloud_calls.jsonl'
        self.train_log = tmp_path / 'trained.txt'
        self.monkeypatch = monkeypatch
        bin_dir = tmp_path / 'bin'
        bin_dir.mkdir()
        gcloud = bin_dir / 'gcloud'
        gcloud.write_text(FAKE_GCLOUD.format(python=sys.executable))
        gcloud.chmod(0o755)
        work = tmp_path / 'work'
        (work / 'configs').mkdir(parents=True)
        (work / 'configs' / 'fam.py').write_text(CONFIG_FILE.format(name='fam', runs=FAM_RUNS))
        (work / 'configs' / 'abl.py').write_text(CONFIG_FILE.format(name='abl', runs=['ema_off']))
        (work / 'configs' / 'sweeps.py').write_text(MIXED_SWEEPS)
        self.home.mkdir()
        monkeypatch.chdir(work)
        monkeypatch.setenv('HOME', str(self.home))
        monkeypatch.setenv('PATH', f'{bin_dir}{os.pathsep}{os.environ["PATH"]}')
        monkeypatch.setenv('FAKE_GCLOUD_RECORD', str(self.record))
        monkeypatch.setenv('TRM_TPU_NAME', 'trm')
        monkeypatch.setenv('TRM_TPU_ZONE', 'zone-a')
        monkeypatch.delenv('TRM_TPU_PROJECT', raising=False)
        monkeypatch.delenv('FAKE_GCLOUD_EXIT', raising=False)
        monkeypatch.delenv('FAKE_GCLOUD_REPLIES', raising=False)
        monkeypatch.delenv('FAKE_TRAIN_HOOK', raising=False)

    def reply(self, replies):
        self.monkeypatch.setenv('FAKE_GCLOUD_REPLIES', json.dumps(replies))

    def exit_on(self, codes):
        """gcloud exits with codes[KEY] when KEY is in its command line (remote exit status)."""
        self.monkeypatch.setenv('FAKE_GCLOUD_EXIT', json.dumps(codes))

    def calls(self):
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def reset(self):
        if self.record.exists():
            self.record.unlink()

    def fake_worker(self):
        """~/trm_spmd on a 'worker': setup.sh prints a fake python that records its arguments
        (shell-quoted, one call a line) and writes run.json into its workdir: "done", or
        "preempted" (exit 0, as after SIGTERM) for a config arg containing 'stop'; one
        containing 'fail' exits 3. $FAKE_TRAIN_HOOK, if set, runs first."""
        fake_py = self.root / 'fake_python'
        fake_py.write_text(f'''#!/usr/bin/env bash
printf '%q ' "PJRT_DEVICE=$PJRT_DEVICE" "$@" >> {self.train_log}; echo >> {self.train_log}
status=done
[ -z "$FAKE_TRAIN_HOOK" ] || eval "$FAKE_TRAIN_HOOK"
for a in "$@"; do
    case $a in
        --workdir=*) wd=${{a#--workdir=}} ;;
        --config=*fail*) echo "training failed" >&2; exit 3 ;;
        --config=*stop*) status=preempted ;;
    esac
done
mkdir -p "$wd" && printf '{{\n  "step": 4,\n  "status": "%s"\n}}\n' $status > "$wd/run.json"
echo "trained $wd"
''')
        fake_py.chmod(0o755)
        launch = self.home / 'trm_spmd' / 'launch'
        launch.mkdir(parents=True)
        (launch / 'setup.sh').write_text(f'echo "[setup] reusing env" >&2\necho {fake_py}\n')
        shutil.copy(RUN_STATUS, launch / 'run_status.sh')      # the real one, as setup ships it

    def run_remote(self, argv, command=None):
        """Execute a recorded ssh call's --command on the fake worker, as sshd would."""
        command = command or command_of(argv)
        env = dict(os.environ, HOME=str(self.home))
        return subprocess.run(['bash', '-c', command], env=env, capture_output=True, text=True, timeout=30)

    def run_queue(self, queue):
        """Put the staged queue file and the queue runner where scp puts them on a worker,
        then run the start command that sweep --queue sent, and wait for the runner."""
        staging = self.home / '.cache' / 'trm_spmd' / 'launch'
        queue_dir = self.home / 'trm_queue'
        queue_dir.mkdir(exist_ok=True)
        shutil.copy(staging / f'{queue}.queue', queue_dir)
        shutil.copy(QUEUE_RUNNER, queue_dir)
        start = next(argv for argv in self.calls() if 'nohup bash' in ' '.join(argv))
        # Backgrounded with nohup there; here in the foreground, so the test can read its log.
        self.run_remote(start, command=command_of(start).replace(' & echo', '; echo'))
        return (queue_dir / f'{queue}.log').read_text()

    def trained(self):
        """The fake trainer's argument lists, one per call."""
        return [shlex.split(line) for line in self.train_log.read_text().splitlines()] \
            if self.train_log.exists() else []


@pytest.fixture
def env(tmp_path, monkeypatch):
    return Env(tmp_path, monkeypatch)


def command_of(argv):
    return next(a for a in argv if a.startswith('--command=')).partition('=')[2]


def is_ssh_all(argv):
    return argv[:6] == GCLOUD_PREFIX + ['ssh', 'trm', '--zone=zone-a'] and '--worker=all' in argv


def error_lines(err):
    return [line for line in err.splitlines() if line.strip()]


# ---- run -------------------------------------------------------------------------------


def test_run_issues_one_command_on_all_workers(env):
    assert tpu.main(['run', '--config=configs/fam.py:t3_n6', '--workdir=gs://bkt/study/fam/t3_n6',
                     '--config.optim.lr=3e-4']) == 0
    check, start = env.calls()
    assert is_ssh_all(check) and 'pgrep' in command_of(check)
    assert is_ssh_all(start)
    command = command_of(start)
    assert 'PJRT_DEVICE=TPU' in command
    assert '-m trm_spmd.main --config=configs/fam.py:t3_n6 --config.optim.lr=3e-4' in command
    assert '--workdir=gs://bkt/study/fam/t3_n6' in command
    assert 'nohup' in command and '~/trm_logs/fam-t3_n6.log' in command


def test_run_refuses_when_training_runs(env, capfd):
    env.reply({'pgrep -af': 't1v-w-2: 4242 /venv/bin/python -m trm_spmd.main --config=configs/x.py\n'})
    assert tpu.main(['run', '--config=configs/fam.py:t3_n6', '--workdir=gs://bkt/r']) == 1
    err = error_lines(capfd.readouterr().err)
    assert len(err) == 1 and 'already running' in err[0] and '--force' in err[0] and 'stop' in err[0]
    assert len(env.calls()) == 1                      # the check only; nothing started

    env.reset()
    assert tpu.main(['run', '--config=configs/fam.py:t3_n6', '--workdir=gs://bkt/r', '--force']) == 0
    (start,) = env.calls()
    assert 'trm_spmd.main' in command_of(start)


def test_run_checks_config_path_and_overrides(env, capfd):
    assert tpu.main(['run', '--config=configs/nope.py:a', '--workdir=gs://b/r']) == 1
    assert tpu.main(['run', '--config=configs/fam.py:a', '--workdir=gs://b/r', 'optim.lr=3']) == 1
    assert tpu.main(['run', '--config=configs/fam.py:a', '--workdir=gs://b/r', '--config.optim.lrr=3']) == 1
    assert tpu.main(['sweep', '--sweep=configs/fam.py', '--study_root=gs://b/s', '--config.modle.H_cycles=2']) == 1
    err = error_lines(capfd.readouterr().err)
    assert len(err) == 4
    assert 'config file not found: configs/nope.py' in err[0]
    assert "unrecognized argument 'optim.lr=3'" in err[1] and '--config.KEY=VALUE' in err[1]
    assert "no key 'optim.lrr'; did you mean --config.optim.lr?" in err[2]
    assert "no key 'modle.H_cycles'; did you mean --config.model.H_cycles?" in err[3]
    assert env.calls() == []


def test_run_passes_overrides_on_in_order_after_the_config(env):
    assert tpu.main(['run', '--config.optim.lr=3e-4', '--config=configs/fam.py:t3_n6', '--workdir=gs://b/r',
                     '--config.model.H_cycles', '2', '--noconfig.ema.enabled', '--config.optim.lr=1e-3']) == 0
    command = command_of(env.calls()[-1])
    assert ('-m trm_spmd.main --config=configs/fam.py:t3_n6 --config.optim.lr=3e-4 --config.model.H_cycles=2 '
            '--noconfig.ema.enabled --config.optim.lr=1e-3 --workdir=gs://b/r') in command


def test_overrides_pass_through_unchecked_without_the_project_packages(env, monkeypatch):
    monkeypatch.setitem(sys.modules, 'trm_spmd.config', None)    # a workstation without ml_collections
    assert overrides.schema_keys() is None
    assert tpu.main(['run', '--config=configs/fam.py:t3_n6', '--workdir=gs://b/r', '--config.future.key=1']) == 0
    assert '--config=configs/fam.py:t3_n6 --config.future.key=1 ' in command_of(env.calls()[-1])


def test_overrides_only_on_run_and_sweep(env, capfd):
    with pytest.raises(SystemExit) as exit_info:
        tpu.main(['status', '--config.optim.lr=3e-4'])
    assert exit_info.value.code == 2
    assert 'unrecognized arguments: --config.optim.lr=3e-4' in capfd.readouterr().err
    assert env.calls() == []


def test_background_run_command_executes_on_a_worker(env, monkeypatch):
    monkeypatch.setattr(remote, 'START_CHECK_S', 0.5)   # the fake trainer ends at once
    env.fake_worker()
    workdir = env.root / 'runs' / 'a b'        # a space: the workdir must stay one argument
    assert tpu.main(['run', '--config=configs/fam.py:t3_n6', f'--workdir={workdir}',
                     '--config.optim.lr=3e-4', "--config.variant=it's a b", '--force']) == 0
    (start,) = env.calls()
    result = env.run_remote(start)
    assert result.returncode == 0, result.stderr
    assert 'started fam-t3_n6' in result.stdout
    for _ in range(100):                       # the trainer was detached: wait for it
        if (workdir / 'run.json').exists():
            break
        time.sleep(0.05)
    assert env.trained() == [['PJRT_DEVICE=TPU', '-m', 'trm_spmd.main', '--config=configs/fam.py:t3_n6',
                              '--config.optim.lr=3e-4', "--config.variant=it's a b", f'--workdir={workdir}']]
    log = env.home / 'trm_logs' / 'fam-t3_n6.log'
    for _ in range(100):
        if 'trained' in log.read_text():
            break
        time.sleep(0.05)
    assert f'trained {workdir}' in log.read_text()

    # A trainer that dies at start makes the start command fail and show the log's end.
    env.reset()
    assert tpu.main(['run', '--config=configs/fam.py:t2_fail', '--workdir=runs/y', '--force']) == 0
    result = env.run_remote(env.calls()[0])
    assert result.returncode == 1
    assert 'fam-t2_fail failed at start' in result.stdout and 'training failed' in result.stdout


def test_foreground_run_reports_the_trainers_exit_status(env):
    env.fake_worker()
    assert tpu.main(['run', '--config=configs/fam.py:t2_fail', '--workdir=runs/x', '--foreground',
                     '--force']) == 0
    (start,) = env.calls()
    assert 'nohup' not in command_of(start)                   # attached, not detached
    result = env.run_remote(start)
    assert result.returncode == 3                             # not tee's 0
    assert 'training failed' in (env.home / 'trm_logs' / 'fam-t2_fail.log').read_text()


# ---- sweep -----------------------------------------------------------------------------


def test_sweep_runs_every_entry_in_order_with_its_workdir(env):
    assert tpu.main(['sweep', '--sweep=configs/fam.py', '--study_root=gs://bkt/study/']) == 0
    check, *runs = env.calls()
    assert 'pgrep' in command_of(check)
    assert len(runs) == len(FAM_RUNS)
    for argv, arg in zip(runs, FAM_RUNS):
        assert is_ssh_all(argv)
        command = command_of(argv)
        assert f'--config=configs/fam.py:{arg} ' in command
        assert f'--workdir=gs://bkt/study/fam/{arg} ' in command
        assert 'PJRT_DEVICE=TPU' in command


def test_sweep_by_name_spans_config_files(env):
    assert tpu.main(['sweep', '--sweep=configs/sweeps.py:mixed', '--study_root=gs://bkt/s']) == 0
    runs = env.calls()[1:]
    assert [c.split('--workdir=')[1].split()[0] for c in map(command_of, runs)] == [
        'gs://bkt/s/abl/ema_off', 'gs://bkt/s/fam/t1_n2']
    assert '--config=configs/abl.py:ema_off ' in command_of(runs[0])


def test_sweep_goes_on_after_a_failed_run_and_reports_it(env, capfd):
    env.exit_on({'fam.py:t2_fail': 1})
    assert tpu.main(['sweep', '--sweep=configs/fam.py', '--study_root=gs://bkt/s']) == 1
    assert len(env.calls()) == 1 + len(FAM_RUNS)          # the run after the failure still ran
    err = error_lines(capfd.readouterr().err)
    assert err[-1].startswith('error: 1 of 3 runs failed: fam-t2_fail;')


def test_sweep_stops_when_a_run_was_stopped(env, capfd):
    env.exit_on({'fam.py:t2_fail': remote.STOPPED_EXIT})
    assert tpu.main(['sweep', '--sweep=configs/fam.py', '--study_root=gs://bkt/s']) == 1
    assert len(env.calls()) == 1 + 2                      # the third run was not started
    err = error_lines(capfd.readouterr().err)
    assert 'fam-t2_fail was stopped before the end' in err[-1] and 'rerun the same sweep command' in err[-1]


def test_stopped_run_exits_with_the_stop_code(env):
    env.fake_worker()
    assert tpu.main(['run', '--config=configs/fam.py:t4_stop', '--workdir=runs/s', '--foreground',
                     '--force']) == 0
    result = env.run_remote(env.calls()[0])
    assert result.returncode == remote.STOPPED_EXIT
    assert 'fam-t4_stop stopped before the end' in result.stdout


def test_sweep_rejects_two_runs_with_one_workdir(env, capfd):
    assert tpu.main(['sweep', '--sweep=configs/sweeps.py:twice', '--study_root=gs://bkt/s']) == 1
    err = error_lines(capfd.readouterr().err)
    assert len(err) == 1 and 'both map to' in err[0]
    assert env.calls() == []


def test_foreground_sweep_commands_skip_done_runs_and_fail_per_run(env):
    env.fake_worker()
    study = env.root / 'study'
    (study / 'fam' / 't3_n6').mkdir(parents=True)
    (study / 'fam' / 't3_n6' / 'run.json').write_text('{"status": "done"}')
    assert tpu.main(['sweep', '--sweep=configs/fam.py', f'--study_root={study}', '--force']) == 0
    results = [env.run_remote(argv) for argv in env.calls()]
    assert [r.returncode for r in results] == [0, 3, 0]
    assert 'fam-t3_n6 already done, skipped' in results[0].stdout
    assert [args[3] for args in env.trained()] == ['--config=configs/fam.py:t2_fail',
                                                   '--config=configs/fam.py:t1_n2']


def test_queue_runner_runs_entries_in_order_skipping_done_ones(env):
    env.fake_worker()
    study = env.root / 'study'
    (study / 'fam' / 't3_n6').mkdir(parents=True)
    (study / 'fam' / 't3_n6' / 'run.json').write_text('{"status": "done"}')
    assert tpu.main(['sweep', '--sweep=configs/fam.py', f'--study_root={study}', '--queue',
                     '--config.seed=7']) == 0
    check, mkdir, scp, start = env.calls()
    assert 'pgrep' in command_of(check) and 'mkdir -p ~/trm_queue' in command_of(mkdir)
    staging = env.home / '.cache' / 'trm_spmd' / 'launch'
    assert scp == GCLOUD_PREFIX + ['scp', str(staging / 'fam.queue'), QUEUE_RUNNER,
                                   'trm:trm_queue/', '--zone=zone-a', '--worker=all']
    assert is_ssh_all(start)
    assert 'nohup bash ~/trm_queue/queue_runner.sh ~/trm_queue/fam.queue' in command_of(start)

    out = env.run_queue('fam')
    train = ['PJRT_DEVICE=TPU', '-m', 'trm_spmd.main']
    assert env.trained() == [
        [*train, '--config=configs/fam.py:t2_fail', '--config.seed=7', f'--workdir={study}/fam/t2_fail'],
        [*train, '--config=configs/fam.py:t1_n2', '--config.seed=7', f'--workdir={study}/fam/t1_n2'],
    ]
    assert 'fam-t3_n6: already done, skipped' in out
    assert 'fam-t2_fail: FAILED (exit 3)' in out
    assert 'queue finished: 3 runs, 1 failed: fam-t2_fail' in out
    assert 'training failed' in (env.home / 'trm_logs' / 'fam-t2_fail.log').read_text()


def test_queue_runner_stops_after_a_stopped_run(env):
    env.fake_worker()
    assert tpu.main(['sweep', '--sweep=configs/sweeps.py:stopping', f'--study_root={env.root}/study',
                     '--queue', '--force']) == 0
    out = env.run_queue('sweeps-stopping')
    assert 'fam-t2_stop: stopped before the end; queue stopped' in out and 'queue finished' not in out
    assert [args[3] for args in env.trained()] == ['--config=configs/fam.py:t1_n2',
                                                   '--config=configs/fam.py:t2_stop']


def test_queue_runner_is_not_changed_by_a_new_copy_written_over_it(env, monkeypatch):
    # The next `sweep --queue` copies the runner over the running one; bash reads a script as
    # it goes, so this runner must not pick up the new text.
    env.fake_worker()
    monkeypatch.setenv('FAKE_TRAIN_HOOK', 'echo "echo overwritten; exit 9" > ~/trm_queue/queue_runner.sh')
    assert tpu.main(['sweep', '--sweep=configs/fam.py', f'--study_root={env.root}/study', '--queue',
                     '--force']) == 0
    out = env.run_queue('fam')
    assert 'overwritten' not in out and 'queue finished: 3 runs, 1 failed: fam-t2_fail' in out
    assert len(env.trained()) == 3


def test_queue_runner_needs_the_checkout(env):
    queue = env.root / 'q.queue'
    queue.write_text('r runs/r --config=configs/fam.py:a\n')
    result = subprocess.run(['bash', QUEUE_RUNNER, str(queue)], env=dict(os.environ, HOME=str(env.home)),
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert 'run launch/tpu.py setup first' in result.stdout


def test_done_check_reads_run_json_from_the_bucket(env):
    env.fake_worker()
    env.reply({'storage cat gs://bkt/s/fam/t3_n6/run.json': '{\n  "step": 8138,\n  "status": "done"\n}\n'})
    assert tpu.main(['sweep', '--sweep=configs/fam.py', '--study_root=gs://bkt/s', '--force']) == 0
    first, *_ = env.calls()
    assert 'already done, skipped' in env.run_remote(first).stdout

    assert tpu.main(['sweep', '--sweep=configs/fam.py', '--study_root=gs://bkt/s', '--force', '--queue']) == 0
    out = env.run_queue('fam')
    assert 'fam-t3_n6: already done, skipped' in out
    assert [args[3] for args in env.trained()] == ['--config=configs/fam.py:t2_fail',
                                                   '--config=configs/fam.py:t1_n2']


def run_status(env, workdir):
    result = subprocess.run(['bash', RUN_STATUS, str(workdir)], env=dict(os.environ, HOME=str(env.home)),
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_run_status_reads_what_the_trainer_wrote(env):
    workdir = env.root / 'run'
    assert run_status(env, workdir) == ''                      # not started: no run.json
    workdir.mkdir()
    info = {'config_file': 'configs/fam.py:t3_n6', 'backend': {'backend': 'xla', 'devices': 32},
            'status': 'preempted', 'message': 'SIGTERM "status": "done"'}
    (workdir / 'run.json').write_text(json.dumps(info, indent=2))   # as the training loop writes it
    assert run_status(env, workdir) == 'preempted'
    assert run_status(env, f'{workdir}/') == 'preempted'
    env.reply({'storage cat gs://bkt/r/run.json': json.dumps({'status': 'done'})})
    assert run_status(env, 'gs://bkt/r') == 'done'
    assert run_status(env, 'gs://bkt/other') == ''


# ---- create, setup, data -----------------------------------------------------------------


def test_create_passes_type_version_zone_and_preemptible(env):
    assert tpu.main(['create', '--accelerator_type=v4-64', '--runtime_version=tpu-ubuntu2204-base',
                     '--preemptible', '--project=proj']) == 0
    assert env.calls() == [GCLOUD_PREFIX + ['create', 'trm', '--zone=zone-a', '--project=proj',
                                            '--accelerator-type=v4-64', '--version=tpu-ubuntu2204-base',
                                            '--preemptible']]
    env.reset()
    assert tpu.main(['create', '--spot', '--network=net']) == 0
    assert env.calls()[0][-2:] == ['--spot', '--network=net']
    with pytest.raises(SystemExit) as exit_info:
        tpu.main(['create', '--spot', '--preemptible'])
    assert exit_info.value.code == 2


def test_setup_copy_ships_the_checkout_without_ignored_files(env):
    assert tpu.main(['setup', '--copy']) == 0
    scp, install = env.calls()
    tarball = env.home / '.cache' / 'trm_spmd' / 'launch' / 'trm_spmd-src.tar.gz'
    assert scp == GCLOUD_PREFIX + ['scp', str(tarball), 'trm:trm_spmd-src.tar.gz', '--zone=zone-a',
                                   '--worker=all']
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert 'launch/setup.sh' in names and 'launch/tpu.py' in names
    assert not [n for n in names if n.startswith('.git/') or '__pycache__' in n]
    assert is_ssh_all(install)
    assert 'tar -xzf ~/trm_spmd-src.tar.gz -C ~/trm_spmd' in command_of(install)
    assert 'cd ~/trm_spmd && PY=$(bash launch/setup.sh --tpu)' in command_of(install)
    assert 'pip install' not in command_of(install)   # setup.sh --tpu installs the pinned gs:// extra


def test_setup_from_git(env, capfd):
    assert tpu.main(['setup', '--repo_url=https://example.com/trm.git', '--branch=dev']) == 0
    (install,) = env.calls()
    command = command_of(install)
    assert 'git clone --quiet --branch dev https://example.com/trm.git ~/trm_spmd' in command
    assert 'pull --quiet --ff-only origin dev' in command
    assert 'cd ~/trm_spmd && PY=$(bash launch/setup.sh --tpu)' in command
    env.reset()
    assert tpu.main(['setup', '--copy', '--branch=dev']) == 1
    assert env.calls() == []


@pytest.mark.parametrize('named', [False, True])
def test_setup_sh_refuses_a_python_older_than_the_lock_needs(tmp_path, named):
    """A TPU VM's python3 is 3.10, which cannot install requirements.lock: setup.sh says so in one
    line (with the fix) rather than failing half-way through pip, whether the interpreter was found
    on PATH or named by TRM_SPMD_PYTHON."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    old = bin_dir / 'python3'
    old.write_text('#!/bin/sh\n[ "$1" = -V ] && { echo "Python 3.10.12"; exit 0; }\nexit 1\n')   # fails the version check
    old.chmod(0o755)
    for tool in ('dirname',):
        os.symlink(shutil.which(tool), bin_dir / tool)
    env = {'PATH': str(bin_dir), 'HOME': str(tmp_path)}
    if named:
        env['TRM_SPMD_PYTHON'] = 'python3'
    done = subprocess.run(['/bin/bash', os.path.join(REPO, 'launch', 'setup.sh')], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ''
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and '3.11 or 3.12' in lines[0], done.stderr
    assert ('TRM_SPMD_PYTHON=python3' in lines[0]) if named else ('Python 3.10.12' in lines[0] and 'apt-get' in lines[0])
    assert not (tmp_path / '.cache').exists()   # nothing created


def test_data_build_checks_that_workers_agree(env, capfd):
    same = ''.join(f'dataset {"a" * 64} t1v-w-{i}\n' for i in range(8))
    env.reply({'sha256sum': same})
    assert tpu.main(['data', '--build_args=--generate=50 --seed=1', '--dest=data/gen']) == 0
    build, fingerprint = env.calls()
    assert is_ssh_all(build) and is_ssh_all(fingerprint)
    assert '-m trm_spmd.build sudoku --generate=50 --seed=1 --output_dir=data/gen' in command_of(build)
    assert '8 workers hold the same dataset in ~/trm_spmd/data/gen' in capfd.readouterr().err
    assert 'if [ -e data/gen ]; then' in command_of(build)          # an existing dataset is kept
    env.reset()
    assert tpu.main(['data', '--build_args=--generate=50', '--rebuild', '--dest=data/gen']) == 0
    assert 'cd ~/trm_spmd && rm -rf data/gen && PY=' in command_of(env.calls()[0])
    env.reset()
    assert tpu.main(['data', '--task=maze', '--build_args=--generate --size=30', '--dest=data/maze']) == 0
    assert '-m trm_spmd.build maze --generate --size=30 --output_dir=data/maze' in command_of(env.calls()[0])
    capfd.readouterr()

    env.reply({'sha256sum': same + f'dataset {"b" * 64} t1v-w-8\n'})
    assert tpu.main(['data', '--build_args=--generate=50']) == 1
    err = error_lines(capfd.readouterr().err)
    assert len(err) == 1 and 'different datasets' in err[0] and 't1v-w-8' in err[0]


def test_data_copy_from_bucket(env):
    env.reply({'sha256sum': f'dataset {"c" * 64} t1v-w-0\n'})
    assert tpu.main(['data', '--copy_from=gs://bkt/sudoku', '--dest=data/sx']) == 0
    assert 'gcloud storage rsync --recursive gs://bkt/sudoku data/sx' in command_of(env.calls()[0])
    assert tpu.main(['data', '--build_args=--output_dir=x']) == 1


# ---- status, logs, stop, delete ------------------------------------------------------------


def test_stop_sends_sigterm_on_all_workers(env):
    assert tpu.main(['stop']) == 0
    (stop,) = env.calls()
    assert is_ssh_all(stop)
    command = command_of(stop)
    queue_kill = command.index('pkill -TERM -f "[t]rm_queue/')
    train_kill = command.index('pkill -TERM -f "[t]rm_spmd[.]main"')
    assert queue_kill < train_kill          # the queue must not start the next run


def test_status_and_logs(env):
    assert tpu.main(['status', '--study_root=gs://bkt/study']) == 0
    workers, study = env.calls()
    assert is_ssh_all(workers) and 'pgrep -af' in command_of(workers)
    assert '--worker=0' in study and '-m trm_spmd.analysis status gs://bkt/study' in command_of(study)
    env.reset()
    assert tpu.main(['logs', '--worker=3', '--lines=10', '--follow', '--run=configs/fam.py:t3_n6']) == 0
    (logs,) = env.calls()
    assert '--worker=3' in logs
    assert 'log=~/trm_logs/fam-t3_n6.log' in command_of(logs) and 'tail -n 10 -F' in command_of(logs)


def test_logs_command_prints_the_newest_log(env):
    (env.home / 'trm_logs').mkdir()
    (env.home / 'trm_logs' / 'old.log').write_text('old\n')
    time.sleep(0.01)
    (env.home / 'trm_logs' / 'new.log').write_text('step 1\nstep 2\nstep 3\n')
    os.utime(env.home / 'trm_logs' / 'old.log', (0, 0))
    assert tpu.main(['logs', '--lines=2']) == 0
    result = env.run_remote(env.calls()[0])
    assert result.stdout.splitlines()[1:] == ['step 2', 'step 3']


def test_delete_asks_first(env, monkeypatch):
    monkeypatch.setattr('builtins.input', lambda prompt: 'n')
    assert tpu.main(['delete']) == 0
    assert env.calls() == []
    assert tpu.main(['delete', '--yes']) == 0
    assert env.calls() == [GCLOUD_PREFIX + ['delete', 'trm', '--zone=zone-a', '--quiet']]


# ---- every subcommand: --dry_run, --help, errors -----------------------------------------------

DRY_RUNS = {
    'create': ['create', '--spot'],
    'setup': ['setup', '--copy'],
    'data': ['data', '--build_args=--generate=50'],
    'run': ['run', '--config=configs/fam.py:t3_n6', '--workdir=gs://bkt/r', '--config.seed=1'],
    'sweep': ['sweep', '--sweep=configs/fam.py', '--study_root=gs://bkt/s', '--queue'],
    'status': ['status', '--study_root=gs://bkt/s'],
    'logs': ['logs', '--worker=all'],
    'stop': ['stop'],
    'delete': ['delete'],
}


@pytest.mark.parametrize('name', SUBCOMMANDS)
def test_dry_run_prints_the_commands_and_runs_nothing(env, capfd, name):
    assert tpu.main(DRY_RUNS[name] + ['--dry_run']) == 0
    assert env.calls() == []
    assert not (env.home / '.cache').exists()          # no local file written either
    lines = [line for line in capfd.readouterr().out.splitlines() if not line.startswith('#')]
    assert lines
    for line in lines:
        assert shlex.split(line)[0] in ('gcloud', 'git')


@pytest.mark.parametrize('name', ['run', 'sweep', 'stop', 'status'])
def test_dry_run_shows_exactly_what_a_real_run_executes(env, capfd, name):
    assert tpu.main(DRY_RUNS[name] + ['--dry_run']) == 0
    printed = [shlex.split(line)[1:] for line in capfd.readouterr().out.splitlines() if not line.startswith('#')]
    assert tpu.main(DRY_RUNS[name]) == 0
    assert printed == env.calls()


@pytest.mark.parametrize('name', SUBCOMMANDS)
def test_help_of_every_subcommand(capsys, name):
    with pytest.raises(SystemExit) as exit_info:
        tpu.main([name, '--help'])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert '--dry_run' in out and '--name' in out


def test_script_runs_from_anywhere():
    result = subprocess.run([sys.executable, TPU_PY, 'run', '--help'], capture_output=True, text=True,
                            cwd='/', timeout=30)
    assert result.returncode == 0 and '--workdir' in result.stdout


def test_errors_are_one_line_with_the_fix(env, capfd, monkeypatch):
    monkeypatch.delenv('TRM_TPU_NAME')
    assert tpu.main(['stop']) == 1
    monkeypatch.setenv('TRM_TPU_NAME', 'trm')
    env.exit_on({'create': 1})
    assert tpu.main(['create']) == 1
    monkeypatch.setenv('PATH', str(env.root / 'work'))     # no gcloud at all
    assert tpu.main(['stop']) == 1
    err = error_lines(capfd.readouterr().err)
    assert len(err) == 3
    assert 'pass --name or set TRM_TPU_NAME' in err[0]
    assert 'failed (exit 1): gcloud compute tpus tpu-vm create trm' in err[1] and 'quota' in err[1]
    assert 'gcloud not found on PATH' in err[2] and 'install the Google Cloud CLI' in err[2]
