#!/usr/bin/env bash
# Build NCCL's own example tuner plugin (plugins/tuner/example of NVIDIA/nccl) from NCCL's
# source, outside this repository, for the tests that load fastverify's NCCL-format CSV
# export with it (tests/unit/tuner/test_nccl_csv_plugin.py). NCCL's code is never copied
# into the repository: the files are read from a NCCL git repository (or checkout).
#
#   scripts/nccl-example-tuner.sh                   # -> prints the .so path (cached)
#   scripts/nccl-example-tuner.sh --ref v2.30.7-1 --src /path/to/nccl
#
# --src (or $FASTVERIFY_NCCL_SRC): a NCCL git repository, bare or not, or a plain checkout
# of the ref; default: the first of those that exists. --ref: the tag (default v2.30.7-1:
# the NCCL that torch 2.14.1, pinned by SGLang 0.5.23, brings). Output under
# ${XDG_CACHE_HOME:-~/.cache}/fastverify/nccl-example-tuner/REF/libnccl-tuner-example.so
# (kept: a second call only prints it). Exit 0 with the path on the last line; exit 3 when
# no NCCL source is found (the message says where it looked), 1 when the build fails.
set -euo pipefail
ref="${FASTVERIFY_NCCL_REF:-v2.30.7-1}"
src="${FASTVERIFY_NCCL_SRC:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --ref) ref="${2:?--ref needs a tag}"; shift 2 ;;
    --src) src="${2:?--src needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "nccl-example-tuner.sh: unknown argument '$1' (--ref TAG, --src DIR)" >&2; exit 2 ;;
  esac
done
cache="${XDG_CACHE_HOME:-$HOME/.cache}/fastverify/nccl-example-tuner/$ref"
so="$cache/libnccl-tuner-example.so"
if [ -f "$so" ] && [ -f "$cache/plugin.c" ]; then
  echo "$so"
  exit 0
fi
candidates=()
[ -n "$src" ] && candidates+=("$src")
candidates+=(/work/.mirror/NVIDIA+nccl/repo "$HOME/src/nccl" /opt/nccl)
found=""
for c in "${candidates[@]}"; do
  if [ -d "$c" ] && git -C "$c" rev-parse --git-dir >/dev/null 2>&1; then
    found="$c"
    break
  fi
  if [ -f "$c/plugins/tuner/example/plugin.c" ] || [ -f "$c/ext-tuner/example/plugin.c" ]; then
    found="$c"
    break
  fi
done
if [ -z "$found" ]; then
  echo "nccl-example-tuner.sh: no NCCL source (looked at: ${candidates[*]}); set" \
    "FASTVERIFY_NCCL_SRC to a clone of NVIDIA/nccl" >&2
  exit 3
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/nccl"
# plugins/tuner/example since 2.29, ext-tuner/example before
for dir in plugins/tuner/example ext-tuner/example; do
  if git -C "$found" rev-parse --git-dir >/dev/null 2>&1; then
    if git -C "$found" cat-file -e "$ref:$dir/plugin.c" 2>/dev/null; then
      for f in plugin.c nccl/tuner.h nccl/common.h nccl/err.h; do
        git -C "$found" show "$ref:$dir/$f" >"$tmp/$f"
      done
      echo "$ref:$dir" >"$tmp/SOURCE"
      break
    fi
  elif [ -f "$found/$dir/plugin.c" ]; then
    cp "$found/$dir/plugin.c" "$tmp/"
    cp "$found/$dir/nccl/"*.h "$tmp/nccl/"
    echo "$found/$dir" >"$tmp/SOURCE"
    break
  fi
done
if [ ! -f "$tmp/plugin.c" ]; then
  echo "nccl-example-tuner.sh: $found has no example tuner plugin at $ref" >&2
  exit 3
fi
cc="${CC:-cc}"
# the recipe of NCCL's plugins/tuner/example/Makefile
"$cc" -I"$tmp/nccl" -fPIC -shared -o "$tmp/libnccl-tuner-example.so" \
  -Wl,-soname,libnccl-tuner-example.so "$tmp/plugin.c"
mkdir -p "$cache"
cp "$tmp/plugin.c" "$tmp/SOURCE" "$cache/"
mv -f "$tmp/libnccl-tuner-example.so" "$so"
echo "$so"
