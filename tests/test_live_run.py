"""What happens beside a live training run, proven on a real one (its own process, CPU, 8
devices): every tool that reads a run changes none of its bytes, even in the middle of an
asynchronous save, and the run ends exactly as an undisturbed one; Ctrl-C saves the step and
says how to resume; a second Ctrl-C stops at once and the newest complete checkpoint stays.

The save in flight is no race: tests/held_save.py holds the run's saves of one step just
before orbax commits them (arrays written into orbax's temporary directory, not yet renamed),
until the test releases them.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from trm_spmd import errors
from trm_spmd.checkpoint import CheckpointReader, open_reader

from conftest import REPO
from test_lifecycle import flatten, wait_for

# 8 steps, a checkpoint every 2, an evaluation (and a best-kept copy) at 4 and 8.
RUN = ['--config=configs/baseline.py:runlocal', '--config.train.total_steps=8', '--config.checkpoint.every_steps=2',
       '--config.train.eval_every_steps=4', '--config.train.log_every_steps=2', '--config.checkpoint.keep_best=1']
PUZZLE = '4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4......'
FIRST_CTRL_C = 'Ctrl-C: stopping cleanly (Ctrl-C again stops at once)'
SECOND_CTRL_C = ('stopped at once by a second Ctrl-C: the step in progress is not saved; rerun the same command to '
                 'resume from the newest complete checkpoint')


@pytest.fixture(scope='module')
def env(tmp_path_factory):
    # The dataset cache every test of the session shares (conftest's _isolated_data_cache).
    return dict(os.environ, PJRT_DEVICE='CPU', CPU_NUM_DEVICES='8',
                TRM_SPMD_DATA=str(tmp_path_factory.getbasetemp() / 'datasets'))


def train(workdir, env, *extra, timeout=300):
    return subprocess.run([sys.executable, '-m', 'trm_spmd.main', f'--workdir={workdir}', *RUN, *extra], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


def final_weights(workdir):
    """The flattened state of the run's newest checkpoint (verified), and its step."""
    with CheckpointReader(str(workdir)) as reader:
        found = reader.restore_newest_good()
    return found.step, flatten(found.tree)


def assert_same_weights(a, b):
    assert a.keys() == b.keys() and any(k.startswith('ema/') for k in a)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.fixture(scope='module')
def undisturbed(tmp_path_factory, env):
    workdir = tmp_path_factory.mktemp('undisturbed') / 'run'
    result = train(workdir, env)
    assert result.returncode == 0, result.stderr[-3000:]
    step, weights = final_weights(workdir)
    assert step == 8
    return weights


def snapshot(root):
    """Every directory and file under `root` with its bytes' SHA-256; of the run's lease.json,
    which the live run itself renews every 30 s, its holder."""
    seen = {}
    for directory, _, files in os.walk(root):
        seen[os.path.relpath(directory, root) + '/'] = 'directory'
        for name in files:
            path = os.path.join(directory, name)
            with open(path, 'rb') as f:
                data = f.read()
            if path == os.path.join(root, 'lease.json'):
                lease = json.loads(data)
                seen[name] = (lease['host'], lease['pid'], lease['started'])
            else:
                seen[os.path.relpath(path, root)] = hashlib.sha256(data).hexdigest()
    return seen


