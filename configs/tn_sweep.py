"""The T x n recursion sweep: H_cycles (T) x L_cycles (n), everything else as the baseline.

  python -m trm_spmd.main --config=configs/tn_sweep.py:t3_n6 --workdir=DIR
  python launch/tpu.py sweep --sweep=configs/tn_sweep.py --study_root=gs://BUCKET/study

t3_n6 is the paper's setting. A network call costs the same at every (T, n); one ACT
step makes T*(n+1) calls and back-propagates through n+1, so compute per step grows
with T*(n+1) + 2*(n+1).
"""

import re

from trm_spmd.config import ConfigArgError, family_config

VARIANTS = ('t2_n2', 't2_n6', 't3_n4', 't3_n6', 't4_n6')


def decode_variant(variant):
    """'t3_n6' -> the fields {model.H_cycles: 3, model.L_cycles: 6}; any tT_nN is accepted."""
    match = re.fullmatch(r't(\d+)_n(\d+)', variant)
    if not match:
        raise ConfigArgError(f'tn_sweep variant {variant!r} is not of the form tT_nN; known: {", ".join(VARIANTS)}')
    return {'model.H_cycles': int(match.group(1)), 'model.L_cycles': int(match.group(2))}


def get_config(arg=None):
    return family_config('tn_sweep', decode_variant, arg, 't3_n6')


def sweep():
    return list(VARIANTS)
