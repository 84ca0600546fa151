#!/usr/bin/env bash
# Build NCCL's own example tuner plugin (plugins/tuner/example of NVIDIA/nccl) from NCCL's
# source, outside this repository, for the tests that load fastverify's NCCL-format CSV
# export with it (tests/unit/tuner/test_nccl_csv_plugin.py). NCCL's code is never copied
# into the repository: the files are read from a NCCL git repository (or checkout) or,
# where none is here, from Debian's source package of NCCL (nvidia-nccl, contrib).
#
#   scripts/nccl-example-tuner.sh                   # -> prints the .so path (cached)
#   scripts/nccl-example-tuner.sh --ref v2.30.7-1 --src /path/to/nccl
#   scripts/nccl-example-tuner.sh --from-debian     # Debian's nvidia-nccl, pinned below
#
# --src (or $FASTVERIFY_NCCL_SRC): a NCCL git repository, bare or not, or a plain checkout
# of the ref; default: the first of those that exists ($FASTVERIFY_NCCL_NO_MIRROR=1 looks
# at --src alone). --ref: the tag (default v2.30.7-1: the NCCL that torch 2.14.1, pinned by
# SGLang 0.5.23, brings). Without a NCCL repository and without --ref, or with
# --from-debian: the orig tarball of Debian's nvidia-nccl (version and sha256 pinned below),
# fetched by APT's own downloader from the Debian mirror APT is configured with
# ($FASTVERIFY_DEBIAN_MIRROR overrides) and kept in ~/.cache/fastverify/debian-sources/.
# Output under ${XDG_CACHE_HOME:-~/.cache}/fastverify/nccl-example-tuner/(REF|debian-VER)/
# libnccl-tuner-example.so with a SOURCE file beside it (nccl=, dir=, from=, sha256=)
# (kept: a second call only prints it). Exit 0 with the path on the last line; exit 3 when
# no NCCL source is found (the message says where it looked), 1 when the build fails.
set -euo pipefail
# Debian's nvidia-nccl 2.29.7-1-1 (unstable): its orig tarball holds NVIDIA's v2.29.7-1 tag
debian_pkg=nvidia-nccl
debian_ver=2.29.7-1
debian_rev=1
debian_sha256=e67239212c395bfdb398a7519491840d06fdf6b599c299f97c7ed0109777bba1
ref="${FASTVERIFY_NCCL_REF:-}"
src="${FASTVERIFY_NCCL_SRC:-}"
from_debian=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ref) ref="${2:?--ref needs a tag}"; shift 2 ;;
    --src) src="${2:?--src needs a directory}"; shift 2 ;;
    --from-debian) from_debian=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "nccl-example-tuner.sh: unknown argument '$1' (--ref TAG, --src DIR," \
         "--from-debian)" >&2; exit 2 ;;
  esac
done
root="${XDG_CACHE_HOME:-$HOME/.cache}/fastverify"

cached() {  # cached DIR: print the plugin built there before, if complete
  if [ -f "$1/libnccl-tuner-example.so" ] && [ -f "$1/plugin.c" ] \
    && grep -q '^nccl=' "$1/SOURCE" 2>/dev/null; then
    echo "$1/libnccl-tuner-example.so"
    exit 0
  fi
}

is_repo() {  # is_repo DIR: DIR is a git repository's top (a folder inside one is not)
  [ -d "$1" ] || return 1
  [ "$(git -C "$1" rev-parse --is-bare-repository 2>/dev/null)" = true ] && return 0
  [ "$(git -C "$1" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$1" && pwd -P)" ]
}

find_git_source() {  # prints the first NCCL repository or checkout among the candidates
  local c
  for c in "${candidates[@]}"; do
    if is_repo "$c"; then
      echo "$c"
      return
    fi
    if [ -f "$c/plugins/tuner/example/plugin.c" ] || [ -f "$c/ext-tuner/example/plugin.c" ]; then
      echo "$c"
      return
    fi
  done
}

copy_from_git() {  # copy_from_git SRC REF: the example's files into $tmp, or exit 3
  local dir f
  # plugins/tuner/example since 2.29, ext-tuner/example before
  for dir in plugins/tuner/example ext-tuner/example; do
    if is_repo "$1"; then
      if git -C "$1" cat-file -e "$2:$dir/plugin.c" 2>/dev/null; then
        for f in plugin.c nccl/tuner.h nccl/common.h nccl/err.h; do
          git -C "$1" show "$2:$dir/$f" >"$tmp/$f"
        done
        printf 'nccl=%s\ndir=%s\nfrom=git %s %s (commit %s)\n' "${2#v}" "$dir" "$1" "$2" \
          "$(git -C "$1" rev-parse "$2^{commit}")" >"$tmp/SOURCE"
        return
      fi
    elif [ -f "$1/$dir/plugin.c" ]; then
      cp "$1/$dir/plugin.c" "$tmp/"
      cp "$1/$dir/nccl/"*.h "$tmp/nccl/"
      printf 'nccl=%s\ndir=%s\nfrom=checkout %s\n' "${2#v}" "$dir" "$1/$dir" >"$tmp/SOURCE"
      return
    fi
  done
  echo "nccl-example-tuner.sh: $1 has no example tuner plugin at $2" >&2
  exit 3
}

