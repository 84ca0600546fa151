#!/usr/bin/env bash
# A venv holding one more SGLang release for the contract suite, sharing everything else
# (torch, transformers, ... : 6 GB) with the full venv scripts/sglang-venv.sh builds: the
# release's own wheel (cached by scripts/sglang_facts.py, else downloaded) is installed
# without dependencies into this venv's site-packages, which comes before the shared
# site-packages (a .pth file) on sys.path. Enough for what imports on CPU: the argparse
# parser and the span builder (tests/contract/test_sglang_releases_contract.py), the
# argument-resolution hooks and `_set_envs_and_config` (tests/contract/test_sglang_contract.py).
# 0.5.1.post3's entrypoints/engine.py does not import over the shared torch 2.14 (its
# custom_op probes torch._C._cpu._is_amx_tile_supported, gone since; it needs sgl_kernel),
# and its pinned stack does not either on a machine without a GPU: torch 2.8.0 + its CUDA 12
# libraries + sgl-kernel 0.3.7 are 4.0 GB to download and 7.4 GB installed, and sgl_kernel
# then fails on libcuda.so.1 (the driver). tests/contract/probe.py imports that module with
# placeholders for the scheduler/tokenizer modules the start-up hook does not use instead.
#
# Usage: scripts/sglang-release-venv.sh VERSION   (prints the venv's python, last line)
# Cache: ${XDG_CACHE_HOME:-$HOME/.cache}/fastverify/sglang-VERSION-shared/
set -euo pipefail

VERSION="${1:?usage: scripts/sglang-release-venv.sh VERSION}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/fastverify"
HERE="$(cd "$(dirname "$0")" && pwd)"
# the full venv: $FASTVERIFY_SGLANG_PYTHON when set (as the contract suite), else built
BASE_PY="${FASTVERIFY_SGLANG_PYTHON:-$("$HERE/sglang-venv.sh" | tail -1)}"
BASE_SP="$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
VENV="$CACHE_ROOT/sglang-$VERSION-shared"
STAMP="$VENV/.fastverify-stamp"
log() { printf 'sglang-release-venv: %s\n' "$*" >&2; }

mkdir -p "$CACHE_ROOT/wheels"
exec 9>"$CACHE_ROOT/.sglang-$VERSION-shared.lock"  # one builder at a time (parallel suites)
flock 9
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "sglang==$VERSION over $BASE_SP" ]]; then
    log "reusing $VENV"
    printf '%s\n' "$VENV/bin/python"
    exit 0
fi
WHEELS="$CACHE_ROOT/wheels"
mkdir -p "$WHEELS"
exec 8>"$WHEELS/.lock-$VERSION"  # the lock scripts/sglang_facts.py takes for this wheel
flock 8
if ! compgen -G "$WHEELS/sglang-$VERSION-*.whl" >/dev/null; then
    log "downloading sglang==$VERSION"
    "$BASE_PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_34_x86_64 "sglang==$VERSION" -d "$WHEELS" 2>&1 \
        | { grep -v 'is ignored: it is neither' || true; } >&2
fi
rm -rf "$VENV"
"$BASE_PY" -m venv --without-pip "$VENV"
SP="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '%s\n' "$BASE_SP" > "$SP/zz-fastverify-shared-deps.pth"
"$BASE_PY" -m pip install -q --no-deps --target "$SP" "$WHEELS"/sglang-"$VERSION"-*.whl 2>&1 \
    | { grep -v 'is ignored: it is neither' || true; } >&2
got="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))')"
[[ "$got" == "$VERSION" ]] || { log "the venv reports sglang $got, not $VERSION"; exit 1; }
printf 'sglang==%s over %s' "$VERSION" "$BASE_SP" > "$STAMP"
log "ready: $VENV"
printf '%s\n' "$VENV/bin/python"
