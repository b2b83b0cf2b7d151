"""One value per run or per setting, side by side: the ablations' best accuracy against the
baseline, the T x n heatmap, and accuracy by puzzle difficulty."""

import math
import re

from trm_spmd.analysis.plots import draw
from trm_spmd.analysis.runs import cfg, tasks_of


def _best_first(run):
    value = draw.best_pct(run)
    return (1, 0.0) if math.isnan(value) else (0, -value)


def ablations(runs, baseline):
    if not any(r.best_eval() for r in runs):
        raise draw.Skip('no run has an eval yet')
    base_value = draw.best_pct(baseline) if baseline is not None else math.nan
    # Best first; runs without an eval last, still listed so a crashed arm is visible.
    ordered = sorted(runs, key=_best_first)
    values = [draw.best_pct(r) for r in ordered]
    top = max((v for v in values if not math.isnan(v)), default=100.0)
    fig = draw.figure(10, 1.4 + 0.42 * len(ordered))
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
    ax.set_xlabel(draw.BEST_LABEL)
    title = 'Best eval exact accuracy per run'
    if baseline is None:
        title += ' (no baseline run found; pass --baseline=RUN)'
    ax.set_title(title)
    fig.tight_layout()
    return fig


def _tn_key(run):
    if cfg(run.config, 'curriculum.enabled'):
        return None  # its T and n change during training
    t, n = draw.as_int(cfg(run.config, 'model.H_cycles')), draw.as_int(cfg(run.config, 'model.L_cycles'))
    return (t, n) if t is not None and n is not None else None


def tn_heatmap(runs, baseline):
    family, members = draw.pick_family(runs, _tn_key)
    cells = {k for k, _ in members}
    if len(cells) < 2:
        raise draw.Skip('needs runs of one config family with at least 2 different '
                   '(model.H_cycles, model.L_cycles) pairs; found '
                   f'{len(cells)} pair{"" if len(cells) == 1 else "s"}')
    scores, statuses = {}, {}
    for key, run in members:
        value = draw.best_pct(run)
        if not math.isnan(value):
            scores.setdefault(key, []).append(value)
        else:
            statuses.setdefault(key, run.status)
    if not scores:
        raise draw.Skip(f'no {family!r} run with different T x n has an eval yet')
    import numpy as np
    from matplotlib import colormaps
    ts = sorted({t for t, _ in cells})
    ns = sorted({n for _, n in cells})
    grid = np.full((len(ts), len(ns)), np.nan)
    for (t, n), values in scores.items():
        grid[ts.index(t), ns.index(n)] = max(values)
    fig = draw.figure(max(6.0, 2.4 + 1.15 * len(ns)), max(4.2, 1.6 + 0.85 * len(ts)))
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
    fig.colorbar(image, ax=ax, label=draw.BEST_LABEL, fraction=0.05, pad=0.03)
    fig.tight_layout()
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
        raise draw.Skip('no run has logged eval_by_difficulty/* yet')
    from matplotlib import colormaps
    buckets = sorted({b for _, _, values in rows for b in values}, key=_bucket_key)
    k = len(buckets)
    width = 0.8 / k
    fig = draw.figure(max(8.0, 2.5 + len(rows) * (0.32 * k + 0.5)), 5.5)
    ax = fig.subplots()
    cmap = colormaps['viridis']
    labeled = len(rows) * k <= 40  # value labels only while bars are wide enough to hold them
    for j, bucket in enumerate(buckets):
        color = cmap(0.1 + 0.8 * j / max(1, k - 1))
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(rows))]
        heights = [draw.pct(values[bucket]) if bucket in values else None for _, _, values in rows]
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
    ax.set_xticklabels([f'{r.label}\n(step {draw.si(step)})' for r, step, _ in rows],
                       rotation=25 if wide else 0, ha='right' if wide else 'center')
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylim(0, 112)
    ax.grid(False, axis='x')
    ax.set_ylabel(draw.ACC_LABEL)
    ax.set_title('Exact accuracy by puzzle difficulty (last eval of each run)')
    ax.legend(title='difficulty bucket', loc='upper left', bbox_to_anchor=(1.01, 1.0),
              frameon=False)
    fig.tight_layout()
    return fig
