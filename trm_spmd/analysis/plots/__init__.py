"""Study plots, one PNG each, drawn only when the runs carry the data a plot needs.

matplotlib is optional (the `plots` extra) and is imported only when plotting, so the
tables and the dashboard work without it. Figures use the object API on an Agg canvas:
no display is needed and no pyplot state leaks between plots.
"""

import io
import math
import re

from trm_spmd import errors, fs
from trm_spmd.analysis.runs import EVAL_EXACT, cfg, is_number, tasks_of

DPI = 150
INSTALL_HINT = 'pip install matplotlib (or the optional group: pip install "trm_spmd[plots]")'

_STYLE = {
    'axes.grid': True, 'grid.alpha': 0.3, 'grid.linestyle': '-',
    'axes.spines.top': False, 'axes.spines.right': False,
    'axes.titlesize': 12, 'axes.titleweight': 'bold', 'axes.labelsize': 10.5,
    'xtick.labelsize': 9, 'ytick.labelsize': 9, 'legend.fontsize': 9,
    'figure.facecolor': 'white', 'savefig.facecolor': 'white',
}
ACC_LABEL = 'eval exact accuracy (%)'
BEST_LABEL = 'best eval exact accuracy (%)'
STEP_LABEL = 'training step (optimizer updates)'


class MatplotlibMissing(errors.UserError):
    pass


class BaselineError(errors.UserError):
    pass


class Skip(Exception):
    """The runs lack the data this plot needs; the message says what is missing."""


def require_matplotlib():
    try:
        import matplotlib
        from matplotlib.backends import backend_agg  # noqa: F401
    except ImportError:
        raise MatplotlibMissing(
            f'`plot` needs matplotlib, which is not installed: {INSTALL_HINT}') from None
    return matplotlib


