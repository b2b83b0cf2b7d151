"""Results analysis for trm_spmd studies: comparison tables, a status dashboard, plots, and
what a run gets wrong.

Reads the run directories the training loop writes (config.json, run.json,
metrics.jsonl, the evaluation samples under eval/), on a disk or on a bucket (gs://, through
trm_spmd.fs), and never writes to them. Plotting needs matplotlib (the optional `plots`
group); the rest does not. Command line: `python -m trm_spmd.analysis
{compare,status,plot,failures} ...`; in a notebook, `open_study(ROOT)` (benchmarks/study.ipynb).

It reads files, never the training code: it imports the floor (errors, fs) and, to judge and
draw saved answers, tasks/ (failures.py, gallery.py); so it runs without torch_xla or the model.
"""

from trm_spmd.analysis.failures import NoSamples, Record, Sample, load_samples
from trm_spmd.analysis.runs import Run, RunDiscoveryError, load_run, load_runs
from trm_spmd.analysis.study import Study, open_study

__all__ = ['NoSamples', 'Record', 'Run', 'RunDiscoveryError', 'Sample', 'Study', 'load_run', 'load_runs',
           'load_samples', 'open_study']
