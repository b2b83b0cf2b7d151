"""The failure gallery: held-out examples a run got wrong, drawn as figures. Sudoku grids
with the model's digits over the givens, mazes with the model's path over the answer's, ARC
test inputs beside the answer and the model's grid.

    figure(sample, limit=8) -> a matplotlib Figure of the sample's first `limit` failures
    png(figure) -> its PNG bytes

`sample` is a failures.Sample. Figures use the object API on an Agg canvas (no pyplot, no
display), as the study plots do; matplotlib is the optional `plots` group.
"""

import io
import math
import textwrap

import numpy as np

from trm_spmd.tasks.arc import grid as arc_grid
from trm_spmd.tasks.maze import grid as maze_grid

DPI = 110
RIGHT, WRONG, GIVEN, MISSED = '#1a7f37', '#cf222e', '#24292f', '#6e7781'
# The ARC Prize's colours 0-9: black, blue, red, green, yellow, grey, magenta, orange, azure, maroon.
ARC_COLOURS = ('#000000', '#0074d9', '#ff4136', '#2ecc40', '#ffdc00', '#aaaaaa', '#f012be', '#ff851b', '#7fdbff',
               '#870c25')
_LEGEND = {
    'sudoku': 'black: givens (on red: changed by the model, its digit in red); green: the model\'s right digits; '
              'red: its wrong ones (grey: the answer\'s)',
    'maze': 'shaded green: the answer\'s shortest path; dots: the model\'s path (red: off the answer\'s); '
            'red crosses: cells it changed',
    'arc': 'each failure: the test input, the answer, the model\'s grid',
}


def _figure(width, height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=DPI, layout='constrained')
    FigureCanvasAgg(fig)
    return fig


def _title(ax, record, width=34):
    lines = textwrap.wrap(record.verdict, width)
    text = '\n'.join(lines[:2]) + ('...' if len(lines) > 2 else '')
    ax.set_title(f'#{record.index}  halt {100 * record.confidence:.0f}%\n{text}', fontsize=7, loc='left')


def _bare(ax, rows, cols):
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect('equal')
    ax.set_xticks([])
    ax.set_yticks([])


def draw_sudoku(ax, record):
    """The 9x9 grid: givens in black, the model's digits in green where right, red where
    wrong with the answer's digit small in the corner; a given the model changed on red, the
    model's digit small in its corner."""
    from matplotlib.patches import Rectangle
    given, answer, model = (np.clip(np.asarray(t, np.int64) - 1, 0, 9).reshape(9, 9)
                            for t in (record.question, record.answer, record.prediction))
    _bare(ax, 9, 9)
    for k in range(10):
        width = 1.6 if k % 3 == 0 else 0.4
        ax.plot([0, 9], [k, k], color=GIVEN, lw=width)
        ax.plot([k, k], [0, 9], color=GIVEN, lw=width)
    for r in range(9):
        for c in range(9):
            if given[r, c]:
                if model[r, c] != given[r, c]:
                    ax.add_patch(Rectangle((c, r), 1, 1, color=WRONG, alpha=0.25, lw=0))
                    ax.text(c + 0.9, r + 0.12, str(model[r, c]) if model[r, c] else '?', ha='right', va='top',
                            fontsize=5, color=WRONG)
                ax.text(c + 0.5, r + 0.55, str(given[r, c]), ha='center', va='center', fontsize=9,
                        fontweight='bold', color=GIVEN)
                continue
            right = model[r, c] == answer[r, c]
            ax.text(c + 0.5, r + 0.55, str(model[r, c]) if model[r, c] else '?', ha='center', va='center',
                    fontsize=9, color=RIGHT if right else WRONG)
            if not right:
                ax.text(c + 0.9, r + 0.12, str(answer[r, c]), ha='right', va='top', fontsize=5, color=MISSED)


