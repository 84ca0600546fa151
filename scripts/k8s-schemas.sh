#!/usr/bin/env bash
# Install the schemas tests/deployment/test_kubernetes.py validates custom resources with
# (tests/fixtures/k8s-schemas/README.md says which, in which version, and from where) into
# a cache directory: $FASTVERIFY_K8S_SCHEMAS, else ~/.cache/fastverify/k8s-schemas.
# The built-in kinds are checked by kubernetes-validate (pyproject's dev extras).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${FASTVERIFY_K8S_SCHEMAS:-${XDG_CACHE_HOME:-$HOME/.cache}/fastverify/k8s-schemas}"
command -v npm >/dev/null || { echo "k8s-schemas: npm is missing (apt-get install npm)" >&2; exit 6; }
mkdir -p "$dest"
# already there in the pinned versions: nothing to fetch
if cmp -s "$here/tests/fixtures/k8s-schemas/package.json" "$dest/package.json" &&
  [ -f "$dest/package-lock.json" ] && [ -d "$dest/node_modules" ]; then
  echo "k8s-schemas: up to date in $dest"
  exit 0
fi
cp "$here/tests/fixtures/k8s-schemas/package.json" "$dest/package.json"
npm install --prefix "$dest" --no-audit --no-fund --ignore-scripts --omit=dev --loglevel=error
echo "k8s-schemas: installed in $dest"
