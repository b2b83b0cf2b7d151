"""Every gcloud command that launch/tpu.py prints with --dry_run, for every subcommand and option,
is one the real Google Cloud CLI accepts.

Without credentials gcloud parses a command fully and then stops with "You do not currently have
an active account selected" (exit 1); a command it cannot parse stops earlier at a usage error
(exit 2: an unknown flag, a missing argument), and a resource it cannot name stops with another
message. Here gcloud runs with an empty configuration of its own (no account; the project only
where the launcher passes one, or as gcloud's default), with GCE metadata detection, update checks
and prompts off, under a timeout, and in a network namespace with no network where the machine
allows one: it never reaches beyond this machine. The launcher is driven through its command line
only. Skipped where gcloud is not installed.
"""

import concurrent.futures
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, gcloud_environment

pytestmark = [pytest.mark.slow,   # about a second per gcloud command
              pytest.mark.skipif(shutil.which('gcloud') is None,
                                 reason='gcloud is not installed: the launcher\'s commands cannot be parsed here')]

PARSED = 'You do not currently have an active account selected'
LAUNCHER_ENV = {'TRM_TPU_NAME': 'trm-v4-64', 'TRM_TPU_ZONE': 'us-central2-b', 'TRM_TPU_PROJECT': 'trm-project-1'}
RUN = ['--config=configs/baseline.py:runlocal', '--workdir=gs://my-bucket/study/baseline/runlocal']
SWEEP = ['--sweep=configs/tn_sweep.py', '--study_root=gs://my-bucket/study']
# Every subcommand, and every option of each at least once.
CASES = [
    ['create'],
    ['create', '--spot', '--network=my-vpc', '--accelerator_type=v4-8', '--runtime_version=tpu-ubuntu2204-base'],
    ['create', '--preemptible'],
    ['setup', '--copy'],
    ['setup', '--repo_url=https://example.com/org/trm_spmd.git'],
    ['setup', '--repo_url=https://example.com/org/trm_spmd.git', '--branch=release-1'],
    ['data', '--build_args=--generate=5000 --test_generate=500 --blanks=30:45', '--dest=data/generated-5k'],
    ['data', '--build_args=--generate --num_train=1000 --size=30', '--task=maze', '--rebuild',
     '--dest=/home/me/data/maze'],
    ['data', '--build_args=--source=arc1', '--task=arc'],
    ['data', '--copy_from=gs://my-bucket/datasets/sudoku-extreme-1k-aug-1000'],
    ['run', *RUN, '--config.optim.lr=3e-4', '--config.seed', '7', '--noconfig.ema.enabled'],
    ['run', *RUN, '--foreground', '--force', '--run_name=my run'],
    ['sweep', *SWEEP, '--config.optim.lr=3e-4'],
    ['sweep', *SWEEP, '--queue', '--force'],
    ['status'],
    ['status', '--study_root=gs://my-bucket/study'],
    ['logs'],
    ['logs', '--worker=all', '--run=configs/tn_sweep.py:t3_n6', '--lines=20', '--follow'],
    ['logs', '--worker=3', '--run=tn_sweep-t3_n6'],
    ['stop'],
    ['stop', '--wait_s=30'],
    ['delete'],
    ['delete', '--yes'],
    ['status', '--name=other-tpu', '--zone=europe-west4-a', '--project=other-project'],
]


