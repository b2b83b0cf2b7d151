"""The ACT steps a model uses: the mean number of supervision steps its training rows ran
before halting (train/steps), against the training step, one line per run.

A model that has learned when it is done halts early: the quickstart's falls from 8 steps to
about 2 by step 1,000. (Evaluation always runs every ACT step; what more or fewer steps at
test time give is the study plot act_steps.png.)
"""

import math

from trm_spmd.analysis.runs import cfg

STEPS_KEY = 'train/steps'


class NothingToDraw(Exception):
    """No run has logged train/steps; the message says so."""


def act_steps_used(runs):
    """A matplotlib Figure of train/steps against steps for every run that logged it."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    shown = [(r, r.series(STEPS_KEY)) for r in runs]
    shown = [(r, points) for r, points in shown if points]
    if not shown:
        raise NothingToDraw(f'no run has logged {STEPS_KEY} yet')
    fig = Figure(figsize=(9, 4.8), dpi=150, layout='constrained')
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    palette = colormaps['tab10' if len(shown) <= 10 else 'turbo']
    most = 1
    for i, (run, points) in enumerate(shown):
        color = palette(i if len(shown) <= 10 else i / (len(shown) - 1))
        steps, used = zip(*points)
        ax.plot(steps, [v if math.isfinite(v) else math.nan for v in used], color=color, lw=1.5,
                label=run.label if run.status == 'done' else f'{run.label} [{run.status}]')
        most = max(most, int(cfg(run.config, 'act.halt_max_steps', 1) or 1))
    ax.axhline(most, color='0.5', lw=0.8, ls='--')
    ax.set_ylim(0, most * 1.08)
    ax.set_xlabel('training step (optimizer updates)')
    ax.set_ylabel('mean ACT steps before halting')
    ax.set_title('ACT steps used in training (dashed: the most a row may run)', fontsize=12, fontweight='bold')
    ax.grid(True, alpha=0.3)
    ax.spines[['top', 'right']].set_visible(False)
    ax.legend(loc='upper right', frameon=False, fontsize=9, ncol=2 if len(shown) > 6 else 1)
    return fig
