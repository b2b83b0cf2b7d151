#!/usr/bin/env bash
# Installs optional extras (requirements-NAME.lock: gcs, wandb) beside a trm_spmd environment,
# never into it, once, and reuses them while the locks and the environment are the same. The
# only line on stdout is a python that sees the environment and the extras:
#   PY=$(bash launch/extras.sh PYTHON NAME...)     PYTHON: the environment's python
# (`bash launch/setup.sh --gcs --wandb` runs this with the environment it sets up.)
# Environment: TRM_SPMD_ENV_ROOT (where they live, default ~/.cache/trm_spmd).
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
py="$1"
shift
case "$py" in   # the printed python must work from any directory
  /*) ;;
  */*) py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")" ;;
  *) py="$(command -v "$py")" ;;
esac
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
locks=()
for name in "$@"; do
  lock="$repo/requirements-$name.lock"
  [ -f "$lock" ] || { echo "extras.sh: no extra '$name' (no $lock)" >&2; exit 2; }
  locks+=("$lock")
done
names="$(IFS=+; echo "$*")"
version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
# The extras are installed without dependencies against the packages of requirements.lock, so
# every lock and the interpreter they extend key them.
key="$( { cat "$repo/requirements.lock" "${locks[@]}"; echo "$py $version $(uname -sm)"; } |
        sha256sum | cut -c1-12)"
root="${TRM_SPMD_ENV_ROOT:-$HOME/.cache/trm_spmd}"
extra="$root/extra-$names-$key"
mkdir -p "$root"

# One installation at a time: a second caller waits, then reuses the result.
exec 9>"$extra.lock"
flock 9

if [ ! -f "$extra/.complete" ]; then
  echo "[setup] installing the $names extra into $extra (once)" >&2
  rm -rf "$extra"
  # Extras may pin the same package (at the same version): each is named once.
  requirements="$(mktemp)"
  trap 'rm -f "$requirements"' EXIT
  grep -h -v -E '^\s*(#|$)' "${locks[@]}" | sort -u > "$requirements"
  "$py" -m pip install --disable-pip-version-check --progress-bar off --no-deps \
    --target "$extra/site" -r "$requirements" >&2
  # The extras go first on the path: they hold only packages the environment lacks.
  cat > "$extra/python" <<EOF
#!/bin/sh
# $py with the $names extra on its path (launch/extras.sh).
PYTHONPATH="$extra/site\${PYTHONPATH:+:\$PYTHONPATH}" exec "$py" "\$@"
EOF
  chmod +x "$extra/python"
  touch "$extra/.complete"
fi
echo "$extra/python"
