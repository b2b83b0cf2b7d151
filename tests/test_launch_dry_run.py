"""launch/tpu.py prints exactly what it printed when its output was recorded: every subcommand
and option combination under --dry_run, every --help, and the one-line errors, byte for byte
(tests/fixtures/launch_dry_runs.json). A change to a command the launcher sends is a change to
that file, reviewed as such: `python tests/test_launch_dry_run.py` rewrites it.
"""

import json
import os
import sys

import pytest

from test_launch import REPO, Env, tpu

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures', 'launch_dry_runs.json')

RUN = ['run', '--config=configs/fam.py:t3_n6', '--workdir=gs://bkt/r']
SWEEP = ['sweep', '--sweep=configs/fam.py', '--study_root=gs://bkt/s']
BUILD = ['data', '--build_args=--generate=50 --seed=1']

CASES = [
    [],
    ['--help'],
    ['create'],
    ['create', '--spot'],
    ['create', '--preemptible', '--network=vpc-1'],
    ['create', '--accelerator_type=v4-8', '--runtime_version=tpu-vm-base', '--project=proj'],
    ['create', '--name=other', '--zone=us-central2-b'],
    ['create', '--spot', '--preemptible'],
    ['setup', '--copy'],
    ['setup', '--repo_url=https://example.com/trm.git'],
    ['setup', '--repo_url=https://example.com/trm.git', '--branch=dev'],
    ['setup', '--copy', '--branch=dev'],
    ['setup'],
    BUILD,
    BUILD + ['--rebuild'],
    BUILD + ['--dest=data/gen'],
    BUILD + ['--dest=/mnt/data/gen'],
    BUILD + ['--dest=~/gen'],
    ['data', '--task=maze', '--build_args=--generate --size=30', '--dest=data/maze'],
    ['data', '--task=arc', '--build_args=--source=arc1 --max_tasks=4', '--dest=data/arc'],
    ['data', '--build_args=--output_dir=x'],
    ['data', '--build_args=--input=train.csv "--test_input=it\'s here.csv"', '--rebuild'],
    ['data', '--copy_from=gs://bkt/datasets/sudoku'],
    ['data', '--copy_from=gs://bkt/datasets/sudoku', '--dest=data/sx'],
    ['data', '--copy_from=/local/dir'],
    RUN,
    RUN + ['--config.seed=1'],
    RUN + ['--config.optim.lr=3e-4', '--config.model.H_cycles', '2', '--noconfig.ema.enabled'],
    RUN + ['--config.variant=it\'s a b'],
    RUN + ['--foreground'],
    RUN + ['--force'],
    RUN + ['--run_name=my run', '--force'],
    RUN + ['--foreground', '--force', '--config.optim.lr=1e-3'],
    ['run', '--config=configs/fam.py', '--workdir=~/runs/fam'],
    ['run', '--config=configs/fam.py:t3_n6', '--workdir=runs/a b'],
    ['run', '--config=configs/nope.py:a', '--workdir=gs://b/r'],
    ['run', '--config=/abs/fam.py', '--workdir=gs://b/r'],
    RUN + ['optim.lr=3'],
    RUN + ['--config.optim.lrr=3'],
    ['run', '--workdir=gs://b/r'],
    SWEEP,
    SWEEP + ['--queue'],
    SWEEP + ['--force'],
    SWEEP + ['--queue', '--force', '--config.optim.lr=3e-4'],
    ['sweep', '--sweep=configs/sweeps.py:mixed', '--study_root=gs://bkt/s/'],
    ['sweep', '--sweep=configs/sweeps.py:mixed', '--study_root=gs://bkt/s', '--queue'],
    ['sweep', '--sweep=configs/fam.py', '--study_root=runs/study'],
    ['sweep', '--sweep=configs/sweeps.py:twice', '--study_root=gs://bkt/s'],
    SWEEP + ['--config.modle.H_cycles=2'],
    ['status'],
    ['status', '--study_root=gs://bkt/s'],
    ['status', '--config.optim.lr=3e-4'],
    ['logs'],
    ['logs', '--worker=all'],
    ['logs', '--worker=3', '--lines=10', '--follow', '--run=configs/fam.py:t3_n6'],
    ['logs', '--run=fam-t3_n6'],
    ['logs', '--worker=all', '--follow'],
    ['stop'],
    ['stop', '--wait_s=5', '--project=proj'],
    ['delete'],
    ['delete', '--yes'],
]
HELP = [[name, '--help'] for name in ('create', 'setup', 'data', 'run', 'sweep', 'status', 'logs', 'stop', 'delete')]


def case_key(argv):
    return ' '.join(argv) or '(no arguments)'


def dry_run(argv, env, capfd, repo=REPO):
    """{'exit', 'stdout', 'stderr'} of `launch/tpu.py ARGV --dry_run` (of ARGV alone for --help),
    with the checkout and the test's home written as <REPO> and <HOME>."""
    argv = argv if '--help' in argv else argv + ['--dry_run']
    capfd.readouterr()
    try:
        code = tpu.main(argv)
    except SystemExit as e:        # argparse: --help, or a usage error
        code = e.code
    out, err = capfd.readouterr()

    def clean(text):
        return text.replace(repo, '<REPO>').replace(str(env.home), '<HOME>').replace(str(env.root), '<ROOT>')
    return {'exit': code, 'stdout': clean(out), 'stderr': clean(err)}


@pytest.fixture
def launch_env(tmp_path, monkeypatch):
    monkeypatch.setenv('COLUMNS', '100')     # argparse wraps --help to the terminal's width
    return Env(tmp_path, monkeypatch)


RECORDING = os.environ.get('RECORD_LAUNCH_DRY_RUNS') == '1'


def recorded():
    if not os.path.exists(FIXTURE):
        return {}
    with open(FIXTURE) as f:
        return json.load(f)


@pytest.mark.skipif(RECORDING, reason='recording')
def test_every_case_is_recorded():
    assert sorted(recorded()) == sorted(case_key(argv) for argv in CASES + HELP)


@pytest.mark.parametrize('argv', CASES + HELP, ids=case_key)
def test_dry_run_output_is_what_was_recorded(argv, launch_env, capfd):
    output = dry_run(argv, launch_env, capfd)
    assert launch_env.calls() == []          # nothing ran
    if RECORDING:
        cases = recorded()
        cases[case_key(argv)] = output
        os.makedirs(os.path.dirname(FIXTURE), exist_ok=True)
        with open(FIXTURE, 'w') as f:
            json.dump(cases, f, indent=1, sort_keys=True)
            f.write('\n')
    else:
        assert output == recorded()[case_key(argv)]


if __name__ == '__main__':   # rewrite the fixture from the launcher as it is now
    if os.path.exists(FIXTURE):
        os.remove(FIXTURE)
    os.environ['RECORD_LAUNCH_DRY_RUNS'] = '1'
    sys.exit(pytest.main([__file__, '-q', '-p', 'no:cacheprovider']))