debian_mirror() {  # the Debian archive APT is configured with (no package lists needed)
  if [ -n "${FASTVERIFY_DEBIAN_MIRROR:-}" ]; then
    echo "${FASTVERIFY_DEBIAN_MIRROR%/}/"
    return
  fi
  # shellcheck disable=SC2016  # $(REPO_URI) is apt's field name, not a shell expansion
  apt-get indextargets --no-release-info --format '$(REPO_URI)' 2>/dev/null \
    | grep -m1 '/debian/$' || true
}

copy_from_debian() {  # the example's files of Debian's pinned orig tarball into $tmp
  local name="${debian_pkg}_${debian_ver}.orig.tar.gz" store="$root/debian-sources"
  local tarball="$store/$name" mirror url part top="nccl-$debian_ver/plugins/tuner/example"
  mirror=$(debian_mirror)
  url="${mirror}pool/contrib/${debian_pkg:0:1}/$debian_pkg/$name"
  if ! echo "$debian_sha256  $tarball" | sha256sum -c --status 2>/dev/null; then
    if [ -z "$mirror" ] || ! command -v /usr/lib/apt/apt-helper >/dev/null; then
      echo "nccl-example-tuner.sh: no NCCL source (looked at: ${candidates[*]:-nothing});" \
        "no Debian mirror in APT's sources to fetch $name from (set" \
        "FASTVERIFY_DEBIAN_MIRROR, or FASTVERIFY_NCCL_SRC to a clone of NVIDIA/nccl)" >&2
      exit 3
    fi
    mkdir -p "$store"
    # a folder of this call's own (two calls at once each download), renamed into place;
    # APT's downloader checks the pinned sha256
    part=$(mktemp -d "$store/.download.XXXXXX")
    if ! /usr/lib/apt/apt-helper download-file "$url" "$part/$name" \
      "SHA256:$debian_sha256" >"$tmp/download.log" 2>&1; then
      rm -rf "$part"
      echo "nccl-example-tuner.sh: no NCCL source (looked at: ${candidates[*]:-nothing})," \
        "and Debian's $debian_pkg $debian_ver could not be fetched from $url:" \
        "$(grep '^E:' "$tmp/download.log" | tr '\n' ' ')(offline, or that version left the" \
        "pool: pin the one its Sources index lists)" >&2
      exit 3
    fi
    mv -f "$part/$name" "$tarball"
    rmdir "$part"
  fi
  tar -xzf "$tarball" -C "$tmp" "$top/plugin.c" "$top/nccl"
  mv "$tmp/$top/plugin.c" "$tmp/"
  mv "$tmp/$top/nccl/"*.h "$tmp/nccl/"
  printf 'nccl=%s\ndir=plugins/tuner/example\nfrom=Debian source package %s %s-%s (contrib), %s from %s\nsha256=%s\n' \
    "$debian_ver" "$debian_pkg" "$debian_ver" "$debian_rev" "$name" "$url" "$debian_sha256" >"$tmp/SOURCE"
}

candidates=()
[ -n "$src" ] && candidates+=("$src")
if [ "${FASTVERIFY_NCCL_NO_MIRROR:-0}" != 1 ]; then
  candidates+=(/work/.mirror/NVIDIA+nccl/repo "$HOME/src/nccl" /opt/nccl)
fi
found=""
[ "$from_debian" = 1 ] || found=$(find_git_source)
if [ -z "$found" ] && [ "$from_debian" = 0 ] && [ -n "$ref" ]; then
  echo "nccl-example-tuner.sh: no NCCL source for $ref (looked at: ${candidates[*]:-nothing});" \
    "set FASTVERIFY_NCCL_SRC to a clone of NVIDIA/nccl, or use --from-debian" \
    "(NCCL $debian_ver)" >&2
  exit 3
fi
if [ -n "$found" ]; then
  ref="${ref:-v2.30.7-1}"
  cache="$root/nccl-example-tuner/$ref"
else
  cache="$root/nccl-example-tuner/debian-$debian_ver"
fi
cached "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/nccl"
if [ -n "$found" ]; then
  copy_from_git "$found" "$ref"
else
  copy_from_debian
fi
cc="${CC:-cc}"
# the recipe of NCCL's plugins/tuner/example/Makefile
"$cc" -I"$tmp/nccl" -fPIC -shared -o "$tmp/libnccl-tuner-example.so" \
  -Wl,-soname,libnccl-tuner-example.so "$tmp/plugin.c"
mkdir -p "$cache"
cp "$tmp/plugin.c" "$tmp/SOURCE" "$cache/"
mv -f "$tmp/libnccl-tuner-example.so" "$cache/libnccl-tuner-example.so"
echo "$cache/libnccl-tuner-example.so"
