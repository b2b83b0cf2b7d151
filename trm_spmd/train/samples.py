"""A small, fixed sample of what an evaluation saw: questions, answers and predictions.

Every evaluation keeps `eval.samples` held-out examples, evenly spaced over the test split
(the same examples at every step and in every run of a dataset, so that galleries of two
steps or two runs show the same puzzles), and the main host writes them to
DIR/eval/samples_STEP.npz (a mixture member: samples_TASK_STEP.npz) next to the metrics:

    step, task, act_steps, num_examples   scalars: the evaluation's step, the task family,
                                          the ACT steps run, the size of the test split
    index                int64 [n]        example index in the test split
    inputs, labels       int16 [n, L]     the task's own tokens (labels: -100 where unsupervised)
    predictions          int16 [n, L]     the model's answer after act_steps ACT steps
    q_halt_logits        float32 [n]      its halting logit (confidence: sigmoid)
    puzzle_identifiers   int32 [n]

trm_spmd.analysis.failures reads them back. Nothing here runs inside a compiled step: the
evaluator hands over the predictions of the few batches that hold sampled rows, already on
the host, and the questions and answers come from the split on the main host's disk.
"""

import io

import numpy as np

from trm_spmd import fs


def sample_rows(num_examples, count):
    """Up to `count` example indices of a split of `num_examples`, evenly spaced, ascending."""
    if count <= 0 or num_examples <= 0:
        return np.zeros(0, np.int64)
    return np.unique(np.linspace(0, num_examples - 1, min(count, num_examples)).round().astype(np.int64))


class SampleKeeper:
    """The predictions of the sampled rows of one evaluation, batch by batch."""

    def __init__(self, rows, global_batch):
        self.rows = rows
        self.global_batch = global_batch
        self._batches = set((rows // global_batch).tolist())
        self.predictions, self.q_halt = {}, {}

    def wants(self, batch_index):
        return batch_index in self._batches

    def add(self, batch_index, predictions, q_halt_logits):
        """predictions [global batch, L] and q_halt_logits [global batch] of batch `batch_index`."""
        first = batch_index * self.global_batch
        for row in self.rows[(self.rows >= first) & (self.rows < first + self.global_batch)]:
            self.predictions[int(row)] = predictions[row - first]
            self.q_halt[int(row)] = q_halt_logits[row - first]

    def write(self, path, step, task, act_steps, batches):
        """Writes the sample (questions and answers read from `batches`, the EvalBatches) to `path`."""
        rows = np.array(sorted(self.predictions), np.int64)
        examples = batches.examples(rows)
        arrays = {
            'step': np.int64(step), 'task': np.str_(task), 'act_steps': np.int64(act_steps),
            'num_examples': np.int64(batches.num_examples), 'index': rows,
            'inputs': examples['inputs'].astype(np.int16), 'labels': examples['labels'].astype(np.int16),
            'predictions': np.stack([self.predictions[r] for r in rows]).astype(np.int16),
            'q_halt_logits': np.array([self.q_halt[r] for r in rows], np.float32),
            'puzzle_identifiers': examples['puzzle_identifiers'].astype(np.int32),
        }
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        fs.write_bytes(path, buffer.getvalue())
