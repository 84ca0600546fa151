#!/usr/bin/env bash
# Build fastverify's NCCL tuner plugin (native/tuner/fastverify_tuner.c) with the system
# C compiler: no CUDA, no NCCL headers needed (the plugin declares the ABI itself).
#
#   scripts/build-tuner.sh                 # -> native/tuner/build/libnccl-tuner-fastverify.so
#   scripts/build-tuner.sh --out /usr/local/lib/fastverify/libnccl-tuner-fastverify.so
#
# CC (default cc) and CFLAGS (appended) are honoured. Prints the path it wrote; exit 1
# when the compiler is missing or the build fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/native/tuner/fastverify_tuner.c"
out="$root/native/tuner/build/libnccl-tuner-fastverify.so"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a path}"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "build-tuner.sh: unknown argument '$1' (use --out PATH)" >&2; exit 2 ;;
  esac
done
cc="${CC:-cc}"
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "build-tuner.sh: C compiler '$cc' not found (install gcc, or set CC)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# shellcheck disable=SC2086  # CFLAGS is a list of flags
"$cc" -std=c11 -D_GNU_SOURCE -O2 -fPIC -shared -fvisibility=hidden \
  -Wall -Wextra -Werror -Wformat=2 ${CFLAGS:-} -o "$tmp" "$src"
mv -f "$tmp" "$out"
trap - EXIT
echo "$out"