class LiveRun:
    """A training run in its own process whose saves of step `hold` wait for release()."""

    def __init__(self, workdir, gate, hold, env):
        self.workdir, self.gate = workdir, gate
        gate.mkdir()
        self.stdout, self.stderr = gate / 'stdout', gate / 'stderr'
        with open(self.stdout, 'w') as out, open(self.stderr, 'w') as err:
            self.process = subprocess.Popen(
                [sys.executable, 'tests/held_save.py', str(gate), str(hold), f'--workdir={workdir}', *RUN],
                cwd=REPO, env=env, stdout=out, stderr=err)

    def wait_for(self, what, predicate, timeout=300):
        def done():
            if self.process.poll() is not None:
                raise AssertionError(f'the run ended (exit {self.process.returncode}) before {what}: '
                                     f'{self.stderr.read_text()[-3000:]}')
            return predicate()
        wait_for(done, timeout, what)

    def wait_until_held(self, *directories):
        self.wait_for(f'its held saves in {directories}',
                      lambda: all((self.gate / f'held-{d}').exists() for d in directories))

    def release(self):
        (self.gate / 'release').touch()

    def finish(self, timeout=120):
        self.process.wait(timeout)
        return self.process.returncode, self.stdout.read_text(), self.stderr.read_text()

    def stderr_lines(self):
        return self.stderr.read_text().splitlines()


def orbax_temporary(workdir):
    return sorted(os.path.relpath(os.path.join(d, n), workdir) for d, names, _ in os.walk(workdir)
                  for n in names if '.orbax-checkpoint-tmp' in n)


def complete_steps(directory):
    return sorted(int(n) for n in os.listdir(directory) if n.isdigit())


# ---- reading a live run ----------------------------------------------------------------------
@pytest.mark.slow
def test_every_reader_beside_a_live_run_mid_save_changes_nothing_and_the_run_ends_as_undisturbed(
        undisturbed, env, tmp_path):
    workdir = tmp_path / 'live'
    live = LiveRun(workdir, tmp_path / 'gate', 8, env)
    live.wait_until_held('checkpoints', 'checkpoints_best')
    live.wait_for('the run waiting for its final save', (tmp_path / 'gate' / 'waiting').exists)
    assert orbax_temporary(workdir) == [p + '/8.orbax-checkpoint-tmp' for p in ('checkpoints', 'checkpoints_best')]
    before = snapshot(workdir)
    out = tmp_path / 'out'
    readers = {
        'solve': ['-m', 'trm_spmd.solve', f'--checkpoint={workdir}', f'--puzzle={PUZZLE}'],
        'solve a step': ['-m', 'trm_spmd.solve', f'--checkpoint={workdir}/checkpoints_best/4', f'--puzzle={PUZZLE}'],
        'analysis status': ['-m', 'trm_spmd.analysis', 'status', str(workdir)],
        'analysis compare': ['-m', 'trm_spmd.analysis', 'compare', str(workdir), f'--out={out}'],
        'analysis plot': ['-m', 'trm_spmd.analysis', 'plot', str(workdir), f'--out={out}'],
        'an eval run from it': ['-m', 'trm_spmd.main', *RUN, f'--workdir={tmp_path / "eval"}', '--config.mode=eval',
                                f'--config.init_from={workdir}'],
    }
    results = {}
    for name, args in readers.items():
        results[name] = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                                       timeout=300)
        assert results[name].returncode == 0, (name, results[name].stderr[-3000:])
        assert snapshot(workdir) == before, name
    for name in ('solve', 'solve a step'):
        assert 'ACT steps: ' in results[name].stdout and results[name].stderr == '', (name, results[name].stderr)
    assert '| running |' in results['analysis status'].stdout
    assert f'initialised weights from {workdir}' in results['an eval run from it'].stdout

    live.release()
    code, stdout, stderr = live.finish()
    assert code == 0 and stderr == '', stderr[-3000:]
    assert 'run done' in stdout
    assert json.loads((workdir / 'run.json').read_text())['status'] == 'done'
    assert complete_steps(workdir / 'checkpoints_best') == [8] and orbax_temporary(workdir) == []
    step, weights = final_weights(workdir)
    assert step == 8
    assert_same_weights(weights, undisturbed)


