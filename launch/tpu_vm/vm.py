"""create, setup and delete: the TPU VM, and this checkout and its Python environment on every
worker."""

import os
import shlex
import subprocess
import tarfile

from . import REPO, STAGING
from .remote import ENV_PYTHON, REMOTE_REPO, git_checkout_command, in_repo
from .shell import LaunchError, info

SOURCE_TARBALL = 'trm_spmd-src.tar.gz'


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
