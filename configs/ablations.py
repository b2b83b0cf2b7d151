"""Ablations of the paper's TRM: each variant removes or changes one ingredient of the baseline.

  python -m trm_spmd.main --config=configs/ablations.py:ema_off --workdir=DIR
  python launch/tpu.py sweep --sweep=configs/ablations.py --study_root=gs://BUCKET/study
  python launch/tpu.py sweep --sweep=configs/sweeps.py:all_ablations --study_root=gs://BUCKET/study

Everything not named below is the baseline (configs/baseline.py: batch 768, lr 1e-4,
T=3, n=6, 50,000 epochs), so a difference in accuracy is the ingredient's.

- ema_off: no weight EMA (ema.enabled False); evaluation uses the raw weights. The paper
  credits EMA 0.999 with stabilising training on the small 1k-puzzle set.
- attention: self-attention instead of the token-mixing MLP (model.mlp_t False) with RoPE
  positions (model.pos_encodings 'rope'), the paper's attention variant (8 heads x 64;
  6,828,034 trainable parameters vs 5,028,866; ~74.7% vs 87.4% reported).
- nsup_8: at most 8 deep-supervision (ACT) steps instead of 16 (act.halt_max_steps 8),
  in training and in evaluation, which always runs the maximum.

`:runlocal` is the usual CPU-sized run; nsup_8 keeps its ratio there (1 ACT step, half of
runlocal's 2), so it still differs from the baseline's runlocal.
"""

from trm_spmd.config import family_config

# Variant -> the fields it changes from the baseline (dotted keys of the schema).
VARIANTS = {
    'ema_off': {'ema.enabled': False},
    'attention': {'model.mlp_t': False, 'model.pos_encodings': 'rope'},
    'nsup_8': {'act.halt_max_steps': 8},
}


def _runlocal(c, variant):
    if variant == 'nsup_8':
        c.act.halt_max_steps = 1


def get_config(arg=None):
    return family_config('ablations', VARIANTS, arg, 'ema_off', _runlocal)


def sweep():
    return list(VARIANTS)