def test_a_reader_leaves_a_save_in_flight_and_a_damaged_checkpoint_where_they_are(tmp_path):
    from test_checkpoint_integrity import _truncate, _tree, _write
    _write(tmp_path, steps=(1, 2, 3), keep_best=1)
    _truncate(str(tmp_path / 'checkpoints' / '3'))
    in_flight = tmp_path / 'checkpoints' / '4.orbax-checkpoint-tmp'   # what a live run's save leaves meanwhile
    (in_flight / 'state').mkdir(parents=True)
    (in_flight / 'state' / 'part').write_bytes(b'\1' * 64)
    before = snapshot(tmp_path)
    lines = []
    with CheckpointReader(str(tmp_path)) as reader:
        assert reader.all_steps() == [1, 2, 3]
        found = reader.restore_newest_good(report=lines.append)
    # Step 3's best-kept copy is whole: it is read instead, and nothing moves.
    assert found.step == 3 and found.path == str(tmp_path / 'checkpoints_best' / '3')
    np.testing.assert_array_equal(found.tree['model']['w'], _tree(3)['model']['w'])
    [line] = lines
    assert line.startswith(f'checkpoint {tmp_path}/checkpoints/3 is unreadable: ')
    assert line.endswith('; skipped (left in place: the run that writes it sets it aside when it next starts)')
    assert snapshot(tmp_path) == before


def test_a_reader_of_a_source_that_holds_nothing_readable_says_so(tmp_path):
    from test_checkpoint_integrity import _truncate, _write
    _write(tmp_path, steps=(1,))
    _truncate(str(tmp_path / 'checkpoints' / '1'))
    with CheckpointReader(str(tmp_path)) as reader:
        with pytest.raises(errors.UserError, match=r'^no readable checkpoint in .*: step\(s\) 1 are damaged '
                                                  r'\(left as they are\)$'):
            reader.restore_newest_good(report=lambda line: None)
    assert (tmp_path / 'checkpoints' / '1').exists()
    reader, step = open_reader(str(tmp_path / 'checkpoints' / '1'))
    reader.close()
    assert step == 1 and reader.latest.directory.name == 'checkpoints'


# ---- Ctrl-C ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_saves_the_step_says_how_to_resume_and_the_rerun_ends_as_undisturbed(undisturbed, env, tmp_path):
    workdir = tmp_path / 'run'
    live = LiveRun(workdir, tmp_path / 'gate', 4, env)   # held at 4: the run cannot end before the Ctrl-C
    live.wait_until_held('checkpoints')
    live.process.send_signal(signal.SIGINT)
    live.wait_for('the Ctrl-C noticed', lambda: FIRST_CTRL_C in live.stderr_lines())
    live.release()
    code, stdout, stderr = live.finish()
    # The step it stops at is the one it was on when the Ctrl-C came: 5, or 6 where step 6's save waited.
    step = next((s for s in (5, 6) if f'at step {s},' in stderr), None)
    line = f'stopped by Ctrl-C at step {step}, its checkpoint written: rerun the same command to resume'
    assert (code, stderr.splitlines()) == (errors.EXIT_STOPPED, [FIRST_CTRL_C, line]), stderr[-3000:]
    assert 'run done' not in stdout
    run = json.loads((workdir / 'run.json').read_text())
    assert (run['status'], run['message']) == ('stopped', line)
    assert final_weights(workdir)[0] == step

    rerun = train(workdir, env)
    assert rerun.returncode == 0 and rerun.stderr == '', rerun.stderr[-3000:]
    assert f'resuming from step {step} ' in rerun.stdout and 'run done' in rerun.stdout
    final_step, weights = final_weights(workdir)
    assert final_step == 8
    assert_same_weights(weights, undisturbed)


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_the_newest_complete_checkpoint_stays_whole(env, tmp_path):
    workdir = tmp_path / 'run'
    live = LiveRun(workdir, tmp_path / 'gate', 4, env)   # step 4's save stays in flight
    live.wait_until_held('checkpoints', 'checkpoints_best')
    newest = snapshot(workdir / 'checkpoints' / '2')
    live.process.send_signal(signal.SIGINT)
    live.wait_for('the Ctrl-C noticed', lambda: FIRST_CTRL_C in live.stderr_lines())
    sent = time.time()
    live.process.send_signal(signal.SIGINT)
    code, stdout, stderr = live.finish(timeout=30)
    assert time.time() - sent < 10
    assert (code, stderr.splitlines()) == (errors.EXIT_STOPPED, [FIRST_CTRL_C, SECOND_CTRL_C]), stderr[-3000:]
    run = json.loads((workdir / 'run.json').read_text())
    assert (run['status'], run['message']) == ('stopped', 'stopped at once by a second Ctrl-C')
    assert complete_steps(workdir / 'checkpoints') == [2] and complete_steps(workdir / 'checkpoints_best') == []
    assert snapshot(workdir / 'checkpoints' / '2') == newest
    assert final_weights(workdir)[0] == 2   # every checksum verified
    assert orbax_temporary(workdir) == ['checkpoints/4.orbax-checkpoint-tmp', 'checkpoints_best/4.orbax-checkpoint-tmp']


