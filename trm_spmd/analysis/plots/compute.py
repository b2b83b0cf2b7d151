"""Accuracy against what it cost: against cumulative training compute, the Pareto front of
compute and accuracy, and best accuracy and time to it against the global batch size."""

import math

from trm_spmd.analysis.plots import draw
from trm_spmd.analysis.runs import EVAL_EXACT, cfg


def accuracy_vs_compute(runs, baseline):
    curves = []
    for run in runs:
        points = run.series(EVAL_EXACT)
        if not points:
            continue
        pflop = run.pflop_at([s for s, _ in points])
        xy = [(x, draw.pct(v)) for x, (_, v) in zip(pflop, points) if x is not None and x > 0]
        if xy:
            curves.append((run, xy))
    if not curves:
        raise draw.Skip('no run has both eval/exact_accuracy and compute (progress/pflop, or '
                   'flops_per_example_step in run.json with progress/examples)')
    fig = draw.figure(9, 5.5)
    ax = fig.subplots()
    for color, (run, xy) in zip(draw.colors(len(curves)), curves):
        xs, ys = zip(*xy)
        ax.plot(xs, ys, color=color, lw=1.4, marker='o', ms=3.5, label=draw.legend_label(run))
    ax.set_xscale('log')
    draw.plain_log_axis(ax.xaxis)
    ax.set_ylim(-2, 102)
    ax.set_xlabel('cumulative training compute (PFLOP, log scale)')
    ax.set_ylabel(draw.ACC_LABEL)
    ax.set_title('Eval exact accuracy vs training compute')
    ax.grid(True, which='minor', alpha=0.12)
    fig.tight_layout()
    if len(curves) <= 8:
        ax.legend(loc='best')
    else:
        handles, labels = ax.get_legend_handles_labels()
        draw.legend_below(fig, handles, labels)
    return fig


def pareto_front(points):
    """Indices of points no other point beats on both lower compute and higher accuracy;
    `points` are (compute, accuracy)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def _step_path(xs, ys):
    """Corner points of the post-step line through (xs, ys)."""
    path_x, path_y = [xs[0]], [ys[0]]
    for x, y in zip(xs[1:], ys[1:]):
        path_x += [x, x]
        path_y += [path_y[-1], y]
    return path_x, path_y


def pareto(runs, baseline):
    entries = [(r.pflop, draw.best_pct(r), r) for r in runs]
    entries = [e for e in entries if draw.finite(e[0]) and e[0] > 0 and not math.isnan(e[1])]
    if len(entries) < 2:
        raise draw.Skip('needs at least 2 runs with an eval and known compute (progress/pflop, '
                   'or flops_per_example_step in run.json with progress/examples)')
    front = pareto_front([(x, y) for x, y, _ in entries])
    fig = draw.figure(10, 6.5)
    ax = fig.subplots()
    others = [e for i, e in enumerate(entries) if i not in front]
    on_front = [entries[i] for i in front]
    if others:
        ax.scatter([e[0] for e in others], [e[1] for e in others], color='tab:blue', s=30,
                   label='run', zorder=3)
    ax.scatter([e[0] for e in on_front], [e[1] for e in on_front], color='tab:red', s=45,
               label='run on the Pareto front', zorder=4)
    ax.step([e[0] for e in on_front], [e[1] for e in on_front], where='post', color='tab:red',
            lw=1.3, alpha=0.8, label='Pareto front (more accuracy needs more compute)')
    ax.set_xscale('log')
    draw.plain_log_axis(ax.xaxis)
    ax.set_xlabel('total training compute (PFLOP, log scale)')
    ax.set_ylabel(draw.BEST_LABEL)
    ax.set_title('Accuracy vs compute: Pareto front')
    ax.grid(True, which='minor', alpha=0.12)
    ax.legend(loc='lower right')
    low, high = min(e[1] for e in entries), max(e[1] for e in entries)
    pad = max(3.0, 0.08 * (high - low))
    ax.set_ylim(max(-2, low - pad), min(105, high + pad))
    xs = [e[0] for e in entries]
    ax.set_xlim(min(xs) / 1.6, max(xs) * 1.6)
    fig.tight_layout()
    draw.label_points(ax, xs, [e[1] for e in entries], [e[2].label for e in entries],
                  lines=[_step_path([e[0] for e in on_front], [e[1] for e in on_front])])
    return fig


def batch_scaling(runs, baseline):
    family, members = draw.pick_family(
        runs, lambda r: draw.as_int(cfg(r.config, 'data.global_batch_size')))
    points = []
    for batch, run in members:
        best = run.best_eval()
        if best and draw.finite(best.value):
            points.append((batch, draw.pct(best.value), best.elapsed_s, run))
    if len({p[0] for p in points}) < 2:
        raise draw.Skip('needs evals from runs of one config family with at least 2 different '
                   'data.global_batch_size values')
    points.sort(key=lambda p: (p[0], -p[1]))
    fig = draw.figure(12.5, 4.8)
    ax_acc, ax_time = fig.subplots(1, 2)
    timed = [p for p in points if p[2] is not None]
    hours = max((p[2] for p in timed), default=0) / 3600 >= 2
    unit, div = ('h', 3600) if hours else ('min', 60)
    best_per_batch = {}
    for p in points:
        best_per_batch.setdefault(p[0], p)  # sorted: the first per batch is its best
    line = sorted(best_per_batch.values(), key=lambda p: p[0])
    ax_acc.plot([p[0] for p in line], [p[1] for p in line], color='tab:blue', lw=1.5)
    ax_acc.scatter([p[0] for p in points], [p[1] for p in points], color='tab:blue', zorder=3)
    timed_line = [p for p in line if p[2] is not None]
    if timed:
        ax_time.plot([p[0] for p in timed_line], [p[2] / div for p in timed_line],
                     color='tab:green', lw=1.5)
        ax_time.scatter([p[0] for p in timed], [p[2] / div for p in timed],
                        color='tab:green', zorder=3)
    else:
        draw.note(ax_time, 'no timing data (metrics lines lack "time")')
    batches = sorted(best_per_batch)
    for ax in (ax_acc, ax_time):
        ax.set_xscale('log', base=2)
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
        ax.minorticks_off()
        ax.set_xlabel('global batch size (examples per step, log2 scale)')
    ax_acc.set_ylabel(draw.BEST_LABEL)
    ax_acc.set_title('Best eval exact accuracy')
    ax_time.set_ylabel(f'wall time to best eval ({unit})')
    ax_time.set_ylim(bottom=0)
    ax_time.set_title('Time to best eval')
    lrs = {cfg(p[3].config, 'optim.lr') for p in points}
    suptitle = f'{family}: best accuracy and time to best vs global batch size'
    if len(lrs) == 1 and draw.finite(next(iter(lrs))):
        suptitle += f' (lr {draw.fmt_lr(next(iter(lrs)))})'
    fig.suptitle(suptitle, fontweight='bold')
    fig.tight_layout()
    if len(lrs) > 1:
        lr_text = [f'lr {draw.fmt_lr(lr)}' if draw.finite(lr) else ''
                   for lr in (cfg(p[3].config, 'optim.lr') for p in points)]
        draw.label_points(ax_acc, [p[0] for p in points], [p[1] for p in points], lr_text,
                      lines=[([p[0] for p in line], [p[1] for p in line])])
        if timed:
            draw.label_points(ax_time, [p[0] for p in timed], [p[2] / div for p in timed],
                          [t for p, t in zip(points, lr_text) if p[2] is not None],
                          lines=[([p[0] for p in timed_line],
                                  [p[2] / div for p in timed_line])])
    return fig
