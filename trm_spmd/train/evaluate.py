"""Evaluation: every test puzzle runs a fixed number of ACT steps with the EMA weights.

The reference stops when every row has halted (a host read per step); in eval rows only
halt at the last step, so a fixed count gives the same answer without a sync. Metric sums
stay on the device across batches and are read once at the end.
"""

import io
import json

import numpy as np
import torch

from trm_spmd import fs
from trm_spmd.batch import BATCH_KEYS, IGNORE_LABEL
from trm_spmd.data.loader import row_uniforms
from trm_spmd.model.act import initial_carry
from trm_spmd.model.losses import loss_and_metrics, predictions
from trm_spmd.train.samples import SampleKeeper, sample_rows
from trm_spmd.train.step import make_eval_step

_RANDOM_IDS = 7   # the stream tag of eval.puzzle_ids=random


class DifficultyBuckets:
    """Rows -> bucket ids by one int32 column of the host batch: 'rating' when the data has
    ratings the task knows how to bucket, else the task's 'difficulty' measure (named `label`,
    e.g. Sudoku's blanks)."""

    def __init__(self, key, label, edges):
        self.key = key
        self.edges = tuple(int(e) for e in edges)
        self.labels = []
        for i, lo in enumerate(self.edges):
            hi = self.edges[i + 1] - 1 if i + 1 < len(self.edges) else None
            span = f'{lo}+' if hi is None else (f'{lo}' if hi == lo else f'{lo}-{hi}')
            self.labels.append(f'{label}_{span}')

    def ids(self, host_batch):
        values = host_batch[self.key]
        return np.clip(np.searchsorted(self.edges, values, side='right') - 1, 0, len(self.edges) - 1).astype(np.int32)


def batch_sums(carry, outputs, bucket, num_buckets, cfg):
    """Metric sums of one finished eval batch, plus exact accuracy per difficulty bucket."""
    _, metrics = loss_and_metrics(carry, outputs, cfg)
    labels = carry['labels']
    mask = labels != IGNORE_LABEL
    correct = ((predictions(outputs['logits']) == labels) | ~mask).all(-1)
    valid = mask.any(-1)
    onehot = torch.nn.functional.one_hot(bucket.long(), num_buckets).float()
    metrics['bucket_count'] = (onehot * valid.float().unsqueeze(-1)).sum(0)
    metrics['bucket_exact'] = (onehot * (valid & correct).float().unsqueeze(-1)).sum(0)
    return metrics