def _figure(width, height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _colors(n):
    from matplotlib import colormaps
    if n <= 10:
        return [colormaps['tab10'](i) for i in range(n)]
    if n <= 20:
        # tab20 comes in light/dark pairs; spreading them keeps neighbours distinct.
        return [colormaps['tab20'](i) for i in list(range(0, 20, 2)) + list(range(1, 20, 2))][:n]
    return [colormaps['turbo'](i / (n - 1)) for i in range(n)]


def _pct(value):
    return 100 * value if is_number(value) and math.isfinite(value) else math.nan


def _finite(value):
    return is_number(value) and math.isfinite(value)


def _as_int(value):
    if is_number(value) and math.isfinite(value) and value == int(value):
        return int(value)
    return None


def _si(x, _pos=None):
    for div, suffix in ((1e9, 'G'), (1e6, 'M'), (1e3, 'k')):
        if abs(x) >= div:
            return f'{x / div:g}{suffix}'
    return f'{x:g}'


def _plain_log_axis(axis):
    """Log scale labeled 0.3, 1, 2, 5, 10 rather than 10^0: a reader compares values, and
    one or two decades is the usual span here."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: f'{x:g}'))
    axis.set_minor_formatter(NullFormatter())


def _step_axis(ax):
    from matplotlib.ticker import FuncFormatter
    ax.xaxis.set_major_formatter(FuncFormatter(_si))
    ax.set_xlabel(STEP_LABEL)


def _fmt_lr(lr):
    mantissa, exponent = f'{lr:.2e}'.split('e')
    return f'{mantissa.rstrip("0").rstrip(".")}e{int(exponent)}'


def _legend_label(run):
    return run.label if run.status == 'done' else f'{run.label} [{run.status}]'


def _legend_below(fig, handles, labels):
    # As many columns as the longest label allows across the figure's width (~0.075 in
    # per character at the legend's 9 pt, plus the line sample).
    column_in = 0.075 * max(len(label) for label in labels) + 0.7
    ncol = max(1, min(len(labels), int(fig.get_figwidth() // column_in), 5))
    fig.legend(handles, labels, loc='upper center', bbox_to_anchor=(0.5, 0.0), ncol=ncol,
               frameon=False)


def _note(ax, text):
    ax.text(0.5, 0.5, text, ha='center', va='center', transform=ax.transAxes, color='0.4')


def _overlap(a, b):
    """Area shared by two display-space boxes."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(0.0, width) * max(0.0, height)


_OFFSETS = [(6, 5, 'left', 'bottom'), (6, -5, 'left', 'top'), (-6, 5, 'right', 'bottom'),
            (-6, -5, 'right', 'top'), (0, 9, 'center', 'bottom'), (0, -9, 'center', 'top'),
            (10, 0, 'left', 'center'), (-10, 0, 'right', 'center'),
            (10, 16, 'left', 'bottom'), (-10, -16, 'right', 'top'),
            (-10, 16, 'right', 'bottom'), (10, -16, 'left', 'top')]


def _label_points(ax, xs, ys, labels, lines=(), fontsize=8):
    """Labels each point at the nearby spot that overlaps the fewest markers, drawn
    `lines` ([(xs, ys)]) and labels already placed, inside the axes, so dense clusters
    stay readable."""
    from matplotlib.transforms import Bbox
    fig = ax.figure
    fig.canvas.draw()  # final limits, so data-to-pixel transforms are exact
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    pixels = ax.transData.transform(list(zip(xs, ys)))
    taken = [Bbox.from_extents(px - 4, py - 4, px + 4, py + 4) for px, py in pixels]
    for line_xs, line_ys in lines:
        corners = ax.transData.transform(list(zip(line_xs, line_ys)))
        for (x0, y0), (x1, y1) in zip(corners, corners[1:]):
            pieces = max(1, int(math.hypot(x1 - x0, y1 - y0) // 6))
            for i in range(pieces + 1):
                px, py = x0 + (x1 - x0) * i / pieces, y0 + (y1 - y0) * i / pieces
                taken.append(Bbox.from_extents(px - 1.5, py - 1.5, px + 1.5, py + 1.5))
    for x, y, label in zip(xs, ys, labels):
        best = None
        for dx, dy, ha, va in _OFFSETS:
            far = abs(dy) > 10
            text = ax.annotate(label, (x, y), xytext=(dx, dy), textcoords='offset points',
                               ha=ha, va=va, fontsize=fontsize,
                               arrowprops=dict(arrowstyle='-', color='0.6', lw=0.6)
                               if far else None)
            box = text.get_window_extent(renderer).padded(2)
            outside = box.width * box.height - _overlap(box, frame)
            cost = sum(_overlap(box, t) for t in taken) + 2 * outside + (1 if far else 0)
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, text, box)
            else:
                text.remove()
            if cost == 0:
                break
        taken.append(best[2])


def _pick_family(runs, key):
    """(config name, [(key, run)]) of the family whose runs take the most distinct values
    of `key`, so a mixed set of runs yields the sweep that actually varies it."""
    families = {}
    for run in runs:
        value = key(run)
        if value is not None:
            families.setdefault(run.name, []).append((value, run))
    if not families:
        return None, []
    name = max(sorted(families),
               key=lambda f: (len({v for v, _ in families[f]}), len(families[f])))
    return name, families[name]


def _best_pct(run):
    best = run.best_eval()
    return _pct(best.value) if best else math.nan


# ---- the plots ---------------------------------------------------------------------------

def learning_curves(runs, baseline):
    train = {id(r): r.series('train/loss') for r in runs}
    evals = {id(r): r.series(EVAL_EXACT) for r in runs}
    shown = [r for r in runs if train[id(r)] or evals[id(r)]]
    if not shown:
        raise Skip('no run has logged train/loss or eval/exact_accuracy yet')
    from matplotlib.lines import Line2D
    fig = _figure(13, 4.8)
    ax_loss, ax_acc = fig.subplots(1, 2)
    handles = []
    for color, run in zip(_colors(len(shown)), shown):
        if train[id(run)]:
            steps, loss = zip(*train[id(run)])
            ax_loss.plot(steps, [v if math.isfinite(v) else math.nan for v in loss],
                         color=color, lw=1.4)
        if evals[id(run)]:
            steps, acc = zip(*evals[id(run)])
            ax_acc.plot(steps, [_pct(v) for v in acc], color=color, lw=1.4, marker='o', ms=3.5)
        handles.append(Line2D([], [], color=color, lw=2))
    losses = [v for r in shown for _, v in train[id(r)] if math.isfinite(v)]
    if losses and min(losses) > 0:
        ax_loss.set_yscale('log')
        _plain_log_axis(ax_loss.yaxis)
        ax_loss.set_ylabel('train loss (log scale)')
    else:
        ax_loss.set_ylabel('train loss')
    if not losses:
        _note(ax_loss, 'no finite train/loss logged')
    if not any(evals[id(r)] for r in shown):
        _note(ax_acc, 'no eval yet')
    ax_loss.set_title('Training loss')
    ax_acc.set_title('Eval exact accuracy (puzzles fully solved)')
    ax_acc.set_ylabel(ACC_LABEL)
    ax_acc.set_ylim(-2, 102)
    for ax in (ax_loss, ax_acc):
        _step_axis(ax)
    fig.tight_layout()
    _legend_below(fig, handles, [_legend_label(r) for r in shown])
    return fig


def per_task(runs, baseline):
    """Held-out exact accuracy against steps, one panel per task: a multi-task run beside
    the runs of each of its tasks alone."""
    names = tasks_of(runs)
    if len(names) < 2:
        raise Skip('the runs train one task')
    from matplotlib.lines import Line2D
    fig = _figure(5.2 * len(names), 4.6)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    colors = dict(zip((id(r) for r in runs), _colors(len(runs))))
    shown = []
    for ax, task in zip(axes, names):
        for run in runs:
            key = run.task_exact_key(task)
            points = run.series(key) if key else []
            if points:
                steps, acc = zip(*points)
                ax.plot(steps, [_pct(v) for v in acc], color=colors[id(run)], lw=1.4, marker='o', ms=3.5)
                shown += [run] if run not in shown else []
        if not ax.lines:
            _note(ax, 'no eval yet')
        ax.set_title(f'{task}: eval exact accuracy')
        ax.set_ylabel(ACC_LABEL)
        ax.set_ylim(-2, 102)
        _step_axis(ax)
    if not shown:
        raise Skip('no run has evaluated a task yet')
    fig.tight_layout()
    shown = [r for r in runs if r in shown]
    _legend_below(fig, [Line2D([], [], color=colors[id(r)], lw=2) for r in shown], [_legend_label(r) for r in shown])
    return fig


def accuracy_vs_compute(runs, baseline):
    curves = []
    for run in runs:
        points = run.series(EVAL_EXACT)
        if not points:
            continue
        pflop = run.pflop_at([s for s, _ in points])
        xy = [(x, _pct(v)) for x, (_, v) in zip(pflop, points) if x is not None and x > 0]
        if xy:
            curves.append((run, xy))
    if not curves:
        raise Skip('no run has both eval/exact_accuracy and compute (progress/pflop, or '
                   'flops_per_example_step in run.json with progress/examples)')
    fig = _figure(9, 5.5)
    ax = fig.subplots()
    for color, (run, xy) in zip(_colors(len(curves)), curves):
        xs, ys = zip(*xy)
        ax.plot(xs, ys, color=color, lw=1.4, marker='o', ms=3.5, label=_legend_label(run))
    ax.set_xscale('log')
    _plain_log_axis(ax.xaxis)
    ax.set_ylim(-2, 102)
    ax.set_xlabel('cumulative training compute (PFLOP, log scale)')
    ax.set_ylabel(ACC_LABEL)
    ax.set_title('Eval exact accuracy vs training compute')
    ax.grid(True, which='minor', alpha=0.12)
    fig.tight_layout()
    if len(curves) <= 8:
        ax.legend(loc='best')
    else:
        handles, labels = ax.get_legend_handles_labels()
        _legend_below(fig, handles, labels)
    return fig


def _best_first(run):
    value = _best_pct(run)
    return (1, 0.0) if math.isnan(value) else (0, -value)


def ablations(runs, baseline):
    if not any(r.best_eval() for r in runs):
        raise Skip('no run has an eval yet')
    base_value = _best_pct(baseline) if baseline is not None else math.nan
    # Best first; runs without an eval last, still listed so a crashed arm is visible.
    ordered = sorted(runs, key=_best_first)
    values = [_best_pct(r) for r in ordered]
    top = max((v for v in values if not math.isnan(v)), default=100.0)
    fig = _figure(10, 1.4 + 0.42 * len(ordered))
    ax = fig.subplots()
    ys = list(range(len(ordered)))
    is_base = [r is baseline for r in ordered]
    ax.barh(ys, [0 if math.isnan(v) else v for v in values], height=0.7,
            color=['tab:orange' if b else 'tab:blue' for b in is_base],
            edgecolor=['black' if b else 'none' for b in is_base])
    for y, run, value, base in zip(ys, ordered, values, is_base):
        if math.isnan(value):
            best = run.best_eval()
            text = 'nan' if best else f'no eval yet [{run.status}]'
            ax.text(top * 0.01, y, text, va='center', fontsize=9, color='0.35', style='italic')
            continue
        text = f'{value:.2f}%'
        if not base and not math.isnan(base_value):
            text += f'  ({value - base_value:+.2f} pp)'
        ax.text(value + top * 0.01, y, text, va='center', fontsize=9,
                bbox=dict(facecolor='white', edgecolor='none', pad=1, alpha=0.85))
    ax.set_yticks(ys)
    ax.set_yticklabels([f'{r.label} (baseline)' if b else r.label
                        for r, b in zip(ordered, is_base)])
    for tick, base in zip(ax.get_yticklabels(), is_base):
        if base:
            tick.set_fontweight('bold')
    ax.invert_yaxis()
    if not math.isnan(base_value):
        ax.axvline(base_value, color='0.25', ls='--', lw=1,
                   label=f'baseline: {base_value:.2f}%')
        ax.legend(loc='lower right')
    ax.set_xlim(0, max(top, 1.0) / 0.75)
    ax.grid(False, axis='y')
    ax.set_xlabel(BEST_LABEL)
    title = 'Best eval exact accuracy per run'
    if baseline is None:
        title += ' (no baseline run found; pass --baseline=RUN)'
    ax.set_title(title)
    fig.tight_layout()
    return fig


def _tn_key(run):
    if cfg(run.config, 'curriculum.enabled'):
        return None  # its T and n change during training
    t, n = _as_int(cfg(run.config, 'model.H_cycles')), _as_int(cfg(run.config, 'model.L_cycles'))
    return (t, n) if t is not None and n is not None else None


def tn_heatmap(runs, baseline):
    family, members = _pick_family(runs, _tn_key)
    cells = {k for k, _ in members}
    if len(cells) < 2:
        raise Skip('needs runs of one config family with at least 2 different '
                   '(model.H_cycles, model.L_cycles) pairs; found '
                   f'{len(cells)} pair{"" if len(cells) == 1 else "s"}')
    scores, statuses = {}, {}
    for key, run in members:
        value = _best_pct(run)
        if not math.isnan(value):
            scores.setdefault(key, []).append(value)
        else:
            statuses.setdefault(key, run.status)
    if not scores:
        raise Skip(f'no {family!r} run with different T x n has an eval yet')
    import numpy as np
    from matplotlib import colormaps
    ts = sorted({t for t, _ in cells})
    ns = sorted({n for _, n in cells})
    grid = np.full((len(ts), len(ns)), np.nan)
    for (t, n), values in scores.items():
        grid[ts.index(t), ns.index(n)] = max(values)
    fig = _figure(max(6.0, 2.4 + 1.15 * len(ns)), max(4.2, 1.6 + 0.85 * len(ts)))
    ax = fig.subplots()
    cmap = colormaps['viridis']
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=100,
                      origin='lower', aspect='auto')
    ax.set_facecolor('0.93')
    for i, t in enumerate(ts):
        for j, n in enumerate(ns):
            value = grid[i, j]
            if math.isnan(value):
                status = statuses.get((t, n))
                text = f'n/a\n[{status}]' if status else 'n/a'
                ax.text(j, i, text, ha='center', va='center', fontsize=9, color='0.45')
                continue
            r, g, b, _ = cmap(value / 100)
            color = 'black' if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else 'white'
            text = f'{value:.1f}%'
            if len(scores[(t, n)]) > 1:
                text += f'\n(best of {len(scores[(t, n)])})'
            ax.text(j, i, text, ha='center', va='center', fontsize=10, color=color,
                    fontweight='bold')
    ax.set_xticks(range(len(ns)))
    ax.set_xticklabels([str(n) for n in ns])
    ax.set_yticks(range(len(ts)))
    ax.set_yticklabels([str(t) for t in ts])
    ax.grid(False)
    ax.set_xlabel('n = L_cycles (latent updates per cycle)')
    ax.set_ylabel('T = H_cycles (recursion cycles)')
    ax.set_title(f'{family}: best eval exact accuracy by T x n')
    fig.colorbar(image, ax=ax, label=BEST_LABEL, fraction=0.05, pad=0.03)
    fig.tight_layout()
    return fig


def batch_scaling(runs, baseline):
    family, members = _pick_family(
        runs, lambda r: _as_int(cfg(r.config, 'data.global_batch_size')))
    points = []
    for batch, run in members:
        best = run.best_eval()
        if best and _finite(best.value):
            points.append((batch, _pct(best.value), best.elapsed_s, run))
    if len({p[0] for p in points}) < 2:
        raise Skip('needs evals from runs of one config family with at least 2 different '
                   'data.global_batch_size values')
    points.sort(key=lambda p: (p[0], -p[1]))
    fig = _figure(12.5, 4.8)
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
        _note(ax_time, 'no timing data (metrics lines lack "time")')
    batches = sorted(best_per_batch)
    for ax in (ax_acc, ax_time):
        ax.set_xscale('log', base=2)
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
        ax.minorticks_off()
        ax.set_xlabel('global batch size (examples per step, log2 scale)')
    ax_acc.set_ylabel(BEST_LABEL)
    ax_acc.set_title('Best eval exact accuracy')
    ax_time.set_ylabel(f'wall time to best eval ({unit})')
    ax_time.set_ylim(bottom=0)
    ax_time.set_title('Time to best eval')
    lrs = {cfg(p[3].config, 'optim.lr') for p in points}
    suptitle = f'{family}: best accuracy and time to best vs global batch size'
    if len(lrs) == 1 and _finite(next(iter(lrs))):
        suptitle += f' (lr {_fmt_lr(next(iter(lrs)))})'
    fig.suptitle(suptitle, fontweight='bold')
    fig.tight_layout()
    if len(lrs) > 1:
        lr_text = [f'lr {_fmt_lr(lr)}' if _finite(lr) else ''
                   for lr in (cfg(p[3].config, 'optim.lr') for p in points)]
        _label_points(ax_acc, [p[0] for p in points], [p[1] for p in points], lr_text,
                      lines=[([p[0] for p in line], [p[1] for p in line])])
        if timed:
            _label_points(ax_time, [p[0] for p in timed], [p[2] / div for p in timed],
                          [t for p, t in zip(points, lr_text) if p[2] is not None],
                          lines=[([p[0] for p in timed_line],
                                  [p[2] / div for p in timed_line])])
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
    entries = [(r.pflop, _best_pct(r), r) for r in runs]
    entries = [e for e in entries if _finite(e[0]) and e[0] > 0 and not math.isnan(e[1])]
    if len(entries) < 2:
        raise Skip('needs at least 2 runs with an eval and known compute (progress/pflop, '
                   'or flops_per_example_step in run.json with progress/examples)')
    front = pareto_front([(x, y) for x, y, _ in entries])
    fig = _figure(10, 6.5)
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
    _plain_log_axis(ax.xaxis)
    ax.set_xlabel('total training compute (PFLOP, log scale)')
    ax.set_ylabel(BEST_LABEL)
    ax.set_title('Accuracy vs compute: Pareto front')
    ax.grid(True, which='minor', alpha=0.12)
    ax.legend(loc='lower right')
    low, high = min(e[1] for e in entries), max(e[1] for e in entries)
    pad = max(3.0, 0.08 * (high - low))
    ax.set_ylim(max(-2, low - pad), min(105, high + pad))
    xs = [e[0] for e in entries]
    ax.set_xlim(min(xs) / 1.6, max(xs) * 1.6)
    fig.tight_layout()
    _label_points(ax, xs, [e[1] for e in entries], [e[2].label for e in entries],
                  lines=[_step_path([e[0] for e in on_front], [e[1] for e in on_front])])
    return fig


def _bucket_key(label):
    match = re.match(r'^(.*?)_?(\d+)', label)
    if not match:
        return (label, math.inf, label)
    return (match.group(1), int(match.group(2)), label)


def _bucket_text(label):
    return label.replace('_', ' ').replace('-', '–')


def difficulty(runs, baseline):
    by_task = len(tasks_of(runs)) > 1
    rows = [(r, r.last_difficulty(by_task)) for r in runs]
    rows = [(r, d[0], d[1]) for r, d in rows if d]
    if not rows:
        raise Skip('no run has logged eval_by_difficulty/* yet')
    from matplotlib import colormaps
    buckets = sorted({b for _, _, values in rows for b in values}, key=_bucket_key)
    k = len(buckets)
    width = 0.8 / k
    fig = _figure(max(8.0, 2.5 + len(rows) * (0.32 * k + 0.5)), 5.5)
    ax = fig.subplots()
    cmap = colormaps['viridis']
    labeled = len(rows) * k <= 40  # value labels only while bars are wide enough to hold them
    for j, bucket in enumerate(buckets):
        color = cmap(0.1 + 0.8 * j / max(1, k - 1))
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(rows))]
        heights = [_pct(values[bucket]) if bucket in values else None for _, _, values in rows]
        ax.bar(xs, [0 if h is None or math.isnan(h) else h for h in heights], width * 0.95,
               color=color, label=_bucket_text(bucket))
        for x, h in zip(xs, heights):
            # A run without this bucket gets "n/a", never a bar that reads as 0%.
            if h is None:
                text = 'n/a'
            elif not labeled:
                continue
            else:
                text = 'nan' if math.isnan(h) else f'{h:.0f}'
            ax.text(x, (0 if h is None or math.isnan(h) else h) + 1, text, ha='center',
                    va='bottom', fontsize=7.5, color='0.45' if h is None else 'black',
                    rotation=90 if k > 4 else 0)
    wide = len(rows) > 4
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f'{r.label}\n(step {_si(step)})' for r, step, _ in rows],
                       rotation=25 if wide else 0, ha='right' if wide else 'center')
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylim(0, 112)
    ax.grid(False, axis='x')
    ax.set_ylabel(ACC_LABEL)
    ax.set_title('Exact accuracy by puzzle difficulty (last eval of each run)')
    ax.legend(title='difficulty bucket', loc='upper left', bbox_to_anchor=(1.01, 1.0),
              frameon=False)
    fig.tight_layout()
    return fig


