"""Sudoku data: parsing and validation, solver, generator, augmentation, the official
TinyRecursiveModels on-disk layout, and the per-host training/eval loaders (numpy only).

Build a dataset with `python -m trm_spmd.data.build_sudoku` or, from code,
`trm_spmd.data.build_sudoku.build_generated`.
"""

from trm_spmd.data.dataset import DatasetError, Split, load_split
from trm_spmd.data.loader import EvalBatches, Prefetcher, TrainBatches
from trm_spmd.data.sudoku import DataError, PuzzleError

__all__ = ['DataError', 'DatasetError', 'EvalBatches', 'Prefetcher', 'PuzzleError',
           'Split', 'TrainBatches', 'load_split']
