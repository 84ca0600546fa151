#!/usr/bin/env bash
# NVIDIA AIConfigurator (PyPI aiconfigurator==$AIC_VERSION, with aiconfigurator-core and its
# per-SKU databases) in a cached virtualenv of its own, outside the repository: pandas,
# pyarrow, matplotlib, plotly and bokeh are its dependencies, never the project's. Used by
# `fastverifyctl aiconfigurator export` (the export into its database layout runs there:
# the layout is Parquet) and tests/unit/experiments/test_aiconfigurator_export.py.
# Idempotent: a complete venv (stamp matches the version) is reused as it is.
#
# Usage: scripts/aiconfigurator-venv.sh
#   prints the venv's python on stdout (last line); progress goes to stderr.
# Cache: ${XDG_CACHE_HOME:-$HOME/.cache}/fastverify/aiconfigurator-$AIC_VERSION/
set -euo pipefail

AIC_VERSION="${AIC_VERSION:-0.12.0}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/fastverify"
VENV="$CACHE_ROOT/aiconfigurator-$AIC_VERSION"
STAMP="$VENV/.fastverify-complete"
WANT="aiconfigurator==$AIC_VERSION aiconfigurator-core==$AIC_VERSION"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; then
  echo "aiconfigurator venv: $VENV is complete (nothing to do)" >&2
  echo "$VENV/bin/python"
  exit 0
fi
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 14)))'; then
  echo "aiconfigurator-venv.sh: $PY is not Python 3.11-3.13 (aiconfigurator $AIC_VERSION" \
    "requires it); set PYTHON" >&2
  exit 1
fi
echo "aiconfigurator venv: building $VENV ($WANT)" >&2
rm -rf "$VENV"
mkdir -p "$CACHE_ROOT"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >&2
# shellcheck disable=SC2086  # WANT is a list of requirements
"$VENV/bin/python" -m pip install -q $WANT >&2
"$VENV/bin/python" -c 'import aiconfigurator_core, pandas, pyarrow, yaml' >&2
echo "$WANT" >"$STAMP"
echo "$VENV/bin/python"
