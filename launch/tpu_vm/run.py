"""run: one training run on every worker, detached (the default) or attached; and the checks
that `run` and `sweep` share: nothing else trains there already, and what a failed run's exit
status means."""

from .overrides import check_config_path, config_overrides
from .remote import (SSH_FAILED_EXIT, STOPPED_EXIT, background_run_command, foreground_run_command,
                     run_name, running_check_command, safe_name)
from .shell import LaunchError


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