def act_steps(runs, baseline):
    """Exact accuracy against the ACT steps run at evaluation (test-time recursion)."""
    curves = [(r, r.act_steps_curve()) for r in runs]
    curves = [(r, c) for r, c in curves if c]
    if not curves:
        raise Skip('no run has evaluated at other ACT steps (eval.report_act_steps)')
    fig = _figure(7.5, 4.8)
    ax = fig.subplots()
    for color, (run, curve) in zip(_colors(len(curves)), curves):
        steps, acc = zip(*curve)
        ax.plot(steps, [_pct(v) for v in acc], color=color, lw=1.6, marker='o', ms=4, label=_legend_label(run))
        trained = cfg(run.config, 'act.halt_max_steps')
        if trained in steps:
            ax.plot([trained], [_pct(acc[steps.index(trained)])], color=color, marker='o', ms=11,
                    mfc='none', mew=1.5)
    ax.set_xscale('log', base=2)
    ticks = sorted({k for _, curve in curves for k, _ in curve})
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.minorticks_off()
    ax.set_xlabel('ACT steps at evaluation (log2 scale; circled: as trained)')
    ax.set_ylabel(ACC_LABEL)
    ax.set_ylim(-2, 102)
    ax.set_title('Test-time recursion: accuracy vs evaluation depth')
    ax.legend(loc='lower right', frameon=False)
    fig.tight_layout()
    return fig


