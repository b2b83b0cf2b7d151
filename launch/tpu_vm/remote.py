"""The shell commands the workers run (over gcloud ssh), and the names they share: where the
checkout, the logs and the queues live on a worker, and how a run and its log are named.

Each function returns one command line for `--command=`; nothing here runs anything.
"""

import os
import re
import shlex

REMOTE_REPO = '~/trm_spmd'      # the checkout on every worker; remote commands run from it
REMOTE_LOGS = '~/trm_logs'      # per-host logs, one file per run
REMOTE_QUEUES = '~/trm_queue'   # sweep queues, the queue runner and its progress logs
# The brackets keep a pattern from matching the shell that runs pgrep/pkill (its command line
# holds the pattern text itself), so only training processes and queue runners match.
TRAIN_PATTERN = '[t]rm_spmd[.]main'
QUEUE_PATTERN = '[t]rm_queue/[^ ]*[.]sh'
# A foreground run exits with this when the trainer ended early on SIGTERM (`stop`, preemption)
# and recorded "status": "preempted": a sweep must stop there rather than go on.
STOPPED_EXIT = 75
SSH_FAILED_EXIT = 255   # gcloud's status when it cannot reach a worker (after its retries)
# setup.sh reuses the environment keyed by the lock; --tpu adds the gs:// extra that workdirs on a
# bucket need (requirements-gcs.lock, the versions the tests ran against a Cloud Storage server).
ENV_PYTHON = 'PY=$(bash launch/setup.sh --tpu)'
# A detached run is watched this long, so that a bad flag, config or dataset path, which ends
# the trainer within seconds, is reported by `run` itself rather than found later in a log.
START_CHECK_S = 10
# Reads a run's status from its run.json on a worker, for the queue runner and for the remote
# commands below alike. Relative to the worker's checkout.
RUN_STATUS = 'launch/run_status.sh'


def safe_name(text):
    """A file-name-safe form of a config name, variant or arg ('T=3,n=6' -> 'T_3_n_6')."""
    return re.sub(r'[^A-Za-z0-9_.-]+', '_', text).strip('_') or 'default'


def run_name(spec):
    """'configs/tn_sweep.py:t3_n6' -> 'tn_sweep-t3_n6': names the run's log on every host."""
    path, _, arg = spec.partition(':')
    stem = safe_name(os.path.splitext(os.path.basename(path))[0])
    return f'{stem}-{safe_name(arg)}' if arg else stem


def remote_path(path):
    """Shell-quote a path for a worker, keeping ~/ meaning the worker's home there."""
    if path == '~' or path.startswith('~/'):
        rest = path[2:]
        return '"$HOME"' + ('/' + shlex.quote(rest) if rest else '')
    return shlex.quote(path)


def remote_log(name):
    return f'{REMOTE_LOGS}/{name}.log'


def quoted(text):
    """Double-quote a fixed pattern for a remote command. Double rather than shlex's single
    quotes: the whole remote command is single-quoted again, and nested single quotes make
    it unreadable."""
    assert not set('"$`\\!') & set(text), text
    return f'"{text}"'


def in_repo(*steps):
    """Steps run on a worker from its checkout, stopping at the first failure."""
    return ' && '.join([f'cd {REMOTE_REPO}', *steps])


def train_command(config, workdir, overrides, detach=False):
    words = [f'--config={config}', *overrides]
    nohup = 'nohup ' if detach else ''
    return f'PJRT_DEVICE=TPU {nohup}"$PY" -m trm_spmd.main {shlex.join(words)} --workdir={remote_path(workdir)}'


def run_status_is(workdir, status):
    """Shell condition, run from the worker's checkout: WORKDIR's run.json records STATUS."""
    return f'[ "$(bash {RUN_STATUS} {remote_path(workdir)})" = {status} ]'


def running_check_command():
    # One line per training process or queue runner, prefixed with the worker's host name.
    return f'pgrep -af {quoted(TRAIN_PATTERN + "|" + QUEUE_PATTERN)} | sed "s/^/$(hostname): /"'


def background_run_command(config, workdir, overrides, name):
    log = remote_log(name)
    # Set-up runs in the foreground (its failure is reported); only the trainer is detached,
    # with nohup and no terminal, so it outlives the ssh session. After START_CHECK_S it must
    # still be running or have exited with 0 (`wait` gives the exit status of a finished one).
    return ' && '.join([
        f'mkdir -p {REMOTE_LOGS}',
        f'cd {REMOTE_REPO}',
        f'PY=$(bash launch/setup.sh --tpu 2>>{log})',
        f'{{ {train_command(config, workdir, overrides, detach=True)} >>{log} 2>&1 </dev/null & }}',
        f'sleep {START_CHECK_S}',
        f'if kill -0 $! 2>/dev/null || wait $!; then echo "$(hostname): started {name}, log {log}"; '
        f'else echo "$(hostname): {name} failed at start; the end of {log}:"; tail -n 5 {log}; exit 1; fi',
    ])


