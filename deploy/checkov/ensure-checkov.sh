#!/usr/bin/env bash
# Installs checkov into its own virtual environment, <repo>/.venv-checkov, and prints the path
# of its `checkov` executable. Idempotent: does nothing when the pinned version is there.
#
# Why a separate venv: checkov pins packaging<24 and networkx<2.7, which conflict with
# constraints.txt (packaging==25.0, networkx==3.6.1 via torch), so it cannot live in .venv
# without moving those pins. tests/deployment/test_chart.py calls this script (no Makefile
# involved); run it by hand to scan the chart: see charts/edgetune/README.md.
#
#   deploy/checkov/ensure-checkov.sh            # -> /path/to/.venv-checkov/bin/checkov
#   PYTHON=python3.12 deploy/checkov/ensure-checkov.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${EDGETUNE_CHECKOV_VENV:-$root/.venv-checkov}"
python="${PYTHON:-python3.11}"
pin="$(grep -E '^checkov==' "$here/constraints.txt")"
stamp="$venv/.installed-${pin#checkov==}"

if [ -x "$venv/bin/checkov" ] && [ -f "$stamp" ]; then
  echo "$venv/bin/checkov"
  exit 0
fi

mkdir -p "$venv"
printf '*\n' > "$venv/.gitignore"            # the venv never shows up in `git status`
exec 9>"$venv/.lock"          # two test workers at once: one installs, the other waits
flock 9
if [ ! -f "$stamp" ]; then
  command -v "$python" >/dev/null 2>&1 || python=python3
  test -x "$venv/bin/python" || "$python" -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      -c "$here/constraints.txt" "$pin" >&2
  touch "$stamp"
fi
echo "$venv/bin/checkov"