PLOTS = [
    ('learning_curves.png', learning_curves),
    ('per_task.png', per_task),
    ('accuracy_vs_compute.png', accuracy_vs_compute),
    ('ablations.png', ablations),
    ('tn_heatmap.png', tn_heatmap),
    ('batch_scaling.png', batch_scaling),
    ('pareto.png', pareto),
    ('difficulty.png', difficulty),
    ('act_steps.png', act_steps),
]


def pick_baseline(runs, wanted=None):
    """The run named by --baseline (label, variant, name or path), else the first whose
    variant, then name, contains 'baseline' (preferring one with an eval)."""
    if wanted:
        stripped = wanted.rstrip('/')
        for run in runs:
            if stripped in (run.label, run.variant, run.name, run.path) or \
                    run.path.endswith('/' + stripped):
                return run
        known = ', '.join(r.label for r in runs[:12]) + (', ...' if len(runs) > 12 else '')
        raise BaselineError(f'--baseline={wanted} matches no run (by label, variant, name '
                            f'or path); runs: {known}')
    for attr in ('variant', 'name'):
        candidates = [r for r in runs if 'baseline' in getattr(r, attr).lower()]
        if candidates:
            with_eval = [r for r in candidates if r.best_eval()]
            return (with_eval or candidates)[0]
    return None


def _png(fig):
    data = io.BytesIO()
    fig.savefig(data, format='png', dpi=DPI, bbox_inches='tight')
    return data.getvalue()


def render_all(runs, out_dir, baseline=None):
    """Writes every plot the runs have data for; [(file name, path or None, why skipped)]."""
    matplotlib = require_matplotlib()
    base = pick_baseline(runs, baseline)
    fs.makedirs(out_dir)
    results = []
    for filename, make in PLOTS:
        path = fs.join(out_dir, filename)
        with matplotlib.rc_context(_STYLE):
            try:
                fig = make(runs, base)
            except Skip as e:
                reason = str(e)
                if fs.exists(path):
                    reason += f' (the older {filename} there is out of date)'
                results.append((filename, None, reason))
                continue
            fs.write_bytes(path, _png(fig))
        results.append((filename, path, ''))
    return results
