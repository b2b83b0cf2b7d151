"""launch/tpu.py's command line: a subcommand per step of a pod's life (its handler lives in the
module named for it), each with --help and --dry_run, and the common --name/--zone/--project."""

import argparse
import os
import sys

from .data import DEFAULT_DATA, cmd_data
from .gcloud import Tpu
from .run import cmd_run
from .shell import LaunchError, Shell
from .sweep import cmd_sweep
from .vm import cmd_create, cmd_delete, cmd_setup
from .watch import cmd_logs, cmd_status, cmd_stop

DESCRIPTION = 'Run trm_spmd on a Cloud TPU VM: one program per host, the same command on every host.'


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
    parser = argparse.ArgumentParser(prog='launch/tpu.py', description=DESCRIPTION,
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
                     help='arguments of python -m trm_spmd.build TASK (deterministic: every host builds '
                          'the same bytes), e.g. "--generate=5000 --blanks=30:45"')
    src.add_argument('--copy_from', help='gs:// directory holding a built dataset')
    p.add_argument('--task', choices=('sudoku', 'maze', 'arc'), default='sudoku',
                   help='with --build_args: whose builder runs, trm_spmd.build TASK (default: %(default)s)')
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
