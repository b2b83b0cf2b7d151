#!/usr/bin/env bash
# Installs the optional Weights & Biases extra (requirements-wandb.lock) beside a trm_spmd
# environment, never into it, once, and reuses it while the locks and the environment are the
# same. The only line on stdout is a python that sees the environment and the extra:
#   PY=$(bash launch/wandb_extra.sh PYTHON)     PYTHON: the environment's python
# (`bash launch/setup.sh --wandb` runs this with the environment it sets up.)
# Environment: TRM_SPMD_ENV_ROOT (where it lives, default ~/.cache/trm_spmd).
set -euo pipefail

if [ $# -ne 1 ]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
py="$1"
case "$py" in   # the printed python must work from any directory
  /*) ;;
  */*) py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")" ;;
  *) py="$(command -v "$py")" ;;
esac
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
# The extra is installed without dependencies against the packages of requirements.lock, so
# both locks and the interpreter it extends key it.
key="$( { cat "$repo/requirements.lock" "$repo/requirements-wandb.lock"; echo "$py $version $(uname -sm)"; } |
        sha256sum | cut -c1-12)"
root="${TRM_SPMD_ENV_ROOT:-$HOME/.cache/trm_spmd}"
extra="$root/extra-wandb-$key"
mkdir -p "$root"

# One installation at a time: a second caller waits, then reuses the result.
exec 9>"$extra.lock"
flock 9

if [ ! -f "$extra/.complete" ]; then
  echo "[setup] installing the wandb extra into $extra (about 90 MB, once)" >&2
  rm -rf "$extra"
  "$py" -m pip install --disable-pip-version-check --progress-bar off --no-deps \
    --target "$extra/site" -r "$repo/requirements-wandb.lock" >&2
  # The extra goes first on the path: it holds only packages the environment lacks.
  cat > "$extra/python" <<EOF
#!/bin/sh
# $py with the wandb extra on its path (launch/wandb_extra.sh).
PYTHONPATH="$extra/site\${PYTHONPATH:+:\$PYTHONPATH}" exec "$py" "\$@"
EOF
  chmod +x "$extra/python"
  touch "$extra/.complete"
fi
echo "$extra/python"
