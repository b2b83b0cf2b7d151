"""What every study figure shares: matplotlib on demand, the house style, a figure on an Agg
canvas, colours, axes and legends, point labels that avoid each other, and picking the runs of
one config family.

matplotlib is optional (the `plots` extra) and is imported only when plotting, so the
tables and the dashboard work without it. Figures use the object API on an Agg canvas:
no display is needed and no pyplot state leaks between plots.
"""

import math

from trm_spmd import errors
from trm_spmd.analysis.runs import is_number

DPI = 150
INSTALL_HINT = 'pip install matplotlib (or the optional group: pip install "trm_spmd[plots]")'
STYLE = {
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


def figure(width, height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def colors(n):
    from matplotlib import colormaps
    if n <= 10:
        return [colormaps['tab10'](i) for i in range(n)]
    if n <= 20:
        # tab20 comes in light/dark pairs; spreading them keeps neighbours distinct.
        return [colormaps['tab20'](i) for i in list(range(0, 20, 2)) + list(range(1, 20, 2))][:n]
    return [colormaps['turbo'](i / (n - 1)) for i in range(n)]


def pct(value):
    return 100 * value if is_number(value) and math.isfinite(value) else math.nan


def finite(value):
    return is_number(value) and math.isfinite(value)


def as_int(value):
    if is_number(value) and math.isfinite(value) and value == int(value):
        return int(value)
    return None


def si(x, _pos=None):
    for div, suffix in ((1e9, 'G'), (1e6, 'M'), (1e3, 'k')):
        if abs(x) >= div:
            return f'{x / div:g}{suffix}'
    return f'{x:g}'


def plain_log_axis(axis):
    """Log scale labeled 0.3, 1, 2, 5, 10 rather than 10^0: a reader compares values, and
    one or two decades is the usual span here."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: f'{x:g}'))
    axis.set_minor_formatter(NullFormatter())


def step_axis(ax):
    from matplotlib.ticker import FuncFormatter
    ax.xaxis.set_major_formatter(FuncFormatter(si))
    ax.set_xlabel(STEP_LABEL)


def fmt_lr(lr):
    mantissa, exponent = f'{lr:.2e}'.split('e')
    return f'{mantissa.rstrip("0").rstrip(".")}e{int(exponent)}'


def legend_label(run):
    return run.label if run.status == 'done' else f'{run.label} [{run.status}]'


def legend_below(fig, handles, labels):
    # As many columns as the longest label allows across the figure's width (~0.075 in
    # per character at the legend's 9 pt, plus the line sample).
    column_in = 0.075 * max(len(label) for label in labels) + 0.7
    ncol = max(1, min(len(labels), int(fig.get_figwidth() // column_in), 5))
    fig.legend(handles, labels, loc='upper center', bbox_to_anchor=(0.5, 0.0), ncol=ncol,
               frameon=False)


def note(ax, text):
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


def label_points(ax, xs, ys, labels, lines=(), fontsize=8):
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


def pick_family(runs, key):
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


def best_pct(run):
    best = run.best_eval()
    return pct(best.value) if best else math.nan
