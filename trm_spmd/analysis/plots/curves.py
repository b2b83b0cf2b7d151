"""Accuracy as it evolves: learning curves, each task of a multi-task study against steps, and
accuracy against the ACT steps run at evaluation (test-time recursion)."""

import math

from trm_spmd.analysis.plots import draw
from trm_spmd.analysis.runs import EVAL_EXACT, cfg, tasks_of


def learning_curves(runs, baseline):
    train = {id(r): r.series('train/loss') for r in runs}
    evals = {id(r): r.series(EVAL_EXACT) for r in runs}
    shown = [r for r in runs if train[id(r)] or evals[id(r)]]
    if not shown:
        raise draw.Skip('no run has logged train/loss or eval/exact_accuracy yet')
    from matplotlib.lines import Line2D
    fig = draw.figure(13, 4.8)
    ax_loss, ax_acc = fig.subplots(1, 2)
    handles = []
    for color, run in zip(draw.colors(len(shown)), shown):
        if train[id(run)]:
            steps, loss = zip(*train[id(run)])
            ax_loss.plot(steps, [v if math.isfinite(v) else math.nan for v in loss],
                         color=color, lw=1.4)
        if evals[id(run)]:
            steps, acc = zip(*evals[id(run)])
            ax_acc.plot(steps, [draw.pct(v) for v in acc], color=color, lw=1.4, marker='o', ms=3.5)
        handles.append(Line2D([], [], color=color, lw=2))
    losses = [v for r in shown for _, v in train[id(r)] if math.isfinite(v)]
    if losses and min(losses) > 0:
        ax_loss.set_yscale('log')
        draw.plain_log_axis(ax_loss.yaxis)
        ax_loss.set_ylabel('train loss (log scale)')
    else:
        ax_loss.set_ylabel('train loss')
    if not losses:
        draw.note(ax_loss, 'no finite train/loss logged')
    if not any(evals[id(r)] for r in shown):
        draw.note(ax_acc, 'no eval yet')
    ax_loss.set_title('Training loss')
    ax_acc.set_title('Eval exact accuracy (puzzles fully solved)')
    ax_acc.set_ylabel(draw.ACC_LABEL)
    ax_acc.set_ylim(-2, 102)
    for ax in (ax_loss, ax_acc):
        draw.step_axis(ax)
    fig.tight_layout()
    draw.legend_below(fig, handles, [draw.legend_label(r) for r in shown])
    return fig


def per_task(runs, baseline):
    """Held-out exact accuracy against steps, one panel per task: a multi-task run beside
    the runs of each of its tasks alone."""
    names = tasks_of(runs)
    if len(names) < 2:
        raise draw.Skip('the runs train one task')
    from matplotlib.lines import Line2D
    fig = draw.figure(5.2 * len(names), 4.6)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    colors = dict(zip((id(r) for r in runs), draw.colors(len(runs))))
    shown = []
    for ax, task in zip(axes, names):
        for run in runs:
            key = run.task_exact_key(task)
            points = run.series(key) if key else []
            if points:
                steps, acc = zip(*points)
                ax.plot(steps, [draw.pct(v) for v in acc], color=colors[id(run)], lw=1.4, marker='o', ms=3.5)
                shown += [run] if run not in shown else []
        if not ax.lines:
            draw.note(ax, 'no eval yet')
        ax.set_title(f'{task}: eval exact accuracy')
        ax.set_ylabel(draw.ACC_LABEL)
        ax.set_ylim(-2, 102)
        draw.step_axis(ax)
    if not shown:
        raise draw.Skip('no run has evaluated a task yet')
    fig.tight_layout()
    shown = [r for r in runs if r in shown]
    draw.legend_below(fig, [Line2D([], [], color=colors[id(r)], lw=2) for r in shown],
                      [draw.legend_label(r) for r in shown])
    return fig


def act_steps(runs, baseline):
    """Exact accuracy against the ACT steps run at evaluation (test-time recursion)."""
    curves = [(r, r.act_steps_curve()) for r in runs]
    curves = [(r, c) for r, c in curves if c]
    if not curves:
        raise draw.Skip('no run has evaluated at other ACT steps (eval.report_act_steps)')
    fig = draw.figure(7.5, 4.8)
    ax = fig.subplots()
    for color, (run, curve) in zip(draw.colors(len(curves)), curves):
        steps, acc = zip(*curve)
        ax.plot(steps, [draw.pct(v) for v in acc], color=color, lw=1.6, marker='o', ms=4, label=draw.legend_label(run))
        trained = cfg(run.config, 'act.halt_max_steps')
        if trained in steps:
            ax.plot([trained], [draw.pct(acc[steps.index(trained)])], color=color, marker='o', ms=11,
                    mfc='none', mew=1.5)
    ax.set_xscale('log', base=2)
    ticks = sorted({k for _, curve in curves for k, _ in curve})
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.minorticks_off()
    ax.set_xlabel('ACT steps at evaluation (log2 scale; circled: as trained)')
    ax.set_ylabel(draw.ACC_LABEL)
    ax.set_ylim(-2, 102)
    ax.set_title('Test-time recursion: accuracy vs evaluation depth')
    ax.legend(loc='lower right', frameon=False)
    fig.tight_layout()
    return fig
