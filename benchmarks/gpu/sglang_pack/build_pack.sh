#!/bin/bash
# Build the SGLang 0.5.17 carry pack for a GPU machine with torch 2.11.0+cu130 and Python 3.12
# that reaches no registry: the wheels of reqs-sglang-0.5.17.txt installed --no-deps into one
# pruned site tree, xz-compressed (~48 MB), with the tiny model configs beside it. Runs here
# (needs PyPI and a Python 3.12, e.g. pyenv's).
#   benchmarks/gpu/sglang_pack/build_pack.sh OUTDIR     (OUTDIR becomes the folder to carry)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUTDIR=$(realpath -m "${1:?usage: build_pack.sh OUTDIR}")
if [ -z "${PY312:-}" ]; then
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 "$(command -v python3.12 || true)"; do
    [ -n "$c" ] && "$c" -V >/dev/null 2>&1 && { PY312=$c; break; }
  done
fi
"${PY312:-false}" -V >/dev/null 2>&1 || { echo "need a Python 3.12 (set PY312)"; exit 2; }
W=$(mktemp -d /tmp/sglpack.XXXX)
trap 'rm -rf "$W"' EXIT
"$PY312" -m venv "$W/venv" && "$W/venv/bin/pip" install -q wheel
PYW="$W/venv/bin/python"
PLAT=()
for p in manylinux_2_34 manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
  PLAT+=(--platform "${p}_x86_64")
done
mkdir -p "$W/dl" "$W/wheels"
"$PYW" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --abi cp312 --abi abi3 --abi none "${PLAT[@]}" -d "$W/dl" -r "$HERE/reqs-sglang-0.5.17.txt"
# slim the two fat wheels: FA3/FlashMLA/InfLLM and the SM100 build out of sglang-kernel (Hopper
# only, triton attention), the static library out of xgrammar
cd "$W"
"$PYW" -m wheel unpack "$W"/dl/sglang_kernel-0.4.5-*.whl >/dev/null
rm -f sglang_kernel-0.4.5/sgl_kernel/flash_ops.abi3.so sglang_kernel-0.4.5/sgl_kernel/flashmla_ops.abi3.so \
  sglang_kernel-0.4.5/sgl_kernel/infllm_ops.*.so
rm -rf sglang_kernel-0.4.5/sgl_kernel/sm100
"$PYW" -m wheel pack sglang_kernel-0.4.5 -d "$W/wheels" >/dev/null
"$PYW" -m wheel unpack "$W"/dl/xgrammar-0.2.1-*.whl >/dev/null
rm -rf xgrammar-0.2.1/xgrammar/lib
"$PYW" -m wheel pack xgrammar-0.2.1 -d "$W/wheels" >/dev/null
for f in "$W"/dl/*.whl; do
  case "$(basename "$f")" in sglang_kernel-* | xgrammar-*) ;; *) cp -f "$f" "$W/wheels/" ;; esac
done
"$PYW" -m pip install -q --no-index --no-deps --target "$W/site" "$W"/wheels/*.whl
cd "$W/site" && rm -rf bin sglang/multimodal_gen sglang/test &&
  rm -f sglang/srt/server/_core*.so sglang/srt/grpc/_core*.so sglang/srt/multimodal/_core*.so &&
  rm -f zstandard/_cffi*.so &&  # zstandard's fallback backend: it imports backend_c first
  find . -name __pycache__ -type d -prune -exec rm -rf {} +
mkdir -p "$OUTDIR"
# one thread and a dictionary the size of the tree's repeats: 2 MB smaller than -T2 -9 (the tree
# travels with the checkout under 64 MiB), ~14 min on 2 cores; 385 MiB to unpack
tar -C "$W" -cf - site | xz -T1 -9e --lzma2=preset=9e,dict=384MiB >"$OUTDIR/sglang-0.5.17-site.tar.xz"
du -b "$OUTDIR/sglang-0.5.17-site.tar.xz"
