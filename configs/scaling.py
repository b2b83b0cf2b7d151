"""Scaling: a bigger network, a deeper one, and five times the training puzzles.

  python -m trm_spmd.main --config=configs/scaling.py:large_model --workdir=DIR
  python launch/tpu.py sweep --sweep=configs/scaling.py --study_root=gs://BUCKET/study

What it studies: the paper finds that on 1,000 Sudoku puzzles a 2-layer net beats larger
ones (they overfit), i.e. recursion, not size, does the work. These variants test that
claim from both sides: more parameters on the same data, and more data for the same net.
Optimizer, batch and schedule stay the baseline's (configs/baseline.py), so a difference
is due to the size alone.

- large_model: hidden 1024 and 4 layers (35,223,554 trainable parameters vs 5,028,866; 6.5x the
  FLOPs per call). puzzle_emb_ndim follows hidden_size (1024), as the reference sets it,
  so the puzzle embedding still fills one prefix token.
- deeper: 4 layers at hidden 512 (10,045,442 parameters, 2x the FLOPs per call): depth alone.
- more_data: 5,000 training puzzles instead of 1,000 (same 1,000 augmentations each, same
  test set). Build it once from the Sudoku-Extreme CSVs (as the 1k set, with --subsample):

    python -m trm_spmd.build sudoku --input=train.csv --test_input=test.csv \\
        --subsample=5000 --num_aug=1000 --output_dir=data/sudoku-extreme-5k-aug-1000

  The number of training steps (and so of examples seen, at the same batch of 768) stays
  the baseline's: 10,000 epochs over 5,000 groups = 50M examples = 65,104 steps, as 50,000
  epochs over 1,000 groups; every puzzle is seen 5x less often. Evaluation every 1,000
  epochs keeps the baseline's step cadence (every 6,510 steps, 10 evaluations). This
  compares data at equal compute; equal epochs would cost 5x the baseline.

`:runlocal` keeps each variant's ratio on the CPU-sized run: large_model doubles the
runlocal width (64) and keeps 4 layers, deeper keeps 4 layers, more_data generates 5x
the runlocal training puzzles.
"""

from trm_spmd.config import family_config

VARIANTS = {
    'large_model': {'model.hidden_size': 1024, 'model.L_layers': 4, 'model.puzzle_emb_ndim': 1024},
    'deeper': {'model.L_layers': 4},
    'more_data': {'data.path': 'data/sudoku-extreme-5k-aug-1000',
                  'train.epochs': 10000, 'train.eval_every_epochs': 1000},
}


def _runlocal(c, variant):
    if variant == 'large_model':
        c.model.hidden_size = 2 * c.model.hidden_size
        c.model.puzzle_emb_ndim = c.model.hidden_size
    elif variant == 'more_data':
        c.data.generate_train *= 5


def get_config(arg=None):
    return family_config('scaling', VARIANTS, arg, 'large_model', _runlocal)


def sweep():
    return list(VARIANTS)