class Evaluator:
    """Runs every test batch with the EMA weights (when the run keeps them); `run(step)`
    returns {'eval/...': float}, writes a sample of questions, answers and predictions
    (eval.samples; train/samples.py) and per-puzzle outputs when config.eval.save_outputs.

    Every row runs eval.act_steps ACT steps (default the training's halt_max_steps: the
    reference's evaluation). `run(step, depths)` adds the metrics after fewer or more steps
    of the same pass as 'eval_at_act_steps/K/...' (test-time recursion: a model trained
    with 8 steps evaluated after 1, 2, ..., 32).
    """

    def __init__(self, trainer, config, runtime, eval_batches, buckets, workdir, scorer=None, token_map=None):
        self.model, self.ema, self.cfg, self.config = trainer.model, trainer.ema, trainer.cfg, config
        self.scorer = scorer   # the task's own score: () -> (name, object with add/result), or None
        # A member of a mixture (data/mixture.py): its rows move into the mixture's tokens and
        # identifiers on the way in, its answers back on the way out; its files carry its name.
        self.token_map = token_map
        self.num_ids = token_map.num_ids if token_map else self.cfg.num_puzzle_identifiers
        self.file_tag = f'{token_map.name}_' if token_map else ''
        self.runtime = runtime
        self.batches = eval_batches
        self.buckets = buckets
        self.workdir = workdir
        self.global_batch = config.eval.global_batch_size
        self.act_steps = config.eval.act_steps or self.cfg.halt_max_steps
        self.step_fns = {}   # deepest ACT step -> compiled eval step (rows halt there)
        self.sample_rows = sample_rows(eval_batches.num_examples, config.eval.samples)
        self.task_name = token_map.name if token_map else config.data.task
        num_buckets = len(buckets.edges)
        self.sums_fn = runtime.compile(
            lambda carry, outputs, bucket: batch_sums(carry, outputs, bucket, num_buckets, self.cfg), 'eval_sums')
        self._initial = None

    def _initial_carry(self):
        """The carry every batch starts from: all rows halted, so the first step loads them."""
        if self._initial is None:
            carry = initial_carry(self.model, self.runtime.local_rows(self.global_batch), self.runtime.device)
            self._initial = {k: self.runtime.shard_along_data(v) for k, v in carry.items()}
            self.runtime.sync()
        return self._initial

    def _step_fn(self, max_steps):
        if max_steps not in self.step_fns:
            self.step_fns[max_steps] = self.runtime.compile(make_eval_step(self.model, max_steps), 'eval_step',
                                                            self.config.xla.max_different_graphs)
        return self.step_fns[max_steps]

    def run(self, step, depths=(), interrupt=None):
        """The metrics of the test split after `step` updates; None when interrupt() turned
        true between two batches (a preemption: the loop checkpoints at once)."""
        depths = sorted({int(k) for k in depths} | {self.act_steps})
        step_fn = self._step_fn(depths[-1])
        swap = self.ema is not None
        if swap:
            self.ema.swap_into()
            self.runtime.sync()   # the swap as its own (cached) graph, not folded into the next one
        try:
            totals, outputs_kept = {}, []
            task_name, scorer = self.scorer() if self.scorer else (None, None)
            sample = SampleKeeper(self.sample_rows, self.global_batch) if self.sample_rows.size else None
            for index, host_batch in enumerate(self.batches):
                bucket = self.buckets.ids(host_batch)
                model_batch = {k: host_batch[k] for k in BATCH_KEYS}
                model_batch['puzzle_identifiers'] = self._identifiers(index, host_batch['puzzle_identifiers'])
                if self.token_map is not None:
                    model_batch = self.token_map.to_mixture(model_batch)
                batch = self.runtime.put_batch(model_batch | {'bucket': bucket})
                carry = self._initial_carry()
                all_halted = carry['halted']   # the fresh carry has every row halted
                for depth in range(1, depths[-1] + 1):
                    carry, outputs = step_fn(carry, batch)
                    if depth in depths:
                        # Rows halt only at the last step: count every row at an earlier depth.
                        sums = self.sums_fn(dict(carry, halted=all_halted), outputs, batch['bucket'])
                        totals[depth] = sums if depth not in totals else {
                            k: totals[depth][k] + v for k, v in sums.items()}
                    if depth == self.act_steps and self.config.eval.save_outputs:
                        outputs_kept.append(self._host_outputs(outputs, host_batch))
                    if depth == self.act_steps and (scorer is not None or sample and sample.wants(index)):
                        answers, q_halt = self._answers(outputs)
                        if scorer is not None:
                            self._score(scorer, index, answers, q_halt)
                        if sample and sample.wants(index):
                            sample.add(index, answers, q_halt)
                if interrupt is not None and interrupt():
                    return None
            self.runtime.all_reduce_sum_([v for sums in totals.values() for v in sums.values()])
            host = {depth: {k: v.detach().cpu().numpy() for k, v in sums.items()} for depth, sums in totals.items()}
        finally:
            if swap:
                self.ema.swap_back()
                self.runtime.sync()
        if outputs_kept and self.runtime.is_main_host:
            self._save_outputs(step, outputs_kept)
        if sample and self.runtime.is_main_host:
            sample.write(fs.join(self.workdir, 'eval', f'samples_{self.file_tag}{step}.npz'), step, self.task_name,
                         self.act_steps, self.batches)
        result = self._summarize(host[self.act_steps])
        if scorer is not None and self.runtime.is_main_host:
            scores, submission = scorer.result()
            result.update({f'eval/{task_name}/{k}': v for k, v in scores.items()})
            fs.write_bytes(fs.join(self.workdir, 'eval', f'submission_{self.file_tag}{step}.json'),
                           json.dumps(submission).encode())
        for depth in depths:
            if depth != self.act_steps:
                summary = self._summarize(host[depth])
                for key in ('exact_accuracy', 'accuracy'):
                    result[f'eval_at_act_steps/{depth}/{key}'] = summary[f'eval/{key}']
        return result

    def _identifiers(self, index, identifiers):
        """The puzzle identifiers the model sees (eval.puzzle_ids): the trained ones, the blank
        one, or random ones (is the skill in the weights or in the per-puzzle embeddings?).
        Scoring always uses the true ones."""
        mode = self.config.eval.puzzle_ids
        if mode == 'blank' or mode == 'random' and self.num_ids <= 1:
            return np.zeros_like(identifiers)
        if mode == 'random':
            start, stop = self.runtime.host_slice(self.global_batch)
            u = row_uniforms([self.config.seed, _RANDOM_IDS, index], start, stop, 4)[:, 0]
            return (1 + u * (self.num_ids - 1)).astype(np.int32)
        return identifiers

    def _answers(self, outputs):
        """(answers in the task's tokens [global batch, L], q_halt logits [global batch]) on
        the host: a transfer every host takes part in, outside the compiled step."""
        answers = self.runtime.to_host(predictions(outputs['logits']).to(torch.uint8)).numpy()
        if self.token_map is not None:
            answers = self.token_map.answers(answers)
        return answers, self.runtime.to_host(outputs['q_halt_logits'].float()).numpy()

    def _score(self, scorer, index, answers, q_halt):
        """Hands the global batch's answers to the task's scorer (on the main host)."""
        rows = index * self.global_batch + np.arange(answers.shape[0])
        valid = rows < self.batches.num_examples
        if self.runtime.is_main_host:
            scorer.add(rows[valid], answers[valid], q_halt[valid])

    def _host_outputs(self, outputs, host_batch):
        keep = np.asarray(host_batch['valid'], dtype=bool)
        rows = slice(*self.runtime.host_slice(self.global_batch)) if self.runtime.global_view else slice(None)
        logits = outputs['logits'].float().cpu().numpy()[rows][keep]
        answers = logits.argmax(-1)
        if self.token_map is not None:   # the task's own positions; logits stay over the mixture's tokens
            logits, answers = logits[:, :self.token_map.seq_len], self.token_map.answers(answers)
        return {'index': np.asarray(host_batch['index'])[keep], 'logits': logits,
                'q_halt': outputs['q_halt_logits'].float().cpu().numpy()[rows][keep],
                'predictions': answers.astype(np.int8)}

    def _save_outputs(self, step, parts):
        buffer = io.BytesIO()
        np.savez(buffer, **{k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
        fs.write_bytes(fs.join(self.workdir, 'eval', f'outputs_{self.file_tag}{step}.npz'), buffer.getvalue())

    def _summarize(self, host):
        count = max(float(host['count']), 1.0)
        result = {
            'eval/exact_accuracy': float(host['exact_accuracy']) / count,
            'eval/accuracy': float(host['accuracy']) / count,
            'eval/q_halt_accuracy': float(host['q_halt_accuracy']) / count,
            'eval/steps': float(host['steps']) / count,
            'eval/lm_loss': float(host['lm_loss']) / count,
            'eval/count': float(host['count']),
        }
        for label, n, exact in zip(self.buckets.labels, host['bucket_count'], host['bucket_exact']):
            if n > 0:
                result[f'eval_by_difficulty/{label}'] = float(exact) / float(n)
        return result


# Per-row means the mixture reports as the mean over its tasks, each task counting once.
_MEAN_OVER_TASKS = ('eval/exact_accuracy', 'eval/accuracy', 'eval/q_halt_accuracy', 'eval/steps', 'eval/lm_loss')


def task_keys(name, result):
    """A member task's eval metrics under its name: eval/K -> eval/<task>/K,
    eval_by_difficulty/B -> eval_by_difficulty/<task>/B, eval_at_act_steps/D/K ->
    eval_at_act_steps/D/<task>/K; the task's own scores (already eval/<task>/...) unchanged."""
    named = {}
    for key, value in result.items():
        head, _, rest = key.partition('/')
        if head == 'eval' and '/' not in rest:
            key = f'eval/{name}/{rest}'
        elif head == 'eval_by_difficulty':
            key = f'eval_by_difficulty/{name}/{rest}'
        elif head == 'eval_at_act_steps':
            depth, _, metric = rest.partition('/')
            key = f'eval_at_act_steps/{depth}/{name}/{metric}'
        named[key] = value
    return named


class MixtureEvaluator:
    """Evaluates every task of a mixture on its own test split (one Evaluator each): each
    task's metrics under its name (task_keys), and the mixture's eval/exact_accuracy and
    other per-row means as the mean over the tasks, so that a task with a larger test split
    does not outweigh the others (the best checkpoint is picked by it)."""

    def __init__(self, members):
        self.members = members   # [(task name, Evaluator)]

    def run(self, step, depths=(), interrupt=None):
        result, per_task = {}, []
        for name, evaluator in self.members:
            metrics = evaluator.run(step, depths, interrupt)
            if metrics is None:
                return None
            per_task.append(metrics)
            result.update(task_keys(name, metrics))
        shared = [k for k in per_task[0] if k in _MEAN_OVER_TASKS or k.startswith('eval_at_act_steps/')]
        for key in shared:
            result[key] = sum(metrics[key] for metrics in per_task) / len(per_task)
        result['eval/count'] = sum(metrics['eval/count'] for metrics in per_task)
        return result
