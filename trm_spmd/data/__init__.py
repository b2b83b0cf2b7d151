"""The task-agnostic data layer (numpy only): the official TinyRecursiveModels on-disk
layout, the per-host training and evaluation loaders, reading builders' inputs, and the
errors of bad data. What a token means is a task's business (trm_spmd/tasks).

Build a dataset with `python -m trm_spmd.data.build_sudoku` or `python -m trm_spmd.data.build_maze`.
"""

from trm_spmd.data.dataset import DatasetError, Split, load_split
from trm_spmd.data.errors import DataError, PuzzleError
from trm_spmd.data.loader import EvalBatches, Prefetcher, TrainBatches

__all__ = ['DataError', 'DatasetError', 'EvalBatches', 'Prefetcher', 'PuzzleError',
           'Split', 'TrainBatches', 'load_split']

# The Sudoku modules' old import paths (they moved to trm_spmd/tasks/sudoku), so that scripts
# written against them, `from trm_spmd.data.sudoku import parse_grid` say, keep working.
import sys as _sys  # noqa: E402

from trm_spmd.tasks.sudoku import augment as _augment, generate as _generate, grid as _grid  # noqa: E402
from trm_spmd.tasks.sudoku import solver as _solver  # noqa: E402

for _name, _module in (('sudoku', _grid), ('solver', _solver), ('generate', _generate), ('augment', _augment)):
    _sys.modules[f'{__name__}.{_name}'] = _module
    globals()[_name] = _module