def no_network():
    """The prefix that runs a command in a network namespace of its own, where one can be made."""
    try:
        made = subprocess.run(['unshare', '--net', 'true'], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        made = False
    return ['unshare', '--net'] if made else []


def dry_run(args, env):
    result = subprocess.run([sys.executable, 'launch/tpu.py', *args, '--dry_run'], cwd=REPO, capture_output=True,
                            text=True, timeout=120, env=dict(os.environ, **env))
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def gcloud_commands(lines):
    """The gcloud commands among the printed lines, and those inside their --command payloads."""
    found = []
    for line in lines:
        if not line.startswith('gcloud '):
            continue
        argv = shlex.split(line)
        found.append(argv)
        for word in argv:
            if word.startswith('--command='):
                found += commands_in_shell(word[len('--command='):])
    return found


def commands_in_shell(script):
    """Each `gcloud ...` simple command of a shell script, up to the next operator."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, current = [], None
    for token in lexer:
        if current is not None and token and set(token) <= set('();&|<>'):
            commands.append(current)
            current = None
        elif current is not None:
            current.append(token)
        elif token == 'gcloud':
            current = [token]
    return commands + ([current] if current else [])


def parse(argv, env, prefix):
    result = subprocess.run([*prefix, *argv], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=120)
    return result.returncode, result.stderr


def test_every_printed_command_is_accepted_by_the_real_parser(tmp_path):
    prefix, env = no_network(), gcloud_environment(tmp_path)
    commands = {}
    for case in CASES:
        for argv in gcloud_commands(dry_run(case, LAUNCHER_ENV)):
            commands.setdefault(tuple(argv), case)
    verbs = {argv[:5] for argv in commands}
    assert {('gcloud', 'compute', 'tpus', 'tpu-vm', v) for v in ('create', 'ssh', 'scp', 'delete')} <= verbs
    assert ('gcloud', 'storage', 'rsync', '--recursive', 'gs://my-bucket/datasets/sudoku-extreme-1k-aug-1000') in verbs
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:   # a python each
        results = dict(zip(commands, pool.map(lambda argv: parse(list(argv), env, prefix), commands)))
    refused = [f'launch/tpu.py {shlex.join(case)} printed {shlex.join(argv)[:300]}: exit {results[argv][0]}, '
               f'{results[argv][1].strip()[:400]}'
               for argv, case in commands.items() if not (results[argv][0] == 1 and PARSED in results[argv][1])]
    assert not refused, '\n'.join(refused)
    assert len(commands) > 30


def test_without_a_project_flag_gcloud_takes_its_default_project(tmp_path):
    prefix, env = no_network(), gcloud_environment(tmp_path, project='default-project-7')
    for case in (['create'], ['run', *RUN], ['delete']):
        for argv in gcloud_commands(dry_run(case, dict(LAUNCHER_ENV, TRM_TPU_PROJECT=''))):
            assert not any(w.startswith('--project') for w in argv)
            code, err = parse(argv, env, prefix)
            assert code == 1 and PARSED in err, (argv, code, err)


def test_a_malformed_command_is_told_apart(tmp_path):
    """The check above can fail: what the parser rejects never reaches the account check."""
    prefix, env = no_network(), gcloud_environment(tmp_path)
    (create,) = gcloud_commands(dry_run(['create'], LAUNCHER_ENV))
    code, err = parse([w.replace('--accelerator-type=', '--accelerator_type=') for w in create], env, prefix)
    assert code == 2 and 'unrecognized arguments: --accelerator_type' in err and PARSED not in err
    code, err = parse([w for w in create if not w.startswith('--version=')], env, prefix)
    assert code == 2 and 'argument --version: Must be specified' in err and PARSED not in err


@pytest.mark.skipif(shutil.which('strace') is None, reason='strace is not installed: connections are not traced')
def test_gcloud_tries_no_connection_beyond_the_loopback(tmp_path):
    """With the network left on, gcloud still opens no connection outside this machine."""
    env = gcloud_environment(tmp_path)
    trace = tmp_path / 'trace'
    ssh = gcloud_commands(dry_run(['run', *RUN, '--foreground'], LAUNCHER_ENV))[-1]
    code, err = parse(['strace', '-f', '-qq', '-e', 'trace=connect', '-o', str(trace), *ssh], env, [])
    assert code == 1 and PARSED in err
    inet = [line for line in trace.read_text().splitlines() if 'AF_INET' in line]
    assert all('127.0.0.1' in line or '::1' in line for line in inet), inet
