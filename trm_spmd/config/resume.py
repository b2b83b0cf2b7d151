"""What may change in a config when a run resumes from its checkpoints.

A resumed run must stay the run its checkpoints belong to: resuming with the same config
ends with the same weights as an uninterrupted run. So a change is allowed only when it
cannot change what the checkpoints mean or the numbers training computes from them:

allowed (bookkeeping, cadence, performance, where it runs):
  name, variant, mode                labels; `mode` does not apply to a resumed training run
  backend, mesh.*                    the checkpoint is device-neutral numpy and the global batch is
                                     unchanged, so a run may move (a smaller slice after a preemption,
                                     a GPU); numbers then agree to floating-point reduction order
  model.grad_checkpointing           recomputes the same forward pass: memory, not numbers
  model.attention_impl, model.attention_block
                                     the same attention computed another way: numbers agree to
                                     floating-point rounding
  data.prefetch                      batches prepared ahead: speed only
  train.log_every_steps, train.eval_every_steps, train.eval_every_epochs
  train.nan_policy                   differs only at a non-finite step, where 'stop' would have stopped
  train.stop_at_exact_accuracy       when to end early, not what training computes
  eval.global_batch_size, eval.save_outputs, eval.samples, eval.difficulty_buckets, eval.report_act_steps,
  eval.puzzle_ids                    which identifiers an evaluation shows the model, not training
  eval.arc_solutions                 what an evaluation's answers are scored against, not the answers
  checkpoint.*, logging.*, xla.*, native.*
allowed only when nothing depends on the run length (train.total_steps, train.epochs):
  extending or shortening a run is safe with a constant learning rate after warmup
  (optim.lr_min_ratio = 1.0), no curriculum and no exploration decay (act.exploration_prob_final
  equal to act.exploration_prob); otherwise the schedule from the current step on would change.
  (train.epochs is ignored while train.total_steps > 0, so changing it alone is no change.)
refused (the checkpoints or the numbers depend on them):
  seed, data.* (but prefetch), model.* (but grad_checkpointing and the attention's impl and block),
  act.*, loss.*, optim.*,
  curriculum.*, ema.*, eval.max_examples and eval.act_steps (evaluations would stop being comparable),
  init_from and init_puzzle_emb (pick the starting weights of a new run), runlocal (sizes the whole experiment).

When several refused keys changed, the one named is the change that explains the others:
another task (a config of another family changes many keys), then another model size, then
the rest of the model, then another dataset; else the first by name.

Every key of the schema is in exactly one table (a test checks it), so a new key must be
classified when it is added. A key the saved config lacks (added to the schema since the
run started) counts as having its default value there; a key the schema no longer has is
ignored.
"""

import collections
import json

from trm_spmd import fs
from trm_spmd.config.schema import default_config
from trm_spmd.errors import UserError

ALLOWED = ('name', 'variant', 'mode', 'backend', 'mesh.*', 'model.grad_checkpointing', 'model.attention_impl',
           'model.attention_block', 'data.prefetch',
           'train.log_every_steps', 'train.eval_every_steps', 'train.eval_every_epochs', 'train.nan_policy',
           'train.stop_at_exact_accuracy', 'eval.global_batch_size', 'eval.save_outputs', 'eval.samples',
           'eval.difficulty_buckets', 'eval.report_act_steps', 'eval.puzzle_ids', 'eval.arc_solutions',
           'checkpoint.*', 'logging.*', 'xla.*', 'native.*')
RUN_LENGTH = ('train.total_steps', 'train.epochs')
# key or section -> why a change is refused.
REFUSED = {
    'seed': 'the data order and the exploration draws follow the seed',
    'init_from': 'it picks the starting weights of a new run, and this run has checkpoints',
    'init_puzzle_emb': 'it picks the starting puzzle embedding of a new run, and this run has checkpoints',
    'runlocal': 'it sizes the whole experiment',
    'data.task': 'the checkpoints hold a model trained on the old task',
    'data.mixture': 'the checkpoints hold a model trained on the old tasks',
    'data.*': 'the data and the data position in the checkpoints belong to the old value',
    'model.*': 'the checkpoints hold a model built with the old value',
    'act.*': 'the ACT carry and halting in the checkpoints follow the old value',
    'loss.*': 'training so far optimised the old loss',
    'optim.*': 'the optimizer state and learning-rate schedule were built with the old value',
    'curriculum.*': 'the recursion schedule of the run would change',
    'ema.*': 'the EMA weights in the checkpoints follow the old value',
    'eval.max_examples': "the run's evaluations would no longer be comparable",
    'eval.act_steps': "the run's evaluations would no longer be comparable",
}

