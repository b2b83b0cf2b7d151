"""New ideas on top of the paper's TRM: recursion curriculum, adaptive halting, gradient checkpointing, Lion,
sparse attention, multi-task learning.

  python -m trm_spmd.main --config=configs/contributions.py:curriculum_recursion --workdir=DIR
  python launch/tpu.py sweep --sweep=configs/contributions.py --study_root=gs://BUCKET/study

Everything not named below is the baseline (configs/baseline.py), so each variant is
compared with it directly.

- curriculum_recursion: train with shallow recursion first and reach the paper's depth
  later: (H_cycles, L_cycles) = (1, 2) from the start, (2, 4) from 30% of the steps, the
  paper's (3, 6) from 60% to the end. The bet: while the network is still poor, more
  recursion refines little, so cheap shallow steps learn the basics as well; the last 40%
  of training, and every evaluation (which always runs the model's (3, 6)), use the full
  depth. One ACT step costs T*(n+1) forward calls plus 2*(n+1) backward call-equivalents:
  9, 20 and 35 for the three stages, so training costs 0.3*9 + 0.3*20 + 0.4*35 = 22.7
  call-equivalents per step on average, 65% of the baseline's 35. Each stage compiles one
  train graph (3 in all).
- adaptive_halting: the ACT exploration probability (a row is forced to run a random
  minimum of 2..16 steps) decays linearly from the paper's 0.1 at step 0 to 0.0 at the
  end. Exploration teaches the Q-halt head what continuing is worth while that head is
  still wrong; late in training it mostly spends steps on rows already solved and trains
  the head on a step distribution the learned policy does not produce.
- grad_checkpointing: model.grad_checkpointing True, the grad cycle's n+1 network calls
  are recomputed in backward instead of stored, one at a time: the same updates (a systems
  change), activation memory of the n+1 calls' inputs and one call's activations instead
  of all n+1 calls', for ~7 more forward calls per step (~20% more compute). It lets a
  larger per-device batch fit.
- lion: Lion for the network weights (optim.name 'lion'). Its update is the sign of the
  momentum, +-lr on every coordinate, larger than AdamATan2's (whose per-coordinate step is
  below lr while gradients are noisy), so lr is 5x lower (2e-5) and weight decay 5x higher
  (5.0): lr * wd = 1e-4 keeps the baseline's decoupled decay per step. betas (0.9, 0.99)
  are Lion's own (beta2 is its momentum decay, not a second moment, so Adam's 0.95 does
  not carry over). The puzzle embedding keeps SignSGD lr 1e-4, wd 1.0 (already a sign
  method); warmup stays 2,000 steps.
- sparse_attention: the attention variant (configs/ablations.py:attention: self-attention
  with RoPE instead of the token MLP) with attention restricted to Sudoku's constraint
  graph (model.attention_mask 'sudoku'): a cell attends to the 21 cells of its row, column
  and 3x3 box, and to the 16 puzzle-embedding positions, which attend to everything. The
  bet: the rules say which cells constrain which, so the network need not learn to ignore
  the other 60; two rounds of attention still connect any two cells. Same parameters, and
  the same FLOPs in dense attention (the masked scores are computed, then dropped).
- multi_task: one TRM trained on Sudoku-Extreme and Maze-Hard at once (data.mixture), half
  of every batch each (384 + 384 rows). The bet: both are constraint satisfaction on a
  grid, and a network that must solve both learns a more general refinement step. One
  model serves both, so it takes the maze run's architecture (attention with RoPE, T=3,
  n=4: the token MLP over 900 positions is the larger and, on mazes, the weaker mixer);
  tokens are one vocabulary with a range per task (Sudoku 1-10, Maze 11-15) and Sudoku's
  81 cells are padded to the maze's 900, so 45.5% of a batch's tokens are padding
  (trm_spmd/data/mixture.py says why this scheme). An epoch passes over both training
  sets once, so 50,000 epochs give each task the examples of its own paper run (130,208
  steps at 768). Evaluation reports eval/sudoku/... and eval/maze/..., and their mean as
  eval/exact_accuracy. Build both datasets first (README: Everyday commands, Maze-Hard).

`:runlocal` keeps what each variant changes (stages at the same fractions of the short
run, the exploration decay, checkpointing, Lion, the mask) on the usual CPU-sized run.
"""

from trm_spmd.config import family_config
from trm_spmd.config.family import MAZE_HARD, SUDOKU_EXTREME_1K

VARIANTS = {
    'curriculum_recursion': {
        'curriculum.enabled': True,
        'curriculum.start_fractions': (0.0, 0.3, 0.6),
        'curriculum.H_cycles': (1, 2, 3),
        'curriculum.L_cycles': (2, 4, 6),
    },
    'adaptive_halting': {'act.exploration_prob': 0.1, 'act.exploration_prob_final': 0.0},
    'grad_checkpointing': {'model.grad_checkpointing': True},
    'lion': {'optim.name': 'lion', 'optim.lr': 2e-5, 'optim.weight_decay': 5.0, 'optim.beta2': 0.99},
    'sparse_attention': {'model.mlp_t': False, 'model.pos_encodings': 'rope', 'model.attention_mask': 'sudoku'},
    'multi_task': {
        'data.path': '', 'data.mixture': ('sudoku', 'maze'), 'data.mixture_weights': (1.0, 1.0),
        'data.mixture_paths': (SUDOKU_EXTREME_1K, MAZE_HARD), 'data.generate_size': 30,
        'model.mlp_t': False, 'model.pos_encodings': 'rope', 'model.L_cycles': 4,
    },
}


def _runlocal(c, variant):
    """CPU-sized mazes beside Sudoku's 81 cells (the generic shrink keeps 30x30)."""
    if variant == 'multi_task':
        c.data.generate_size = 6


def get_config(arg=None):
    return family_config('contributions', VARIANTS, arg, 'curriculum_recursion', runlocal=_runlocal)


def sweep():
    return list(VARIANTS)