def draw_maze(ax, record):
    """Walls dark, S and G labelled, the answer's path shaded, the model's path as dots (red
    where it leaves the answer's), a red cross on every wall, S or G the model changed."""
    question, answer, model = (np.asarray(t).reshape(-1) for t in (record.question, record.answer, record.prediction))
    n = maze_grid.side(question.size)
    shade = np.ones((n * n, 3))
    shade[question == maze_grid.WALL] = (0.2, 0.22, 0.25)
    shade[answer == maze_grid.PATH] = (0.75, 0.9, 0.75)
    _bare(ax, n, n)
    ax.imshow(shade.reshape(n, n, 3), extent=(0, n, n, 0), interpolation='nearest')
    size = max(2.0, 60.0 / n)
    for cell in np.flatnonzero(model == maze_grid.PATH):
        r, c = divmod(int(cell), n)
        ax.plot(c + 0.5, r + 0.5, 'o', ms=size, color=RIGHT if answer[cell] == maze_grid.PATH else WRONG)
    for token, label in ((maze_grid.START, 'S'), (maze_grid.GOAL, 'G')):
        for cell in np.flatnonzero(question == token):
            r, c = divmod(int(cell), n)
            ax.text(c + 0.5, r + 0.55, label, ha='center', va='center', fontsize=max(5.0, 90.0 / n),
                    fontweight='bold', color=GIVEN)
    changed = (question != maze_grid.OPEN) & (model != question)
    for cell in np.flatnonzero(changed):
        r, c = divmod(int(cell), n)
        ax.plot(c + 0.5, r + 0.5, 'x', ms=size * 1.3, mew=1.5, color=WRONG)


def _arc_panel(ax, cells, title):
    from matplotlib.colors import ListedColormap
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=7, loc='left')
    if not cells.size:
        ax.text(0.5, 0.5, 'no grid', ha='center', va='center', transform=ax.transAxes, fontsize=8, color=WRONG)
        return
    rows, cols = cells.shape
    ax.imshow(cells, cmap=ListedColormap(ARC_COLOURS), vmin=0, vmax=9, interpolation='nearest',
              extent=(0, cols, rows, 0))
    for k in range(rows + 1):
        ax.plot([0, cols], [k, k], color='#555555', lw=0.3)
    for k in range(cols + 1):
        ax.plot([k, k], [0, rows], color='#555555', lw=0.3)


def draw_arc(axes, record):
    """Three panels: the test input, the answer and the model's grid."""
    answer = np.where(np.asarray(record.answer) < 0, arc_grid.PAD, record.answer)
    verdict = '\n'.join(textwrap.wrap(record.verdict, 30)[:2])
    _arc_panel(axes[0], arc_grid.crop(record.question), f'#{record.index} input')
    _arc_panel(axes[1], arc_grid.crop(answer), 'answer')
    _arc_panel(axes[2], arc_grid.crop(record.prediction), f'model (halt {100 * record.confidence:.0f}%)\n{verdict}')


_DRAW = {'sudoku': draw_sudoku, 'maze': draw_maze}


def figure(sample, limit=8, records=None, columns=4):
    """The sample's first `limit` failures (or the given `records`) drawn as one figure."""
    shown = list(sample.failures if records is None else records)[:limit]
    per_record = 3 if sample.task == 'arc' else 1          # ARC: input, answer, model side by side
    per_row = columns if per_record == 1 else max(1, columns // 2)
    columns = per_row * per_record
    rows = max(1, math.ceil(len(shown) / per_row))
    fig = _figure(2.4 * columns if per_record == 1 else 1.9 * columns, 3.0 * rows + 0.6)
    axes = np.atleast_2d(fig.subplots(rows, columns, squeeze=False))
    for ax in axes.ravel():
        ax.set_axis_off()
    for i, record in enumerate(shown):
        row, slot = divmod(i, per_row)
        cells = axes[row, slot * per_record:(slot + 1) * per_record]
        for ax in cells:
            ax.set_axis_on()
        if per_record == 3:
            draw_arc(cells, record)
        else:
            _DRAW[sample.task](cells[0], record)
            _title(cells[0], record)
    heading = f'{sample.run.rstrip("/").rsplit("/", 1)[-1]}: {sample.describe()}'
    if not shown:
        axes[0, 0].text(0, 0.5, 'no failure in the sample', fontsize=11, transform=axes[0, 0].transAxes)
    else:
        heading += f'\nthe first {len(shown)} of its failures. {_LEGEND[sample.task]}'
    fig.suptitle('\n'.join(textwrap.fill(line, 150) for line in heading.split('\n')), fontsize=8.5, x=0.01,
                 ha='left')
    return fig


def png(fig):
    data = io.BytesIO()
    fig.savefig(data, format='png', dpi=DPI, bbox_inches='tight', facecolor='white')
    return data.getvalue()