def test_ctrl_c_before_a_run_is_under_way_is_one_line(monkeypatch, capsys):
    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(sys, 'argv', ['prog'])
    with pytest.raises(SystemExit) as exited:
        errors.run_main(interrupted)
    assert exited.value.code == errors.EXIT_STOPPED
    assert capsys.readouterr().err == 'stopped by Ctrl-C\n'


def test_a_sweep_leaves_ctrl_c_to_its_run_and_stops_after_it():
    # The run (a stand-in) sends Ctrl-C to its process group, as a terminal does to the sweep and the run.
    run = ('import os, signal, sys\n'
           'print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)\n'
           'try:\n'
           '    os.killpg(0, signal.SIGINT)\n'
           '    signal.pause()\n'
           'except KeyboardInterrupt:\n'
           '    sys.exit(130)\n')
    sweep = (f'from trm_spmd.sweep import run_entry; import sys\n'
             f'print(run_entry([sys.executable, "-c", {run!r}]))\n'
             f'print("the sweep went on")\n')
    result = subprocess.run([sys.executable, '-c', sweep], cwd=REPO, capture_output=True, text=True, timeout=60,
                            start_new_session=True)   # its own process group, not pytest's
    assert (result.returncode, result.stdout.splitlines()) == (0, ['True', '130', 'the sweep went on']), result.stderr


@pytest.mark.slow
def test_ctrl_c_during_an_eval_run_stops_its_evaluation_and_records_nothing_of_it(monkeypatch, tmp_path, capfd):
    from trm_spmd.train import evaluate
    from trm_spmd.train.loop import train_and_evaluate
    from test_train import runlocal
    source = tmp_path / 'source'
    train_and_evaluate(runlocal(), str(source))
    evaluation = evaluate.Evaluator.run

    def interrupted(self, *args, **kwargs):   # Ctrl-C as the evaluation starts
        os.kill(os.getpid(), signal.SIGINT)
        return evaluation(self, *args, **kwargs)

    monkeypatch.setattr(evaluate.Evaluator, 'run', interrupted)
    workdir = tmp_path / 'eval'
    handler = signal.getsignal(signal.SIGINT)
    capfd.readouterr()
    with pytest.raises(errors.Stopped) as caught:
        train_and_evaluate(runlocal(mode='eval', init_from=str(source)), str(workdir))
    line = 'stopped by Ctrl-C during the evaluation, which was not recorded: rerun the same command to evaluate'
    assert str(caught.value) == line and capfd.readouterr().err == FIRST_CTRL_C + '\n'
    run = json.loads((workdir / 'run.json').read_text())
    assert (run['status'], run['message']) == ('stopped', line)
    assert not (workdir / 'metrics.jsonl').exists()
    assert signal.getsignal(signal.SIGINT) is handler   # the run's own handler is gone