def foreground_run_command(config, workdir, overrides, name, skip_done=False):
    log = remote_log(name)
    train = ' && '.join([
        f'PY=$(bash launch/setup.sh --tpu 2>>{log})',
        f'{train_command(config, workdir, overrides)} 2>&1 | tee -a {log}',
        f'if {run_status_is(workdir, "preempted")}; then echo "$(hostname): {name} stopped before the end"; '
        f'exit {STOPPED_EXIT}; fi',
    ])
    if skip_done:
        train = (f'if {run_status_is(workdir, "done")}; then echo "$(hostname): {name} already done, skipped"; '
                 f'else {train}; fi')
    # pipefail: the trainer's exit status, not tee's, decides whether the run failed.
    return f'set -o pipefail; mkdir -p {REMOTE_LOGS} && cd {REMOTE_REPO} && {train}'


def git_checkout_command(url, branch):
    pull = f'git -C {REMOTE_REPO} pull --quiet --ff-only'
    clone = 'git clone --quiet'
    if branch:
        b = shlex.quote(branch)
        pull = (f'git -C {REMOTE_REPO} fetch --quiet origin && git -C {REMOTE_REPO} checkout --quiet {b} '
                f'&& git -C {REMOTE_REPO} pull --quiet --ff-only origin {b}')
        clone += f' --branch {b}'
    return f'if [ -d {REMOTE_REPO}/.git ]; then {pull}; else {clone} {shlex.quote(url)} {REMOTE_REPO}; fi'


def dataset_fingerprint_command(dest):
    # Hash of every file's hash and name: equal on two hosts <=> byte-identical datasets.
    return in_repo(f'cd {remote_path(dest)}',
                   'echo "dataset $(find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum '
                   '| sha256sum | cut -c1-64) $(hostname)"')


def status_command():
    report = '; '.join([
        f'procs=$(pgrep -af {quoted(TRAIN_PATTERN)} | cut -c1-160)',
        f'log=$(ls -t {REMOTE_LOGS}/*.log 2>/dev/null | head -n 1)',
        f'queue=$(ls -t {REMOTE_QUEUES}/*.log 2>/dev/null | head -n 1)',
        'echo "== $(hostname)"',
        'echo "training: ${procs:-none}"',
        'if [ -n "$log" ]; then echo "newest log $log:"; tail -n 2 "$log"; fi',
        'if [ -n "$queue" ]; then echo "queue $queue: $(tail -n 1 "$queue")"; fi',
    ])
    # Printed in one write per worker so that the workers' reports do not interleave.
    return f'out=$({report}); printf "%s\\n" "$out"'


def logs_command(run, lines, follow, prefix):
    log = remote_log(safe_name(run) if run else '')
    pick = f'log={log}' if run else f'log=$(ls -t {REMOTE_LOGS}/*.log 2>/dev/null | head -n 1)'
    tail = f'tail -n {lines}' + (' -F' if follow else '') + ' "$log"'
    if prefix:   # several workers stream at once: say which line came from which
        tail += ' | sed -u "s/^/$(hostname): /"'
    missing = f'no log {log}' if run else f'no logs in {REMOTE_LOGS}'
    return (f'{pick}; if [ -f "$log" ]; then echo "== $(hostname): $log"; {tail}; '
            f'else echo "== $(hostname): {missing}"; fi')


def stop_command(wait_s):
    train, queue = quoted(TRAIN_PATTERN), quoted(QUEUE_PATTERN)
    return '; '.join([
        f'n=$(pgrep -fc {train})',
        # The queue runner first: otherwise it would start the next run once this one exits.
        f'pkill -TERM -f {queue}',
        f'pkill -TERM -f {train}',
        f'for i in $(seq {wait_s}); do pgrep -f {train} >/dev/null || break; sleep 1; done',
        f'if pgrep -f {train} >/dev/null; then echo "$(hostname): SIGTERM sent to $n processes, still running '
        f'after {wait_s} s (saving a checkpoint?)"; '
        f'else echo "$(hostname): SIGTERM sent to $n processes, stopped"; fi',
    ])
