#!/usr/bin/env python3
"""Run trm_spmd on a Cloud TPU VM: one program per host, the same command on every host.

A pod slice is several VMs ("workers") with separate disks, so everything that must happen
on every host goes through `gcloud compute tpus tpu-vm ssh NAME --worker=all`. A v4-64 is
32 chips = 8 workers x 4 devices.

  python launch/tpu.py create --accelerator_type=v4-64 --spot
  python launch/tpu.py setup --copy
  python launch/tpu.py data --build_args='--generate=5000 --blanks=30:45'
  python launch/tpu.py run --config=configs/tn_sweep.py:t3_n6 --workdir=gs://B/study/tn_sweep/t3_n6 \\
      --config.optim.lr=3e-4
  python launch/tpu.py sweep --sweep=configs/tn_sweep.py --study_root=gs://B/study --queue
  python launch/tpu.py status | logs | stop | delete

run and sweep take config overrides as the trainer does (--config.KEY=VALUE) and pass them on.

--name, --zone and --project default to $TRM_TPU_NAME, $TRM_TPU_ZONE and $TRM_TPU_PROJECT.
Every subcommand takes --dry_run (print the commands, shell-quoted, one per line; run nothing)
and --help. Run it from the repository root: config paths are relative to it, here and on the
workers, which run everything from ~/trm_spmd.
"""

import argparse
import dataclasses
import difflib
import os
import re
import shlex
import subprocess
import sys
import tarfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REMOTE_REPO = '~/trm_spmd'      # the checkout on every worker; remote commands run from it
REMOTE_LOGS = '~/trm_logs'      # per-host logs, one file per run
REMOTE_QUEUES = '~/trm_queue'   # sweep queues, the queue runner and its progress logs
# Relative to ~/trm_spmd, the trainer's working directory; the configs' data.path.
DEFAULT_DATA = 'data/sudoku-extreme-1k-aug-1000'
STAGING = os.path.join('~', '.cache', 'trm_spmd', 'launch')  # local files before they are copied
SOURCE_TARBALL = 'trm_spmd-src.tar.gz'

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

# `sweep --queue` copies this script to every worker and runs it there.
QUEUE_RUNNER = os.path.join(REPO, 'launch', 'queue_runner.sh')
# Reads a run's status from its run.json on a worker, for the queue runner and for the remote
# commands below alike. Relative to the worker's checkout.
RUN_STATUS = 'launch/run_status.sh'


class LaunchError(Exception):
    """A failure the user can act on; the message is one line: the cause and what to do."""


def info(message):
    # Progress goes to stderr so that --dry_run's stdout holds only commands.
    print(message, file=sys.stderr, flush=True)


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


def display(argv):
    """Shell-quoted command line, with --flag=VALUE written as --flag='VALUE' (same meaning)."""
    words = []
    for word in argv:
        flag, eq, value = word.partition('=')
        if word.startswith('--') and eq and re.fullmatch(r'--[\w-]+', flag):
            words.append(flag + '=' + shlex.quote(value))
        else:
            words.append(shlex.quote(word))
    return ' '.join(words)


def short(argv, width=160):
    """A failing command for an error line: the --command payload cut to stay readable."""
    return display([w if len(w) <= width else w[:width] + '...' for w in argv])


# ---- running commands ------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    returncode: int
    stdout: str = ''


class Shell:
    """Runs commands, or with dry_run only prints them (shell-quoted, one per line)."""

    def __init__(self, dry_run):
        self.dry_run = dry_run

    def note(self, text):
        # In a dry run, what a step does besides running a command (a local file it writes).
        if self.dry_run:
            for line in text.splitlines():
                print(f'# {line}')

    def report(self, message):
        # Outcomes are printed only when something ran.
        if not self.dry_run:
            info(message)

    def run(self, argv, doing, fix, check=True, capture=False):
        if self.dry_run:
            print(display(argv), flush=True)
            return Result(0)
        try:
            proc = subprocess.run(argv, stdout=subprocess.PIPE if capture else None, text=True)
        except FileNotFoundError:
            raise LaunchError(f'{argv[0]} not found on PATH while {doing}; install the Google Cloud CLI '
                              '(https://cloud.google.com/sdk/docs/install) and run `gcloud auth login`') from None
        if check and proc.returncode != 0:
            raise LaunchError(f'{doing} failed (exit {proc.returncode}): {short(argv)}; {fix}')
        return Result(proc.returncode, proc.stdout or '')


