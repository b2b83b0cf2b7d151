"""Results analysis for trm_spmd studies: comparison tables, a status dashboard, plots.

Reads the run directories the training loop writes (config.json, run.json,
metrics.jsonl), on a disk or on a bucket (gs://, through trm_spmd.fs). Plotting needs
matplotlib (the optional `plots` group); the rest does not. Command line:
`python -m trm_spmd.analysis {compare,status,plot} ...`.

It reads files, never the training code: it imports only the floor (errors, fs), so it runs
without torch_xla or the model.
"""

from trm_spmd.analysis.runs import Run, RunDiscoveryError, load_run, load_runs

__all__ = ['Run', 'RunDiscoveryError', 'load_run', 'load_runs']
