"""Command line: compare runs, show the study dashboard, draw the study plots, show what a
run gets wrong.

    python -m trm_spmd.analysis compare ROOT/tn_sweep [--out=DIR] [--format=markdown|csv|both]
    python -m trm_spmd.analysis status ROOT
    python -m trm_spmd.analysis plot 'ROOT/*/*' --out=DIR [--baseline=RUN]
    python -m trm_spmd.analysis failures RUN [--task=T] [--step=S] [--limit=N] [--out=DIR]

Every command but `failures` takes run directories, globs, or a study root (searched
recursively for directories holding config.json), local or on a bucket (gs://...); --out
may be either too. `failures` takes one run directory.
"""

import argparse
import sys
import time

from trm_spmd import errors, fs
from trm_spmd.analysis import failures as failures_lib, plots, runs as runs_lib, tables


class UsageError(errors.UserError):
    pass


def _add_runs_arguments(parser):
    parser.add_argument('runs', nargs='+', metavar='DIR_OR_GLOB',
                        help='run directories, globs, or study roots; local or gs://')
    parser.add_argument('--stale_after', '--stale-after', type=float, default=30.0,
                        metavar='MINUTES',
                        help='a "running" run silent this long is shown as stale (default 30)')


def _parser():
    parser = argparse.ArgumentParser(
        prog='python -m trm_spmd.analysis',
        description='Tables, dashboard and plots from trm_spmd run directories.')
    commands = parser.add_subparsers(dest='command', required=True, metavar='COMMAND')

    compare = commands.add_parser('compare', help='one table row per run')
    _add_runs_arguments(compare)
    compare.add_argument('--out', metavar='DIR',
                         help='also write compare.md / compare.csv here (local or gs://)')
    compare.add_argument('--format', choices=['markdown', 'csv', 'both'],
                         help='default: markdown, or both when --out is given')

    status = commands.add_parser('status', help='study dashboard: every run and its status')
    _add_runs_arguments(status)

    plot = commands.add_parser('plot', help='PNG plots of the runs')
    _add_runs_arguments(plot)
    plot.add_argument('--out', metavar='DIR', required=True,
                      help='directory for the PNGs (local or gs://)')
    plot.add_argument('--baseline', metavar='RUN',
                      help='run to mark as the baseline (label, variant, name or path); '
                           'default: the run whose variant or name contains "baseline"')

    failures = commands.add_parser(
        'failures', help='held-out examples a run got wrong: question, answer, prediction, verdict')
    failures.add_argument('run', metavar='RUN', help='a run directory (local or gs://)')
    failures.add_argument('--task', help="one task's (a multi-task run has several); default: every task")
    failures.add_argument('--step', type=int, help="the evaluation at this step; default: each task's newest")
    failures.add_argument('--limit', type=int, default=5, metavar='N',
                          help='failures shown per task (default 5)')
    failures.add_argument('--out', metavar='DIR',
                          help='also draw them: DIR/failures_TASK_STEP.png (local or gs://)')
    return parser


def _load(args, now):
    loaded = runs_lib.load_runs(args.runs, now=now, stale_after_s=args.stale_after * 60)
    for run in loaded:
        for warning in run.warnings:
            print(f'warning: {warning}', file=sys.stderr)
    return loaded


def _write(path, text):
    fs.write_text(path, text)
    print(f'wrote {path}', file=sys.stderr)


def _compare(args, runs):
    fmt = args.format or ('both' if args.out else 'markdown')
    if fmt == 'both' and not args.out:
        raise UsageError('--format=both writes compare.csv, which needs --out=DIR')
    if args.out:
        fs.makedirs(args.out)
    if fmt in ('markdown', 'both'):
        text = tables.compare_markdown(runs)
        sys.stdout.write(text)
        if args.out:
            _write(fs.join(args.out, 'compare.md'), text)
    if fmt in ('csv', 'both'):
        text = tables.compare_csv(runs)
        if args.out:
            _write(fs.join(args.out, 'compare.csv'), text)
        else:
            sys.stdout.write(text)


def _plot(args, runs):
    results = plots.render_all(runs, args.out, baseline=args.baseline)
    for filename, path, reason in results:
        if path:
            print(f'wrote   {path}')
        else:
            print(f'skipped {filename}: {reason}')


def _failures(args):
    if args.out:
        plots.require_matplotlib()   # before reading, so the fix comes first
    samples = failures_lib.load_samples(args.run, task=args.task, step=args.step)
    for sample in samples:
        print(sample.describe())
        for record in sample.failures[:max(args.limit, 0)]:
            print(f'\n#{record.index} (halting confidence {100 * record.confidence:.0f}%): {record.verdict}')
            print(record.render())
        print()
        if args.out:
            from trm_spmd.analysis import gallery
            fs.makedirs(args.out)
            path = fs.join(args.out, f'failures_{sample.task}_{sample.step}.png')
            fs.write_bytes(path, gallery.png(gallery.figure(sample, limit=max(args.limit, 1))))
            print(f'wrote {path}', file=sys.stderr)


def main(argv=None):
    args = _parser().parse_args(argv)
    now = time.time()
    try:
        if args.command == 'failures':
            _failures(args)
            return 0
        if args.command == 'plot':
            plots.require_matplotlib()  # before reading runs, so the fix comes first
        runs = _load(args, now)
        if args.command == 'compare':
            _compare(args, runs)
        elif args.command == 'status':
            sys.stdout.write(tables.status_markdown(runs, now))
        else:
            _plot(args, runs)
    except errors.UserError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    except OSError as e:
        print(f'error: {e.filename or ""}: {e.strerror}; check the path and its permissions',
              file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