@dataclasses.dataclass
class Tpu:
    """The gcloud command lines for one TPU VM."""
    name: str
    zone: str
    project: str = ''

    def gcloud(self, verb, *positional):
        argv = ['gcloud', 'compute', 'tpus', 'tpu-vm', verb, *positional, f'--zone={self.zone}']
        if self.project:
            argv.append(f'--project={self.project}')
        return argv

    def ssh(self, command, worker='all'):
        return self.gcloud('ssh', self.name) + [f'--worker={worker}', f'--command={command}']

    def scp(self, sources, dest, worker='all'):
        return self.gcloud('scp', *sources, f'{self.name}:{dest}') + [f'--worker={worker}']


# ---- remote commands -------------------------------------------------------------------


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


# ---- subcommands -----------------------------------------------------------------------


def cmd_create(args, tpu, shell):
    argv = tpu.gcloud('create', tpu.name) + [
        f'--accelerator-type={args.accelerator_type}', f'--version={args.runtime_version}']
    if args.preemptible:
        argv.append('--preemptible')
    if args.spot:
        argv.append('--spot')
    if args.network:
        argv.append(f'--network={args.network}')
    shell.run(argv, f'creating TPU VM {tpu.name}',
              'check quota and capacity for this accelerator type in this zone '
              '(`gcloud compute tpus accelerator-types list --zone=ZONE`), or try another zone')
    shell.report(f'created {tpu.name}; next: python launch/tpu.py setup --copy')


def pack_checkout(tarball, shell):
    """Tar the files git knows about (tracked, plus new files that are not ignored)."""
    # Untracked-but-not-ignored files go too: a config file written a minute ago must reach
    # the workers; ignored paths (venvs, data, runs) must not.
    listing = ['git', '-C', REPO, 'ls-files', '-z', '--cached', '--others', '--exclude-standard']
    shell.note(f'pack the files listed by the next command into {tarball}')
    if shell.dry_run:
        print(shlex.join(listing))
        return
    try:
        names = subprocess.run(listing, check=True, stdout=subprocess.PIPE).stdout.decode().split('\0')
    except (OSError, subprocess.CalledProcessError):
        raise LaunchError(f'listing the checkout failed: {shlex.join(listing)}; setup --copy needs git and a '
                          'git checkout (or use setup --repo_url)') from None
    os.makedirs(os.path.dirname(tarball), exist_ok=True)
    count = 0
    with tarfile.open(tarball, 'w:gz') as tar:
        for name in sorted(n for n in names if n):
            path = os.path.join(REPO, name)
            if os.path.lexists(path):      # a tracked file deleted locally is not shipped
                tar.add(path, arcname=name, recursive=False)
                count += 1
    info(f'packed {count} files of {REPO} ({os.path.getsize(tarball) / 1e6:.1f} MB)')


def git_checkout_command(url, branch):
    pull = f'git -C {REMOTE_REPO} pull --quiet --ff-only'
    clone = 'git clone --quiet'
    if branch:
        b = shlex.quote(branch)
        pull = (f'git -C {REMOTE_REPO} fetch --quiet origin && git -C {REMOTE_REPO} checkout --quiet {b} '
                f'&& git -C {REMOTE_REPO} pull --quiet --ff-only origin {b}')
        clone += f' --branch {b}'
    return f'if [ -d {REMOTE_REPO}/.git ]; then {pull}; else {clone} {shlex.quote(url)} {REMOTE_REPO}; fi'


