"""Evaluation: every test puzzle runs exactly halt_max_steps ACT steps with the EMA weights.

The reference stops when every row has halted (a host read per step); in eval rows only
halt at the last step, so a fixed count gives the same answer without a sync. Metric sums
stay on the device across batches and are read once at the end.
"""

import numpy as np
import torch

from trm_spmd import fs
from trm_spmd.model.act import initial_carry
from trm_spmd.model.losses import IGNORE_LABEL_ID, loss_and_metrics, predictions

EVAL_SUMS = ('count', 'accuracy', 'exact_accuracy', 'q_halt_accuracy', 'steps', 'lm_loss', 'q_halt_loss')


class DifficultyBuckets:
    """Rows -> bucket ids, by tdoku rating when the data has it, else by blank count."""

    RATING_EDGES = (0, 1, 4, 16)

    def __init__(self, ratings_known, edges=()):
        self.key = 'rating' if ratings_known else 'blanks'
        if edges:
            self.edges = tuple(int(e) for e in edges)
        elif ratings_known:
            self.edges = self.RATING_EDGES
        else:
            self.edges = tuple(range(0, 85, 5))
        self.labels = []
        for i, lo in enumerate(self.edges):
            hi = self.edges[i + 1] - 1 if i + 1 < len(self.edges) else None
            span = f'{lo}+' if hi is None else (f'{lo}' if hi == lo else f'{lo}-{hi}')
            self.labels.append(f'{self.key}_{span}')

    def ids(self, host_batch):
        values = host_batch[self.key]
        return np.clip(np.searchsorted(self.edges, values, side='right') - 1, 0, len(self.edges) - 1).astype(np.int32)


def batch_sums(carry, outputs, bucket, num_buckets, cfg):
    """Metric sums of one finished eval batch, plus exact accuracy per difficulty bucket."""
    _, metrics = loss_and_metrics(carry, outputs, cfg)
    labels = carry['labels']
    mask = labels != IGNORE_LABEL_ID
    correct = ((predictions(outputs['logits']) == labels) | ~mask).all(-1)
    valid = mask.any(-1)
    onehot = torch.nn.functional.one_hot(bucket.long(), num_buckets).float()
    metrics['bucket_count'] = (onehot * valid.float().unsqueeze(-1)).sum(0)
    metrics['bucket_exact'] = (onehot * (valid & correct).float().unsqueeze(-1)).sum(0)
    return metrics


class Evaluator:
    def __init__(self, model, ema, cfg, config, runtime, eval_batches, buckets, workdir):
        self.model, self.ema, self.cfg, self.config = model, ema, cfg, config
        self.runtime = runtime
        self.batches = eval_batches
        self.buckets = buckets
        self.workdir = workdir
        self.global_batch = config.eval.global_batch_size
        from trm_spmd.train.step import EvalStep
        self.step_fn = runtime.compile(EvalStep(model, cfg), 'eval_step', config.xla.max_different_graphs)
        num_buckets = len(buckets.edges)
        self.sums_fn = runtime.compile(
            lambda carry, outputs, bucket: batch_sums(carry, outputs, bucket, num_buckets, cfg), 'eval_sums')
        self._initial = None

    def _initial_carry(self):
        if self._initial is None:
            carry = initial_carry(self.model, self.runtime.local_rows(self.global_batch), self.runtime.device)
            self._initial = {k: self.runtime.shard_along_data(v) for k, v in carry.items()}
            self.runtime.sync()
        return self._initial

    def run(self, step):
        """Evaluates every test batch; returns {'eval/...': float} and writes outputs if asked."""
        swap = self.ema is not None
        if swap:
            self.ema.swap_into()
            self.runtime.sync()   # the swap as its own (cached) graph, not folded into the next one
        try:
            totals, outputs_kept = None, []
            for host_batch in self.batches:
                bucket = self.buckets.ids(host_batch)
                batch = self.runtime.put_batch({k: host_batch[k] for k in ('inputs', 'labels', 'puzzle_identifiers')}
                                               | {'bucket': bucket})
                carry = self._initial_carry()
                for _ in range(self.cfg.halt_max_steps):
                    carry, outputs = self.step_fn(carry, batch)
                sums = self.sums_fn(carry, outputs, batch['bucket'])
                totals = sums if totals is None else {k: totals[k] + v for k, v in sums.items()}
                if self.config.eval.save_outputs:
                    outputs_kept.append(self._host_outputs(outputs, host_batch))
            self.runtime.all_reduce_sum_(list(totals.values()))
            host = {k: v.detach().cpu().numpy() for k, v in totals.items()}
        finally:
            if swap:
                self.ema.swap_back()
                self.runtime.sync()
        if outputs_kept and self.runtime.is_main_host:
            self._save_outputs(step, outputs_kept)
        return self._summarize(host)

    def _host_outputs(self, outputs, host_batch):
        keep = np.asarray(host_batch['valid'], dtype=bool)
        rows = slice(*self.runtime.host_slice(self.global_batch)) if self.runtime.global_view else slice(None)
        logits = outputs['logits'].float().cpu().numpy()[rows][keep]
        return {'index': np.asarray(host_batch['index'])[keep], 'logits': logits,
                'q_halt': outputs['q_halt_logits'].float().cpu().numpy()[rows][keep],
                'predictions': logits.argmax(-1).astype(np.int8)}

    def _save_outputs(self, step, parts):
        import io
        merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        buffer = io.BytesIO()
        np.savez(buffer, **merged)
        path = fs.join(self.workdir, 'eval', f'outputs_{step}.npz')
        fs.makedirs(fs.join(self.workdir, 'eval'))
        with fs.user_facing(path, 'write'):
            if fs.is_remote(path):
                import fsspec
                with fsspec.open(path, 'wb') as f:
                    f.write(buffer.getvalue())
            else:
                import os
                tmp = path + '.tmp'
                try:
                    with open(tmp, 'wb') as f:
                        f.write(buffer.getvalue())
                    os.replace(tmp, path)
                finally:
                    if os.path.exists(tmp):   # a write that failed half-way (a full disk)
                        os.unlink(tmp)

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
