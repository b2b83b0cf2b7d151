"""launch/tpu.py's code: run trm_spmd on a Cloud TPU VM from your own machine.

  cli.py        the command line: the subcommands, their flags, main()
  vm.py         create, setup (this checkout and its environment on every worker), delete
  data.py       data: the same dataset on every worker, built or copied, fingerprints compared
  run.py        run: one run on every worker, detached or attached
  sweep.py      sweep: a sweep's runs one after another, or as a queue on the workers
  watch.py      status, logs, stop
  overrides.py  the trainer's --config.KEY=VALUE overrides and config paths, checked before sending
  remote.py     the shell commands the workers run, and the names they share (logs, queues)
  gcloud.py     the gcloud command lines for one TPU VM (create, delete, ssh, scp)
  shell.py      runs a command, or with --dry_run prints it; LaunchError, the one-line failure

Imports go down this list; nothing here imports trm_spmd except overrides.py and sweep.py,
and only when the project's packages are importable (any Python 3 runs the rest).
"""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
STAGING = os.path.join('~', '.cache', 'trm_spmd', 'launch')  # local files before they are copied