def cmd_setup(args, tpu, shell):
    if args.branch and not args.repo_url:
        raise LaunchError('--branch needs --repo_url (with --copy the local checkout is copied as it is)')
    install = in_repo(ENV_PYTHON, 'echo "$(hostname): ready, python $PY"')
    fix = ('read the worker output above; rerun setup (workers that finished reuse their environment)')
    if args.copy:
        tarball = os.path.join(os.path.expanduser(STAGING), SOURCE_TARBALL)
        pack_checkout(tarball, shell)
        shell.run(tpu.scp([tarball], SOURCE_TARBALL), 'copying the checkout to the workers',
                  'check that the TPU VM is READY (`gcloud compute tpus tpu-vm list --zone=ZONE`) and rerun setup')
        # Unpacked over the existing checkout: ignored paths (the dataset in data/) survive.
        unpack = (f'mkdir -p {REMOTE_REPO} && tar -xzf ~/{SOURCE_TARBALL} -C {REMOTE_REPO} '
                  f'&& rm ~/{SOURCE_TARBALL}')
        shell.run(tpu.ssh(f'{unpack} && {install}'), 'installing on the workers', fix)
    else:
        checkout = git_checkout_command(args.repo_url, args.branch)
        shell.run(tpu.ssh(f'{checkout} && {install}'), 'cloning and installing on the workers',
                  'check the URL and branch; if ~/trm_spmd came from setup --copy, keep using --copy '
                  'or remove it on the workers first; ' + fix)
    shell.report('installed on all workers; next: python launch/tpu.py data ...')


def dataset_fingerprint_command(dest):
    # Hash of every file's hash and name: equal on two hosts <=> byte-identical datasets.
    return in_repo(f'cd {remote_path(dest)}',
                   'echo "dataset $(find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum '
                   '| sha256sum | cut -c1-64) $(hostname)"')


def check_fingerprints(output, dest):
    found = re.findall(r'^dataset ([0-9a-f]{64}) (\S+)$', output, flags=re.M)
    if not found:
        raise LaunchError(f'no worker reported a fingerprint of {dest}; rerun data and read the worker output')
    groups = {}
    for digest, host in found:
        groups.setdefault(digest, []).append(host)
    if len(groups) > 1:
        summary = '; '.join(f'{d[:12]}: {", ".join(h)}' for d, h in groups.items())
        raise LaunchError(f'the workers hold different datasets in {dest} ({summary}); '
                          'rerun data so that every host builds or copies the same files')
    where = dest if os.path.isabs(dest) else f'~/trm_spmd/{dest}'
    use = ('where the configs read it' if dest == DEFAULT_DATA else
           f'train with --config.data.path={dest}')
    info(f'{len(found)} workers hold the same dataset in {where} ({found[0][0][:12]}); {use}')


def cmd_data(args, tpu, shell):
    dest = args.dest
    if dest.startswith('~'):
        raise LaunchError(f'--dest={dest}: give it relative to ~/trm_spmd or absolute; the trainer reads '
                          'config.data.path as it is and does not expand ~')
    if args.build_args is not None:
        build = shlex.split(args.build_args)
        if any(w.startswith('--output_dir') for w in build):
            raise LaunchError('--build_args must not set --output_dir; pass the directory with --dest')
        words = [*build, f'--output_dir={dest}']
        target = remote_path(dest)
        make = f'{ENV_PYTHON} && "$PY" -m trm_spmd.data.build_{args.task} {shlex.join(words)}'
        if args.rebuild:
            step = in_repo(f'rm -rf {target}', make)
        else:
            # the builders refuse an existing directory; a dataset already there is kept, and
            # the fingerprint comparison below still checks that all hosts hold the same one.
            step = in_repo(f'if [ -e {target} ]; then echo "$(hostname): {dest} exists, kept (--rebuild to '
                           f'build it again)"; else {make}; fi')
        doing, fix = 'building the dataset on the workers', 'check --build_args (the worker output says which)'
    else:
        if not args.copy_from.startswith('gs://'):
            raise LaunchError(f'--copy_from={args.copy_from} is not a gs:// path; the workers copy from a bucket')
        step = in_repo(f'mkdir -p {remote_path(dest)}',
                       f'gcloud storage rsync --recursive {shlex.quote(args.copy_from)} {remote_path(dest)}')
        doing, fix = 'copying the dataset to the workers', \
            "check the bucket path and that the TPU VM's service account may read it"
    shell.run(tpu.ssh(step), doing, fix)
    out = shell.run(tpu.ssh(dataset_fingerprint_command(dest)), 'comparing the datasets on the workers',
                    f'rerun data; the dataset directory {dest} is missing on some worker', capture=True)
    if not shell.dry_run:
        check_fingerprints(out.stdout, dest)


