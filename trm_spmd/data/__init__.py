"""The task-agnostic data layer (numpy only): the official TinyRecursiveModels on-disk
layout, the per-host training and evaluation loaders, several tasks in one run (the
mixture, handed the tasks it mixes), reading builders' inputs, and the errors of bad data.
What a token means is a task's business: trm_spmd/tasks builds on this layer, and nothing
here imports a task.

Build a dataset with `python -m trm_spmd.build TASK` (trm_spmd/build.py).
"""

from trm_spmd.data.dataset import DatasetError, Split, load_split
from trm_spmd.data.errors import DataError, PuzzleError
from trm_spmd.data.loader import EvalBatches, Prefetcher, TrainBatches

__all__ = ['DataError', 'DatasetError', 'EvalBatches', 'Prefetcher', 'PuzzleError',
           'Split', 'TrainBatches', 'load_split']
