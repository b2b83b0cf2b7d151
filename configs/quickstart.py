"""A TRM that learns to solve Sudoku on a laptop CPU, with no data to download.

  python -m trm_spmd.main --config=configs/quickstart.py --workdir=runs/quickstart

The first run generates 5,000 training and 500 held-out puzzles (30-45 blanks, unique
solutions) with the built-in generator and caches them, then trains until the held-out
exact accuracy reaches 90% (evaluated every 100 steps; at most 1,500 steps) and stops
there with a checkpoint. Set --config.train.stop_at_exact_accuracy=0 to train all steps.

Small model (hidden 128, token-mixing MLP, 2 layers, T=1, n=2, 8 ACT steps, no puzzle
embedding), batch 64 with fresh symmetry augmentation for every row, AdamW at a constant
1e-3 after 100 warm-up steps, no EMA. Measured on a 2-core AVX2 CPU (README): 91.6% at
step 1,000, 9:35 from a fresh start. The recursion is the shallowest because
on a CPU it reaches 90% first: a step costs 0.34 s against 0.94 s at T=2, n=4, and at equal
steps it is about as accurate this early (README; configs/cpu_study.py). An EMA 0.99 reached
90% at step 900 instead of 1,000 in one run each, about the same time; a cosine decay to
0.1 of the rate was slower (at T=2, n=4: 57% at step 600 where the constant rate has 67%).

On a CPU the `auto` backend is plain torch under torch.compile, the fastest CPU path
(BUILD.md: Backends), in bfloat16 where the CPU computes it natively (AVX512-BF16, AMX) and
float32 elsewhere. With PJRT_DEVICE=CPU the same run takes the SPMD path of a TPU pod.
"""

from trm_spmd.config import family_config

FIELDS = {
    'data.generate': True, 'data.generate_train': 5000, 'data.generate_test': 500, 'data.generate_blanks': (30, 45),
    'data.augment': True, 'data.global_batch_size': 64, 'eval.global_batch_size': 256,
    'model.hidden_size': 128, 'model.expansion': 2.0, 'model.H_cycles': 1, 'model.L_cycles': 2,
    'model.puzzle_emb_ndim': 0, 'model.puzzle_emb_len': 0, 'model.forward_dtype': 'auto',
    'act.halt_max_steps': 8,
    'optim.name': 'adamw', 'optim.lr': 1e-3, 'optim.weight_decay': 0.1, 'optim.warmup_steps': 100,
    'optim.lr_min_ratio': 1.0,
    'train.total_steps': 1500, 'train.eval_every_steps': 100, 'train.log_every_steps': 50,
    'train.stop_at_exact_accuracy': 0.9,
    'checkpoint.every_steps': 500, 'ema.enabled': False, 'native.compile': 'default',
}


def get_config(arg=None):
    return family_config('quickstart', {'default': FIELDS}, arg, 'default', data_path='')


def sweep():
    return ['default']
