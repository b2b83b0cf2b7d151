"""The training run: a pure train step compiled once (step.py), the loop that owns the cadence
of logs, evaluations and checkpoints (loop.py), evaluation (evaluate.py), the run's dataset or
mixture of datasets (data.py), metrics and their W&B mirror, the run record, setup.

On the map (README.md: Layout) train/ builds on every row below it: runtime/, config/, model/,
optim/, tasks/, data/, and the run around training (checkpoint, lease/, hosts); only the
commands (main, solve) import it.
"""