OVERRIDE_PREFIXES = ('--config.', '--noconfig.')


def config_overrides(words):
    """The trainer's own override flags among the words argparse left over, in their order:
    ['--config.optim.lr=3e-4', '--config.seed', '7', '--noconfig.ema.enabled'] ->
    ['--config.optim.lr=3e-4', '--config.seed=7', '--noconfig.ema.enabled']."""
    flags, rest = [], list(words)
    while rest:
        word = rest.pop(0)
        if not word.startswith(OVERRIDE_PREFIXES):
            raise LaunchError(f'unrecognized argument {word!r}; config overrides are written as the trainer '
                              'takes them: --config.KEY=VALUE (e.g. --config.optim.lr=3e-4)')
        # `--config.KEY VALUE`, which absl also takes: run and sweep have no positional arguments,
        # so a plain word after an override can only be its value.
        if word.startswith('--config.') and '=' not in word and rest and not rest[0].startswith('--'):
            word += '=' + rest.pop(0)
        flags.append(word)
    check_override_keys(flags)
    return flags


def override_key(flag):
    """'--config.optim.lr=3e-4' -> 'optim.lr'; '--noconfig.ema.enabled' -> 'ema.enabled'."""
    return flag.partition('=')[0].partition('config.')[2]


def import_project():
    """Lets this checkout's trm_spmd be imported, whatever the working directory."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)


def schema_keys():
    """Every dotted key of the trainer's config schema, or None when the project's packages
    (ml_collections) are not importable here: the trainers check the keys then."""
    import_project()
    try:
        from trm_spmd.config import default_config
    except ImportError:
        return None
    keys = []

    def visit(node, prefix):
        for name, value in node.items():
            keys.append(prefix + name)
            if hasattr(value, 'items'):
                visit(value, f'{prefix}{name}.')

    visit(default_config(), '')
    return keys


def check_override_keys(flags):
    """A misspelt key fails here, on one line, rather than at start on every worker."""
    known = schema_keys() if flags else None
    if known is None:
        return
    for flag in flags:
        key = override_key(flag)
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            fix = f'did you mean --config.{close[0]}?' if close else 'trm_spmd/config/schema.py lists the keys'
            raise LaunchError(f'{flag}: the config has no key {key!r}; {fix}')


def check_config_path(spec):
    path = spec.partition(':')[0]
    if os.path.isabs(path):
        raise LaunchError(f'config path {path} is absolute; give it relative to the repository root, '
                          'which the workers run from (~/trm_spmd)')
    if not os.path.isfile(path):
        raise LaunchError(f'config file not found: {path}; run launch/tpu.py from the repository root '
                          '(config paths are relative to it, here and on the workers)')


def refuse_if_running(tpu, shell, force):
    if force:
        return
    out = shell.run(tpu.ssh(running_check_command()), 'checking the workers for running training',
                    'check that the TPU VM is READY and reachable (`python launch/tpu.py status`)', capture=True)
    found = [line for line in out.stdout.splitlines() if 'trm_spmd.main' in line or '/trm_queue/' in line]
    if found:
        raise LaunchError(f'training is already running on the workers ({len(found)} processes, e.g. '
                          f'"{found[0][:120]}"); stop it with `python launch/tpu.py stop`, '
                          'or pass --force to start anyway')


def cmd_run(args, tpu, shell):
    check_config_path(args.config)
    overrides = config_overrides(args.overrides)
    name = safe_name(args.run_name) if args.run_name else run_name(args.config)
    refuse_if_running(tpu, shell, args.force)
    if args.foreground:
        command = foreground_run_command(args.config, args.workdir, overrides, name)
        result = shell.run(tpu.ssh(command), f'run {name}', '', check=False)
        if result.returncode:
            raise LaunchError(run_failure(name, result.returncode, 'rerun the same command to resume it'))
        return
    command = background_run_command(args.config, args.workdir, overrides, name)
    shell.run(tpu.ssh(command), f'starting {name} on the workers',
              f'read the log lines above or `python launch/tpu.py logs --run={name} --worker=all`, fix, '
              'and rerun; a worker where it did start keeps running: `python launch/tpu.py stop` first')
    shell.report(f'{name} runs in the background on every worker; '
                 f'watch: python launch/tpu.py logs --run={name} --follow')


@dataclasses.dataclass
class SweepRun:
    spec: str       # 'FILE.py:ARG', the --config value
    name: str       # log name on every host
    workdir: str


def config_tools():
    """expand_sweep and load_config from the package (they need ml_collections)."""
    import_project()
    try:
        from trm_spmd.config.files import expand_sweep, load_config
        import ml_collections  # noqa: F401 - config files build ConfigDicts
    except ImportError as e:
        raise LaunchError(f'reading sweeps needs the project packages ({e}); run this with the project '
                          'python: PY=$(bash launch/setup.sh) && $PY launch/tpu.py sweep ...') from None
    return expand_sweep, load_config


def read_config(reader, spec):
    # Config files are user code: any exception there becomes one line naming the file.
    try:
        return reader(spec)
    except Exception as e:  # noqa: BLE001
        raise LaunchError(f'reading {spec} failed ({type(e).__name__}: {e}); fix the config file') from None


def plan_sweep(sweep_spec, study_root):
    """One run per sweep entry, in sweep order, each in STUDY_ROOT/<name>/<variant or arg>."""
    expand_sweep, load_config = config_tools()
    check_config_path(sweep_spec)
    runs, names, workdirs = [], {}, {}
    for spec in read_config(expand_sweep, sweep_spec):
        check_config_path(spec)
        config = read_config(load_config, spec)
        arg = spec.partition(':')[2]
        leaf = safe_name(str(config.variant or arg or 'default'))
        run = SweepRun(spec, run_name(spec), f'{study_root.rstrip("/")}/{safe_name(str(config.name))}/{leaf}')
        for seen, key in ((names, run.name), (workdirs, run.workdir)):
            if key in seen:
                raise LaunchError(f'sweep entries {seen[key]} and {spec} both map to {key}; '
                                  'give them distinct config names or variants')
            seen[key] = spec
        runs.append(run)
    if not runs:
        raise LaunchError(f'{sweep_spec} expands to no runs; its sweep function returned an empty list')
    return runs


def run_failure(name, returncode, resume):
    """One line for a foreground run that did not finish."""
    if returncode == STOPPED_EXIT:
        return (f'{name} was stopped before the end (SIGTERM: `stop` or a preemption) and saved a checkpoint; '
                f'{resume}')
    if returncode == SSH_FAILED_EXIT:
        return (f'lost the workers during {name} (ssh exit 255: TPU VM preempted or deleted?); check '
                f'`gcloud compute tpus tpu-vm list --zone=ZONE`, recreate it if needed, then {resume}')
    return (f'{name} failed (exit {returncode}); read the output above or '
            f'`python launch/tpu.py logs --run={name} --worker=all`, fix, and {resume}')


def run_sequentially(runs, overrides, tpu, shell):
    failed = []
    for i, run in enumerate(runs, 1):
        info(f'[{i}/{len(runs)}] {run.spec} -> {run.workdir}')
        command = foreground_run_command(run.spec, run.workdir, overrides, run.name, skip_done=True)
        result = shell.run(tpu.ssh(command), f'run {run.name}', '', check=False)
        if result.returncode in (STOPPED_EXIT, SSH_FAILED_EXIT):
            # Going on would start the next run on a pod that is being stopped or is gone.
            raise LaunchError(run_failure(run.name, result.returncode,
                                          'rerun the same sweep command to resume (finished runs are skipped)'))
        if result.returncode != 0:
            info(f'[{i}/{len(runs)}] {run.name} failed (exit {result.returncode}); going on with the sweep')
            failed.append(run.name)
    if failed:
        raise LaunchError(f'{len(failed)} of {len(runs)} runs failed: {", ".join(failed)}; read '
                          '`python launch/tpu.py logs --run=NAME --worker=all`, fix, and rerun the same sweep '
                          'command (finished runs are skipped, the others resume)')
    shell.report(f'all {len(runs)} runs finished')


def start_queue(queue, runs, overrides, tpu, shell):
    queue_file = os.path.join(os.path.expanduser(STAGING), f'{queue}.queue')
    # The runner evaluates each line as shell words, so a ~/ workdir means the worker's home.
    lines = [' '.join([r.name, remote_path(r.workdir), shlex.join([f'--config={r.spec}', *overrides])])
             for r in runs]
    shell.note(f'write {queue_file}:\n' + '\n'.join(lines))
    if not shell.dry_run:
        os.makedirs(os.path.dirname(queue_file), exist_ok=True)
        with open(queue_file, 'w') as f:
            f.write('\n'.join(lines) + '\n')
    reach = 'check that the TPU VM is READY (`python launch/tpu.py status`) and rerun the sweep'
    shell.run(tpu.ssh(f'mkdir -p {REMOTE_QUEUES} {REMOTE_LOGS}'), 'preparing the workers', reach)
    # The runner goes with its queue rather than running from the worker's checkout: it reads
    # the lines this launcher wrote, so the two must come from the same version.
    shell.run(tpu.scp([queue_file, QUEUE_RUNNER], 'trm_queue/'), 'copying the queue to the workers', reach)
    log = f'{REMOTE_QUEUES}/{queue}.log'
    runner = f'{REMOTE_QUEUES}/{os.path.basename(QUEUE_RUNNER)}'
    start = (f'nohup bash {runner} {REMOTE_QUEUES}/{queue}.queue >>{log} 2>&1 </dev/null & '
             f'echo "$(hostname): queue {queue} started, progress in {log}"')
    shell.run(tpu.ssh(start), 'starting the queue runner', reach)
    shell.report(f'queue {queue} ({len(runs)} runs) runs in the background; watch: python launch/tpu.py status')


def cmd_sweep(args, tpu, shell):
    overrides = config_overrides(args.overrides)
    runs = plan_sweep(args.sweep, args.study_root)
    if not args.study_root.startswith('gs://'):
        info(f'warning: {args.study_root} is not gs://; each worker then keeps its own copy, so the '
             'done-check and TensorBoard see only that host: use a gs:// study root on a pod')
    info(f'{args.sweep}: {len(runs)} runs under {args.study_root}')
    refuse_if_running(tpu, shell, args.force)
    if args.queue:
        start_queue(run_name(args.sweep), runs, overrides, tpu, shell)
    else:
        run_sequentially(runs, overrides, tpu, shell)


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


def cmd_status(args, tpu, shell):
    shell.run(tpu.ssh(status_command()), 'reading the workers\' status',
              'check that the TPU VM exists and is READY: gcloud compute tpus tpu-vm list --zone=ZONE')
    if args.study_root:
        command = in_repo('PY=$(bash launch/setup.sh --tpu 2>/dev/null)',
                          f'"$PY" -m trm_spmd.analysis status {remote_path(args.study_root)}')
        shell.run(tpu.ssh(command, worker='0'), 'summarising the study on worker 0',
                  'check the study root and that setup ran on the workers')


def logs_command(run, lines, follow, prefix):
    log = remote_log(safe_name(run) if run else '')
    pick = f'log={log}' if run else f'log=$(ls -t {REMOTE_LOGS}/*.log 2>/dev/null | head -n 1)'
    tail = f'tail -n {lines}' + (' -F' if follow else '') + ' "$log"'
    if prefix:   # several workers stream at once: say which line came from which
        tail += ' | sed -u "s/^/$(hostname): /"'
    missing = f'no log {log}' if run else f'no logs in {REMOTE_LOGS}'
    return (f'{pick}; if [ -f "$log" ]; then echo "== $(hostname): $log"; {tail}; '
            f'else echo "== $(hostname): {missing}"; fi')


def cmd_logs(args, tpu, shell):
    run = run_name(args.run) if args.run and '.py' in args.run else args.run
    command = logs_command(run, args.lines, args.follow, prefix=args.worker == 'all')
    shell.run(tpu.ssh(command, worker=args.worker), 'reading the logs',
              'check --worker (0 to hosts-1, or all) and that the TPU VM is READY')


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


def cmd_stop(args, tpu, shell):
    shell.run(tpu.ssh(stop_command(args.wait_s)), 'stopping training on the workers',
              'check that the TPU VM is READY; `python launch/tpu.py status` shows what still runs')
    shell.report('stopped; the same run or sweep command resumes from the newest checkpoint')


def cmd_delete(args, tpu, shell):
    if not (args.yes or shell.dry_run):
        try:
            answer = input(f'Delete TPU VM {tpu.name} in {tpu.zone}? Its disks and anything running go. [y/N] ')
        except EOFError:
            answer = ''
        if answer.strip().lower() not in ('y', 'yes'):
            info('not deleted')
            return
    shell.run(tpu.gcloud('delete', tpu.name) + ['--quiet'], f'deleting TPU VM {tpu.name}',
              'check the name and zone: gcloud compute tpus tpu-vm list --zone=ZONE')


# ---- command line ----------------------------------------------------------------------


def common_flags():
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group('TPU VM')
    g.add_argument('--name', default=os.environ.get('TRM_TPU_NAME', ''), help='TPU VM name [$TRM_TPU_NAME]')
    g.add_argument('--zone', default=os.environ.get('TRM_TPU_ZONE', ''),
                   help='zone, e.g. us-central2-b [$TRM_TPU_ZONE]')
    g.add_argument('--project', default=os.environ.get('TRM_TPU_PROJECT', ''),
                   help='Google Cloud project (default: gcloud\'s) [$TRM_TPU_PROJECT]')
    g.add_argument('--dry_run', action='store_true', help='print the commands, one per line; run nothing')
    return p


def add_run_flags(p):
    p.add_argument('--force', action='store_true', help='start even if training already runs on the workers')
    p.set_defaults(takes_overrides=True)
    p.epilog = ('Config overrides are the trainer\'s own flags, --config.KEY=VALUE (e.g. --config.optim.lr=3e-4, '
                '--noconfig.ema.enabled), any number of them: every run receives them after its --config, '
                'in the order given.')


def build_parser():
    common = common_flags()
    parser = argparse.ArgumentParser(prog='launch/tpu.py', description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog='Run `launch/tpu.py SUBCOMMAND --help` for its flags.')
    sub = parser.add_subparsers(dest='command', required=True, metavar='SUBCOMMAND')

    def add(name, handler, help_text):
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler, takes_overrides=False)
        return p

    p = add('create', cmd_create, 'create the TPU VM (a v4-64 is 32 chips = 8 hosts x 4 devices)')
    p.add_argument('--accelerator_type', default='v4-64', help='default: %(default)s')
    p.add_argument('--runtime_version', default='tpu-ubuntu2204-base', help='default: %(default)s')
    kind = p.add_mutually_exclusive_group()
    kind.add_argument('--preemptible', action='store_true', help='preemptible TPU (cheaper, can be stopped)')
    kind.add_argument('--spot', action='store_true', help='Spot TPU (cheaper, can be preempted)')
    p.add_argument('--network', default='', help='VPC network (default: gcloud\'s "default")')

    p = add('setup', cmd_setup, 'install trm_spmd and its Python environment on every worker')
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument('--repo_url', help='git clone (first time) or git pull this repository on every worker')
    how.add_argument('--copy', action='store_true',
                     help='copy this checkout (files git tracks plus new, not ignored ones) to every worker')
    p.add_argument('--branch', default='', help='branch or tag to clone/pull (with --repo_url)')

    p = add('data', cmd_data, 'build or copy the dataset into the same directory on every worker')
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument('--build_args',
                     help='arguments of python -m trm_spmd.data.build_TASK (deterministic: every host builds '
                          'the same bytes), e.g. "--generate=5000 --blanks=30:45"')
    src.add_argument('--copy_from', help='gs:// directory holding a built dataset')
    p.add_argument('--task', choices=('sudoku', 'maze', 'arc'), default='sudoku',
                   help='with --build_args: whose builder runs, trm_spmd.data.build_TASK (default: %(default)s)')
    p.add_argument('--rebuild', action='store_true',
                   help='with --build_args: delete the dataset directory first (default: keep one that exists)')
    p.add_argument('--dest', default=DEFAULT_DATA,
                   help='dataset directory on each worker, relative to ~/trm_spmd or absolute '
                        '(default: %(default)s)')

    p = add('run', cmd_run, 'train one config on all workers (detached unless --foreground)')
    p.add_argument('--config', required=True, help='FILE.py[:ARG], e.g. configs/tn_sweep.py:t3_n6')
    p.add_argument('--workdir', required=True, help='run directory; gs://BUCKET/... on a pod')
    p.add_argument('--run_name', default='', help='log name (default: config file stem + arg)')
    p.add_argument('--foreground', action='store_true', help='stay attached until the run ends')
    add_run_flags(p)

    p = add('sweep', cmd_sweep, 'train every run of a sweep, one after another, one workdir per run')
    p.add_argument('--sweep', required=True, help='configs/FILE.py (its sweep()) or configs/FILE.py:SWEEP_FN')
    p.add_argument('--study_root', required=True,
                   help='runs go to STUDY_ROOT/<config name>/<variant or arg>; gs://BUCKET/... on a pod')
    p.add_argument('--queue', action='store_true',
                   help='start a detached queue runner on the workers instead of running attached')
    add_run_flags(p)

    p = add('status', cmd_status, 'per worker: is training running, and the newest log lines')
    p.add_argument('--study_root', default='', help='also summarise this study (on worker 0)')

    p = add('logs', cmd_logs, 'print (or follow) the per-host training logs')
    p.add_argument('--worker', default='0', help='worker index or "all" (default 0: host 0 logs the training)')
    p.add_argument('--run', default='', help='run name or config spec (default: the newest log)')
    p.add_argument('--lines', type=int, default=50, help='default: %(default)s')
    p.add_argument('--follow', action='store_true', help='keep printing new lines (Ctrl-C to stop)')

    p = add('stop', cmd_stop, 'SIGTERM training on all workers (it checkpoints, then exits)')
    p.add_argument('--wait_s', type=int, default=120, help='seconds to wait for exit (default: %(default)s)')

    p = add('delete', cmd_delete, 'delete the TPU VM')
    p.add_argument('--yes', action='store_true', help='do not ask for confirmation')
    return parser


def parse_args(argv):
    """argparse's flags, plus what it leaves over: for run and sweep, the trainer's
    --config.KEY=VALUE overrides, which only the trainer's config can type."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not args.takes_overrides:
        parser.error(f'unrecognized arguments: {" ".join(extra)}')
    args.overrides = extra
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        for flag, env in (('name', 'TRM_TPU_NAME'), ('zone', 'TRM_TPU_ZONE')):
            if not getattr(args, flag):
                raise LaunchError(f'no TPU {flag}: pass --{flag} or set {env}')
        tpu = Tpu(args.name, args.zone, args.project)
        args.handler(args, tpu, Shell(args.dry_run))
    except LaunchError as e:
        print(f'error: {e}', file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print('interrupted: processes may still run on the workers; see `python launch/tpu.py status`, '
              'end them with `python launch/tpu.py stop`', file=sys.stderr)
        return 130
    return 0


if __name__ == '__main__':
    sys.exit(main())