Change = collections.namedtuple('Change', 'key old new')
# Of several refused changes, the first of these named (a pattern ending in '*' is a prefix).
EXPLAINS_MOST = ('data.task', 'data.mixture', 'model.hidden_size', 'model.L_layers', 'model.mlp_t', 'model.*',
                 'data.path', 'data.mixture_paths')


class ResumeConfigError(UserError):
    pass


def classify(key):
    """'allowed', 'run_length' or the reason a change of `key` is refused (None: unclassified).
    A key named itself wins over its section ('data.prefetch' over 'data.*')."""
    if key in RUN_LENGTH:
        return 'run_length'
    section = key.split('.')[0] + '.*'
    for pattern in (key, section):
        if pattern in ALLOWED:
            return 'allowed'
        if pattern in REFUSED:
            return REFUSED[pattern]
    return None


def _flat(tree, prefix=''):
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f'{prefix}{key}.'))
        else:
            out[prefix + key] = value
    return out


def _length_dependence(flat):
    """What in this config depends on the run length, or None."""
    if flat.get('optim.lr_min_ratio', 1.0) != 1.0:
        return f'the cosine learning-rate decay (optim.lr_min_ratio={flat["optim.lr_min_ratio"]})'
    if flat.get('optim.freeze_trunk_fraction', 0.0) > 0:
        return (f'the frozen first share of the steps (optim.freeze_trunk_fraction='
                f'{flat["optim.freeze_trunk_fraction"]})')
    if flat.get('curriculum.enabled'):
        return 'the curriculum (its stages start at fractions of the run)'
    if flat.get('act.exploration_prob_final') != flat.get('act.exploration_prob'):
        return 'the exploration decay (act.exploration_prob_final differs from act.exploration_prob)'
    return None


def _run_length(flat):
    steps = flat.get('train.total_steps', 0)
    return ('train.total_steps', steps) if steps > 0 else ('train.epochs', flat.get('train.epochs'))


def _refuse(key, old, new, why):
    return ResumeConfigError(
        f'--config.{key} changed from {json.dumps(old)} to {json.dumps(new)} since this run started (its '
        f'config.json): {why}; revert it to resume, or start a new run with another --workdir')


def _rank(key):
    """Where `key` comes among refused changes: the change that explains the others first."""
    for rank, pattern in enumerate(EXPLAINS_MOST):
        if key == pattern or (pattern.endswith('*') and key.startswith(pattern[:-1])):
            return rank
    return len(EXPLAINS_MOST)


def check_resume(saved, config):
    """The allowed changes (Change(key, old, new), by key) from the config a run started with
    (`saved`, its config.json as a dict) to `config` (a ConfigDict); ResumeConfigError, one
    line, for the refused one that explains the others (EXPLAINS_MOST), else the first."""
    defaults = _flat(json.loads(default_config().to_json_best_effort()))
    old = dict(defaults, **_flat(saved))
    new = _flat(json.loads(config.to_json_best_effort()))
    changes = [Change(k, old.get(k), new[k]) for k in sorted(new) if old.get(k) != new[k]]
    allowed, refused = [], []
    for change in changes:
        rule = classify(change.key)
        if rule == 'allowed':
            allowed.append(change)
        elif rule == 'run_length':
            if _run_length(old) == _run_length(new):
                allowed.append(change)   # e.g. epochs changed while total_steps rules
                continue
            why = _length_dependence(new) or _length_dependence(old)
            if why:
                refused.append((change, f'{why} depends on the run length'))
                continue
            allowed.append(change)
        else:
            refused.append((change, rule or 'it is not known to be safe to change'))
    if refused:
        change, why = min(refused, key=lambda r: _rank(r[0].key))   # min keeps the first by name among equals
        raise _refuse(change.key, change.old, change.new, why)
    return allowed


def saved_config(workdir):
    """The config.json of the run in `workdir` as a dict, or None when there is none."""
    path = fs.join(workdir, 'config.json')
    if not fs.exists(path):
        return None
    try:
        saved = json.loads(fs.read_text(path))
    except (ValueError, UnicodeDecodeError) as e:
        raise ResumeConfigError(f'{path} does not parse ({e}): restore it to resume with the config check, '
                                f'or start a new run with another --workdir') from None
    if not isinstance(saved, dict):
        raise ResumeConfigError(f'{path} is not a config: restore it, or start a new run with another --workdir')
    return saved
