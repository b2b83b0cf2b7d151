#!/usr/bin/env python3
"""Run trm_spmd on a Cloud TPU VM: one program per host, the same command on every host.

A pod slice is several VMs ("workers") with separate disks, so everything that must happen
on every host goes through `gcloud compute tpus tpu-vm ssh NAME --worker=all`. A v4-64 is
32 chips = 8 workers x 4 devices.

  python launch/tpu.py create --accelerator_type=v4-64 --spot
  python launch/tpu.py setup --copy
  python launch/tpu.py data --build_args='--generate=5000 --blanks=30:45'
  python launch/tpu.py run --config=configs/tn_sweep.py:t3_n6 --workdir=gs://B/study/tn_sweep/t3_n6 \\
      --config.optim.lr=3e-4
  python launch/tpu.py sweep --sweep=configs/tn_sweep.py --study_root=gs://B/study --queue
  python launch/tpu.py status | logs | stop | delete

run and sweep take config overrides as the trainer does (--config.KEY=VALUE) and pass them on.

--name, --zone and --project default to $TRM_TPU_NAME, $TRM_TPU_ZONE and $TRM_TPU_PROJECT.
Every subcommand takes --dry_run (print the commands, shell-quoted, one per line; run nothing)
and --help. Run it from the repository root: config paths are relative to it, here and on the
workers, which run everything from ~/trm_spmd.
"""

import os
import sys

# The code is the tpu_vm package beside this script (launch/tpu_vm/__init__.py lists its files).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_vm.cli import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
