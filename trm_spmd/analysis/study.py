"""A study at a glance, for a notebook or a script: the runs under a root, their comparison
table, the study plots and the failure galleries, as objects a notebook shows (Markdown
tables, PNG pictures) and a script can save.

    from trm_spmd.analysis import open_study
    study = open_study('runs/cpu_study')          # or gs://BUCKET/study
    study.table()                                 # the comparison table (`analysis compare`)
    study.plot('learning_curves')                 # a study plot (`analysis plot`), or why it is missing
    study.galleries()                             # the failure gallery of each task's best run

The same functions as the command line, nothing of its own but the choice of a run per
task. Reading never writes to the study: the plots are drawn in a temporary local directory.
"""

import math
import os
import tempfile
import time

from trm_spmd.analysis import failures, gallery, halting, plots, runs as runs_lib, tables


class Markdown:
    """Text a notebook shows as Markdown."""

    def __init__(self, text):
        self.text = text

    def _repr_markdown_(self):
        return self.text

    def __repr__(self):
        return self.text


class Picture:
    """A PNG a notebook shows as an image; save(path) writes it."""

    def __init__(self, name, data):
        self.name, self.data = name, data

    def _repr_png_(self):
        return self.data

    def save(self, path):
        with open(path, 'wb') as f:
            f.write(self.data)
        return path

    def __repr__(self):
        return self.name


class Study:
    """The runs at or under one root (analysis.load_runs) and what the analysis shows of them."""

    def __init__(self, root, baseline=None):
        self.root = root
        self.runs = runs_lib.load_runs([root])
        self.baseline = baseline
        self._plots = None

    def table(self):
        """The comparison table: one row per run (python -m trm_spmd.analysis compare)."""
        return Markdown(tables.compare_markdown(self.runs))

    def status(self):
        return Markdown(tables.status_markdown(self.runs, time.time()))

    def plot(self, name):
        """The study plot `name` (learning_curves, accuracy_vs_compute, per_task, difficulty,
        act_steps, ...: python -m trm_spmd.analysis plot; and act_steps_used, the ACT steps the
        models use in training): a Picture, or a Markdown line saying what the runs lack for it."""
        if self._plots is None:
            self._plots = self._draw_plots()
        filename = name if name.endswith('.png') else f'{name}.png'
        if filename not in self._plots:
            raise KeyError(f'no study plot {name!r}; known: {", ".join(sorted(self._plots))}')
        data, reason = self._plots[filename]
        return Picture(filename, data) if data else Markdown(f'*{filename}: not drawn: {reason}*')

    def _draw_plots(self):
        drawn = {}
        with tempfile.TemporaryDirectory(prefix='trm_study_plots_') as out:
            for filename, path, reason in plots.render_all(self.runs, out, baseline=self.baseline):
                if path:
                    with open(path, 'rb') as f:
                        drawn[filename] = (f.read(), '')
                else:
                    drawn[filename] = (None, reason)
        try:
            drawn['act_steps_used.png'] = (gallery.png(halting.act_steps_used(self.runs)), '')
        except halting.NothingToDraw as e:
            drawn['act_steps_used.png'] = (None, str(e))
        return drawn

    def run(self, name):
        """The run whose label, variant, name or path is `name`."""
        for run in self.runs:
            if name.rstrip('/') in (run.label, run.variant, run.name, run.path.rstrip('/')):
                return run
        raise KeyError(f'no run {name!r} in {self.root}; runs: {", ".join(r.label for r in self.runs)}')

    def best_runs(self):
        """{task: the run with the highest final held-out exact accuracy on it} among the
        runs that saved evaluation samples."""
        best = {}
        for run in self.runs:
            if not failures.saved(run.path):
                continue
            for task in run.tasks:
                key = run.task_exact_key(task)
                value = run.last_value(key) if key else None
                score = value if value is not None and math.isfinite(value) else -1.0
                if task not in best or score > best[task][0]:
                    best[task] = (score, run)
        return {task: run for task, (_, run) in sorted(best.items())}

    def samples(self, run, task=None, step=None):
        """[failures.Sample] of a run (a Run or its name): each task's newest evaluation, or at `step`."""
        run = self.run(run) if isinstance(run, str) else run
        return failures.load_samples(run.path, task=task, step=step)

    def gallery(self, run, task=None, step=None, limit=8):
        """[Picture] of the run's failures, one per task: the held-out examples it got wrong."""
        run = self.run(run) if isinstance(run, str) else run
        return [Picture(f'failures_{os.path.basename(run.path.rstrip("/"))}_{s.task}_{s.step}.png',
                        gallery.png(gallery.figure(s, limit=limit)))
                for s in self.samples(run, task=task, step=step)]

    def galleries(self, run=None, limit=8):
        """The failure gallery of `run`, or of each task's best run (best_runs)."""
        if run:
            return self.gallery(run, limit=limit)
        chosen = self.best_runs()
        if not chosen:
            return [Markdown('*No run of this study saved evaluation samples (eval.samples): no gallery.*')]
        return [picture for task, run in chosen.items() for picture in self.gallery(run, task=task, limit=limit)]


def open_study(root, baseline=None):
    """The Study of every run at or under `root` (a local folder or gs://...)."""
    return Study(root, baseline)
