"""Study plots, one PNG each, drawn only when the runs carry the data a plot needs.

  draw.py         what every figure shares (matplotlib on demand, style, axes, legends, labels)
  curves.py       learning curves, per-task curves, accuracy against ACT steps at evaluation
  compute.py      accuracy against compute, the Pareto front, batch scaling
  comparisons.py  ablations against the baseline, the T x n heatmap, accuracy by difficulty

render_all draws every plot of PLOTS; a plot the runs cannot show is skipped with the reason.
"""

import io

from trm_spmd import errors, fs
from trm_spmd.analysis.plots import draw
from trm_spmd.analysis.plots.comparisons import ablations, difficulty, tn_heatmap
from trm_spmd.analysis.plots.compute import accuracy_vs_compute, batch_scaling, pareto, pareto_front
from trm_spmd.analysis.plots.curves import act_steps, learning_curves, per_task
from trm_spmd.analysis.plots.draw import MatplotlibMissing, require_matplotlib

__all__ = ['BaselineError', 'MatplotlibMissing', 'PLOTS', 'pareto_front', 'pick_baseline', 'render_all',
           'require_matplotlib']


class BaselineError(errors.UserError):
    pass


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
    fig.savefig(data, format='png', dpi=draw.DPI, bbox_inches='tight')
    return data.getvalue()


def render_all(runs, out_dir, baseline=None):
    """Writes every plot the runs have data for; [(file name, path or None, why skipped)]."""
    matplotlib = require_matplotlib()
    base = pick_baseline(runs, baseline)
    fs.makedirs(out_dir)
    results = []
    for filename, make in PLOTS:
        path = fs.join(out_dir, filename)
        with matplotlib.rc_context(draw.STYLE):
            try:
                fig = make(runs, base)
            except draw.Skip as e:
                reason = str(e)
                if fs.exists(path):
                    reason += f' (the older {filename} there is out of date)'
                results.append((filename, None, reason))
                continue
            fs.write_bytes(path, _png(fig))
        results.append((filename, path, ''))
    return results
