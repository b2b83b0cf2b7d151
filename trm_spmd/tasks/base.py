"""What a task family gives the task-agnostic rest of the library.

The loader, model, train step, evaluator and checkpoints read sizes and ids from a
dataset's dataset.json and nothing else; everything that knows what a token means lives
in a Task. A new family is a subpackage of trm_spmd/tasks with a `TASK` and an entry in
trm_spmd/tasks/__init__.py's registry, and a build_cli.py (its builder's flags and main) that
`python -m trm_spmd.build NAME` runs.

Exact accuracy in training and evaluation is the official rule for every family: a row
is exact when every supervised label cell is predicted (losses.py), which needs no task
knowledge. A task's own rule, `verdict`, judges an answer without labels, as `solve` needs:
is a Sudoku grid valid, is a path through a maze a shortest one.
"""

import dataclasses

import numpy as np

from trm_spmd.batch import IGNORE_LABEL
from trm_spmd.progress import Progress


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """Random symmetries of training rows, drawn per row from `draws` uniform numbers
    (a multiple of 4): apply(u [n, draws], inputs [n, L], labels [n, L]) -> (inputs, labels)."""
    draws: int
    apply: object


class Task:
    name = ''
    generate_example = ''        # the flags of a small generated build, for error messages
    difficulty_name = ''         # what Split.difficulty measures (eval_by_difficulty/<name>_LO-HI)
    rating_edges = None          # bucket edges of the data's own ratings; None: ignore ratings
    augmentation: Augmentation | None = None   # on-the-fly training symmetries (data.augment)

    def build_command(self):
        """The command that builds a dataset of this task (trm_spmd/build.py)."""
        return f'python -m trm_spmd.build {self.name}'

    def build_hint(self, output_dir='DIR'):
        return f'{self.build_command()} {self.generate_example} --output_dir={output_dir}'

    def sizes(self, data_config):
        """{'seq_len', 'vocab_size'} of this task's datasets as data_config describes them, for
        what runs without a dataset (--dry_run, benchmarks, the TPU compiler)."""
        raise NotImplementedError

    def epoch_examples(self, data_config):
        """Training rows of one epoch of the data data_config describes, where the task knows
        them without the dataset (projections), else None."""
        return None

    def check_metadata(self, metadata, path):
        """A one-line reason why a split with this dataset.json is not of this task, or None."""
        raise NotImplementedError

    def difficulty(self, inputs, labels):
        """int32 [N]: how hard each example is (buckets of eval_by_difficulty)."""
        raise NotImplementedError

    def difficulty_edges(self, seq_len):
        """Default bucket edges of `difficulty` for sequences of seq_len."""
        raise NotImplementedError

    # ---- the built-in generator (config data.generate) --------------------------------
    def generated_name(self, data_config, seed):
        """The cache directory name of a generated dataset: every setting that changes its bytes."""
        raise NotImplementedError

    def build_generated(self, output_dir, data_config, seed, progress=True):
        """Builds the generated dataset that data_config describes; returns a summary line."""
        raise NotImplementedError

    def describe_generated(self, data_config):
        """A few words on what build_generated makes, for the run's log."""
        raise NotImplementedError

    def scorer(self, dataset_dir, test_split, solutions=''):
        """The task's own score of an evaluation, beside exact accuracy: an object with
        add(example_indices, predictions, q_halt_logits) and result() -> (metrics, submission);
        None when exact accuracy is the whole story. solutions: eval.arc_solutions."""
        return None

    def trained_tasks_line(self, dataset_dir, pretrained_dir):
        """Post-training on new tasks: a `warning:` line when the dataset's tasks were in the
        pretrained run's dataset (their trained rows are replaced), else None."""
        return None

    # ---- one puzzle at a time (solve) ---------------------------------------------------
    def parse(self, text):
        """A puzzle typed by a person -> input tokens [seq_len]; ValueError with the reason."""
        raise NotImplementedError

    def check_input(self, inputs):
        """(error, warning) about a puzzle before the model sees it: error says why it has no
        answer (the model is not asked), warning what is odd but still answerable; each None
        when there is nothing to say."""
        raise NotImplementedError

    def verdict(self, inputs, prediction):
        """(correct, one-line judgement) of a predicted token row, by the task's own rule."""
        raise NotImplementedError

    def render(self, inputs, prediction):
        """The puzzle and the model's answer as text, side by side or one above the other."""
        raise NotImplementedError

    def judge(self, inputs, labels, prediction):
        """(correct, one line) of a predicted row against its answer `labels` (-100 where
        unsupervised): correct when every supervised cell is right, the evaluation's exact
        accuracy; the line says what is wrong in the task's terms (its verdict)."""
        wrong, supervised = wrong_cells(labels, prediction)
        if not wrong:
            return True, 'right'
        _, verdict = self.verdict(inputs, prediction)
        return False, f'{wrong} of {supervised} cells wrong; {verdict}'


def wrong_cells(labels, prediction):
    """(cells predicted wrong, cells supervised) of one row."""
    labels, prediction = np.asarray(labels), np.asarray(prediction)
    supervised = labels != IGNORE_LABEL
    return int(np.count_nonzero((prediction != labels) & supervised)), int(np.count_nonzero(supervised))


def draw_unique(count, draw, taken, progress, label, unit):
    """(questions, answers) stacked: `count` draws of draw() -> (question, answer) whose
    question is not in `taken` (question bytes; updated), with a progress line on stderr."""
    questions, answers = [], []
    bar = Progress(label, count, progress, unit=unit)
    while len(questions) < count:
        question, answer = draw()
        if question.tobytes() not in taken:
            taken.add(question.tobytes())
            questions.append(question)
            answers.append(answer)
            bar.update(len(questions))
    bar.close()
    return np.stack(questions), np.stack(answers)


def side_by_side(left, right, titles=('puzzle', 'model'), gap=5):
    """Two blocks of text lines next to each other under their titles."""
    width = max(len(line) for line in left + [titles[0]])
    lines = [f'{titles[0]:<{width}}{" " * gap}{titles[1]}']
    lines += [f'{a:<{width}}{" " * gap}{b}' for a, b in zip(left, right)]
    return '\n'.join(line.rstrip() for line in lines)

