"""What a run's evaluations got wrong: the sample every evaluation saves
(DIR/eval/samples_STEP.npz, trm_spmd/train/samples.py) as records of question, answer,
prediction and verdict, one Sample per task and evaluation.

    from trm_spmd.analysis import failures
    for sample in failures.load_samples('runs/quickstart'):     # each task's newest evaluation
        print(sample.describe())
        for record in sample.failures:
            print(record.index, record.verdict)

The sample is the same evenly spaced held-out examples at every evaluation of a dataset,
so two steps or two runs compare on the same puzzles. A record is correct when every
supervised cell is right (the evaluation's exact accuracy); its verdict is the task's own
line on what is wrong (Task.judge: a Sudoku rule broken, a maze path that breaks off, an ARC
grid of the wrong size). Reading never writes to the run: local or gs://, through trm_spmd.fs.
"""

import dataclasses
import io
import math
import re
import zipfile

import numpy as np

from trm_spmd import errors, fs, tasks

EVAL_DIR = 'eval'
_FILE = re.compile(r'^samples_(?:(?P<task>[a-z][a-z0-9]*)_)?(?P<step>\d+)\.npz$')


class NoSamples(errors.UserError):
    """The run has no saved evaluation sample of what was asked."""


@dataclasses.dataclass(frozen=True)
class Record:
    task: str
    index: int                  # the example's index in the test split
    question: np.ndarray        # input tokens, the task's own
    answer: np.ndarray          # label tokens (-100 where unsupervised)
    prediction: np.ndarray      # the model's tokens after the evaluation's ACT steps
    correct: bool               # every supervised cell right
    verdict: str                # 'right', or what is wrong in the task's terms
    confidence: float           # the model's halting probability (sigmoid of its q_halt logit)
    puzzle_identifier: int

    def render(self):
        """The question and the model's answer as text (the task's drawing, as `solve` prints)."""
        return tasks.get(self.task).render(self.question, self.prediction)


@dataclasses.dataclass(frozen=True)
class Sample:
    run: str                    # the run directory
    task: str
    step: int                   # the training step evaluated
    act_steps: int              # ACT steps every example ran
    num_examples: int           # examples in the test split the sample is drawn from
    records: tuple

    @property
    def failures(self):
        return [r for r in self.records if not r.correct]

    def describe(self):
        wrong = len(self.failures)
        return (f'{self.task} at step {self.step:,}: {wrong} of {len(self.records)} held-out examples wrong '
                f'({_pct(wrong, len(self.records))}; the sample is spread evenly over the '
                f'{self.num_examples:,} of the test split), {self.act_steps} ACT steps')


def _pct(part, whole):
    return f'{100 * part / whole:.0f}%' if whole else '-'


def saved(run_dir):
    """[(task or None, step, path)] of every sample file of the run, ascending by step; the
    task is None for a single-task run's files (the file names it)."""
    found = []
    for path in fs.glob(fs.join(run_dir, EVAL_DIR, 'samples_*.npz')):
        match = _FILE.match(path.rsplit('/', 1)[-1])
        if match:
            found.append((match['task'], int(match['step']), path))
    return sorted(found, key=lambda t: (t[1], t[0] or ''))


def read_sample(path, run_dir):
    """The Sample in one samples_STEP.npz file of the run in run_dir."""
    try:
        data = fs.read_bytes(path)
        if not data.startswith(b'PK'):
            raise ValueError('not an npz archive')
        arrays = np.load(io.BytesIO(data), allow_pickle=False)
        fields = {k: arrays[k] for k in arrays.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise NoSamples(f'{path}: not a readable evaluation sample ({e}); evaluate the run\'s checkpoint '
                        f'again into another workdir (--config.mode=eval --config.init_from=RUN)') from None
    task_name = str(fields['task'])
    task = tasks.get(task_name)
    records = []
    for i, index in enumerate(fields['index']):
        question, answer, prediction = (fields[k][i] for k in ('inputs', 'labels', 'predictions'))
        correct, verdict = task.judge(question, answer, prediction)
        records.append(Record(task_name, int(index), question, answer, prediction, bool(correct), verdict,
                              _sigmoid(float(fields['q_halt_logits'][i])), int(fields['puzzle_identifiers'][i])))
    return Sample(run_dir, task_name, int(fields['step']), int(fields['act_steps']),
                  int(fields['num_examples']), tuple(records))


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def load_samples(run_dir, task=None, step=None):
    """[Sample] of the run: each task's newest evaluation, or its evaluation at `step`; only
    `task`'s when given. NoSamples says what the run has instead."""
    if not fs.isdir(run_dir):
        raise NoSamples(f'{run_dir} is not a directory; pass a run directory (one holding config.json)')
    files = saved(run_dir)
    if not files:
        raise NoSamples(f'{run_dir} has no evaluation sample ({EVAL_DIR}/samples_STEP.npz; runs save one at '
                        f'every evaluation unless eval.samples=0): evaluate its checkpoint into another workdir, '
                        f'python -m trm_spmd.main --config=ITS_CONFIG --config.mode=eval '
                        f'--config.init_from={run_dir} --workdir=NEW_DIR')
    wanted = [f for f in files if step is None or f[1] == step]
    if not wanted:
        steps = ', '.join(str(s) for s in sorted({s for _, s, _ in files}))
        raise NoSamples(f'{run_dir} has no evaluation sample of step {step}; it has steps {steps}')
    newest = {}
    for file_task, file_step, path in wanted:
        newest[file_task] = (file_step, path)   # ascending by step: the newest wins
    samples = [read_sample(path, run_dir) for _, path in newest.values()]
    if task is not None:
        samples = [s for s in samples if s.task == task]
        if not samples:
            raise NoSamples(f'{run_dir} has no evaluation sample of task {task!r}; it has '
                            f'{", ".join(sorted({s.task for s in load_samples(run_dir, step=step)}))}')
    return sorted(samples, key=lambda s: s.task)
