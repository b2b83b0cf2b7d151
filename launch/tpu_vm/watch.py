"""status, logs and stop: what runs on the workers, their per-host logs, and SIGTERM to the
training (which checkpoints, then exits)."""

from .remote import in_repo, logs_command, remote_path, run_name, status_command, stop_command


def cmd_status(args, tpu, shell):
    shell.run(tpu.ssh(status_command()), 'reading the workers\' status',
              'check that the TPU VM exists and is READY: gcloud compute tpus tpu-vm list --zone=ZONE')
    if args.study_root:
        command = in_repo('PY=$(bash launch/setup.sh --tpu 2>/dev/null)',
                          f'"$PY" -m trm_spmd.analysis status {remote_path(args.study_root)}')
        shell.run(tpu.ssh(command, worker='0'), 'summarising the study on worker 0',
                  'check the study root and that setup ran on the workers')


def cmd_logs(args, tpu, shell):
    run = run_name(args.run) if args.run and '.py' in args.run else args.run
    command = logs_command(run, args.lines, args.follow, prefix=args.worker == 'all')
    shell.run(tpu.ssh(command, worker=args.worker), 'reading the logs',
              'check --worker (0 to hosts-1, or all) and that the TPU VM is READY')


def cmd_stop(args, tpu, shell):
    shell.run(tpu.ssh(stop_command(args.wait_s)), 'stopping training on the workers',
              'check that the TPU VM is READY; `python launch/tpu.py status` shows what still runs')
    shell.report('stopped; the same run or sweep command resumes from the newest checkpoint')
