"""data: the same dataset in the same directory on every worker, built there by the task's
builder or copied from a bucket, then compared across the workers by a fingerprint."""

import os
import re
import shlex

from .remote import ENV_PYTHON, dataset_fingerprint_command, in_repo, remote_path
from .shell import LaunchError, info

# Relative to ~/trm_spmd, the trainer's working directory; the configs' data.path.
DEFAULT_DATA = 'data/sudoku-extreme-1k-aug-1000'


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
        make = f'{ENV_PYTHON} && "$PY" -m trm_spmd.build {args.task} {shlex.join(words)}'
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
