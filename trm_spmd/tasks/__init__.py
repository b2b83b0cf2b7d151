"""The task families TRM trains on, one subpackage each, all with the same small surface
(base.Task): build (from files and a built-in generator), validate, render, and the
task's own correctness rule.

  sudoku/   Sudoku-Extreme: 9x9 grids, the paper's 87.4% (MLP) run
  maze/     Maze-Hard: 30x30 mazes, a shortest path from S to G, the paper's 85.3% run
  arc/      ARC-AGI-1 and -2: grids up to 30x30, an output grid from a few demonstrations

A run picks its family with `data.task` (or several with `data.mixture`); a dataset in the
official layout says its sizes in dataset.json, and the task checks that they are its own.
Each family's builder is tasks/NAME/build.py, its flags tasks/NAME/build_cli.py, run by
`python -m trm_spmd.build NAME`.

Tasks build on the data layer (trm_spmd/data) and the floor; nothing below imports a task.
The mixture (data/mixture.py) is handed the Task objects it mixes (of_config below).
"""

import importlib

from trm_spmd.data import mixture
from trm_spmd.errors import UserError

_MODULES = {'sudoku': 'trm_spmd.tasks.sudoku', 'maze': 'trm_spmd.tasks.maze', 'arc': 'trm_spmd.tasks.arc'}
NAMES = tuple(_MODULES)


def of_config(config):
    """The Task of each task a run config trains on, in order: data.mixture's, else data.task's."""
    return [get(name) for name in tuple(config.data.mixture) or (config.data.task,)]


def sizes(config):
    """{'seq_len', 'vocab_size'(, 'num_puzzle_identifiers')} the run config's task (or mixture of
    tasks) implies, for what runs without a dataset."""
    if config.data.mixture:
        return mixture.mixture_sizes(mixture.planned_maps(of_config(config), config.data))
    return get(config.data.task).sizes(config.data)


def get(name):
    """The Task named `name`; a UserError lists the known ones."""
    if name not in _MODULES:
        raise UserError(f'data.task={name!r} is not a known task; known: {", ".join(NAMES)}')
    return importlib.import_module(_MODULES[name]).TASK
