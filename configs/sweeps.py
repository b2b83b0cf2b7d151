"""Study-level sweeps across the family files; this file defines no config of its own.

  python launch/tpu.py sweep --sweep=configs/sweeps.py:all_ablations --study_root=gs://BUCKET/study
  python launch/tpu.py sweep --sweep=configs/sweeps.py:batch_sweep --study_root=gs://BUCKET/study
  python launch/tpu.py sweep --sweep=configs/sweeps.py:family --study_root=gs://BUCKET/study

- all_ablations (also the default `sweep`): the baseline, every ablation
  (configs/ablations.py: ema_off, attention, nsup_8) and the contributions that can change
  accuracy (configs/contributions.py: curriculum_recursion, adaptive_halting, lion,
  sparse_attention, which compares with ablations.py:attention): 8 full runs, one table.
  contributions.py:grad_checkpointing is left out: it computes the baseline's updates (only
  memory and step time differ), so a full run would repeat the baseline's accuracy; its
  claim is measured by a benchmark or a short run.
- batch_sweep: the baseline (the 768 point) and every configs/batch_scaling.py variant
  (256, 512, 1024, 2048, 6144), under that file's lr / warmup / EMA rule.
- family: TRM against URM (configs/urm.py) on the TRM paper's three tasks, each at its own
  paper's settings: Sudoku-Extreme (TRM's MLP baseline, TRM with attention, which the URM
  authors hold to be the fair comparison, and URM's script), Maze-Hard (TRM's run; URM's
  network under the same recipe, as URM published none) and ARC-AGI-1 (each paper's run).

Each entry is a full 'FILE.py:VARIANT' spec, so a run's workdir is STUDY_ROOT/<family>/<variant>
and a run already done by another sweep is the same directory (the launcher skips it).
"""

from trm_spmd.config import ConfigArgError

BASELINE = 'configs/baseline.py:e1_1_baseline'
ABLATIONS = ('ema_off', 'attention', 'nsup_8')
CONTRIBUTIONS = ('curriculum_recursion', 'adaptive_halting', 'lion', 'sparse_attention')
BATCHES = ('b256', 'b512', 'b1024', 'b2048', 'b6144')
FAMILY = (BASELINE, 'configs/ablations.py:attention', 'configs/urm.py:sudoku',
          'configs/maze.py:paper', 'configs/urm.py:maze',
          'configs/arc.py:arc1', 'configs/urm.py:arc1')


def all_ablations():
    return ([BASELINE]
            + [f'configs/ablations.py:{v}' for v in ABLATIONS]
            + [f'configs/contributions.py:{v}' for v in CONTRIBUTIONS])


def batch_sweep():
    return [BASELINE] + [f'configs/batch_scaling.py:{v}' for v in BATCHES]


def family():
    return list(FAMILY)


def sweep():
    return all_ablations()


def get_config(arg=None):
    del arg
    raise ConfigArgError('configs/sweeps.py defines only sweeps (all_ablations, batch_sweep, family); run one with '
                         'launch/tpu.py sweep --sweep=configs/sweeps.py:NAME, or train a family file, '
                         'e.g. --config=configs/ablations.py:ema_off')
