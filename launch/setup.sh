#!/usr/bin/env bash
# Creates the trm_spmd Python environment once and reuses it while requirements.lock is
# unchanged; installs this checkout into it (editable). Progress goes to stderr; the only
# line on stdout, the last line of output, is the environment's python:
#   PY=$(bash launch/setup.sh) && $PY -m pytest tests
# Options: --tpu (TPU VMs: torch_xla's libtpu, and the gs:// extra), --gcs (the gs:// extra: gcsfs,
#          google-cloud-storage and a Cloud Storage server for rehearsals), --wandb (the Weights & Biases
#          extra); extras go beside the environment and the python printed sees both (launch/extras.sh).
# Environment: TRM_SPMD_PYTHON (interpreter to build from, default the first Python 3.11/3.12 found),
#              TRM_SPMD_ENV_ROOT (where environments live, default ~/.cache/trm_spmd).
set -euo pipefail

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
tpu=0
extras=()
for arg in "$@"; do
  case "$arg" in
    --tpu) tpu=1 ;;
    --gcs) extras+=(gcs) ;;
    --wandb) extras+=(wandb) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { echo "[setup] $*" >&2; }

# requirements.lock needs Python 3.11 or 3.12: numpy 2.4 and jax 0.10 start at 3.11, torch_xla
# 2.9 has wheels up to 3.12. The first of python3, python3.12, python3.11 that is one of them.
supported() { "$1" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null; }
base_python="${TRM_SPMD_PYTHON:-}"
if [ -z "$base_python" ]; then
  for candidate in python3 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null && supported "$candidate"; then base_python="$candidate"; break; fi
  done
fi
if [ -z "$base_python" ] && [ "$tpu" = 1 ] && command -v apt-get >/dev/null && sudo -n true 2>/dev/null; then
  # A TPU VM (tpu-ubuntu2204-base) has Python 3.10; Ubuntu 22.04's universe archive has 3.11.
  # The lock timeout waits out the unattended upgrades a freshly booted VM runs.
  say "installing python3.11 and python3.11-venv with apt (this VM's python3 is $(python3 -V 2>&1))"
  sudo -n apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  sudo -n DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    python3.11 python3.11-venv >&2
  base_python=python3.11
fi
if [ -z "$base_python" ]; then
  echo "setup.sh: no Python 3.11 or 3.12 found (python3 is $(python3 -V 2>&1 || echo missing)); install one" \
       "(Ubuntu 22.04: sudo apt-get install python3.11 python3.11-venv) or set TRM_SPMD_PYTHON" >&2
  exit 1
fi
if ! command -v "$base_python" >/dev/null || ! supported "$base_python"; then
  echo "setup.sh: TRM_SPMD_PYTHON=$base_python is not Python 3.11 or 3.12 (requirements.lock needs one of them)" >&2
  exit 1
fi
pyver="$("$base_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

# A TPU VM's environment also holds torch_xla's Pallas extra (its jax), hence its own key.
flavour="tpu=$tpu"
[ "$tpu" = 1 ] && flavour="tpu=1 pallas"
key="$( { cat "$repo/requirements.lock"; echo "python=$pyver $flavour $(uname -sm)"; } | sha256sum | cut -c1-12)"
root="${TRM_SPMD_ENV_ROOT:-$HOME/.cache/trm_spmd}"
venv="$root/venv-$key"
py="$venv/bin/python"
mkdir -p "$root"

# One set-up at a time per environment: a second caller waits, then reuses the result.
exec 9>"$venv.lock"
flock 9

if [ ! -f "$venv/.complete" ]; then
  start=$SECONDS
  say "creating $venv (torch and torch_xla are several GB: minutes, once; later runs reuse it)"
  rm -rf "$venv"
  "$base_python" -m venv "$venv" >&2
  say "step 1/3: pip"
  "$py" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  say "step 2/3: pinned packages from requirements.lock"
  lock="$repo/requirements.lock"
  if [ "$tpu" = 1 ]; then
    # torch_xla[tpu,pallas] pins its own libtpu (the runtime of the TPU VM) and the jax that
    # lowers Pallas kernels for it (xla.token_mix_kernel); the lock's libtpu and jax are the
    # compile-only TPU compiler of benchmarks/tpu_compile.py, for machines without a TPU.
    lock="$venv.requirements"
    grep -v -E '^(libtpu|jax|jaxlib)==' "$repo/requirements.lock" > "$lock"
  fi
  "$py" -m pip install --disable-pip-version-check --progress-bar off -r "$lock" >&2
  if [ "$tpu" = 1 ]; then
    say "step 2b/3: libtpu and Pallas for TPU VMs"
    "$py" -m pip install --disable-pip-version-check 'torch_xla[tpu,pallas]==2.9.0' >&2
  fi
  touch "$venv/.complete"
  say "environment ready in $((SECONDS - start)) s"
else
  say "reusing $venv"
fi

# The editable install points the environment at this checkout; redo it only when it
# points elsewhere (another clone sharing the same environment).
installed="$(cd / && "$py" -c 'import os, trm_spmd; print(os.path.dirname(os.path.dirname(os.path.abspath(trm_spmd.__file__))))' 2>/dev/null || true)"
if [ "$installed" != "$repo" ]; then
  say "step 3/3: installing $repo (editable)"
  "$py" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$repo" >&2
fi
# A TPU VM's runs live on gs://: its workers get the pinned gs:// extra the tests ran with.
[ "$tpu" = 1 ] && extras+=(gcs)
if [ "${#extras[@]}" -gt 0 ]; then
  exec bash "$repo/launch/extras.sh" "$py" $(printf '%s\n' "${extras[@]}" | sort -u)
fi
echo "$py"
