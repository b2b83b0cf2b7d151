"""sweep: every run of a config file's sweep, one workdir each under the study root, either
attached one after another, or as a queue that a runner works through on every worker
(launch/queue_runner.sh) after the launcher has gone."""

import dataclasses
import os
import shlex

from . import REPO, STAGING
from .overrides import check_config_path, config_overrides, import_project
from .remote import (REMOTE_LOGS, REMOTE_QUEUES, SSH_FAILED_EXIT, STOPPED_EXIT, foreground_run_command,
                     remote_path, run_name, safe_name)
from .run import refuse_if_running, run_failure
from .shell import LaunchError, info

# `sweep --queue` copies this script to every worker and runs it there.
QUEUE_RUNNER = os.path.join(REPO, 'launch', 'queue_runner.sh')


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
