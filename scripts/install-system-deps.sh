#!/usr/bin/env bash
# Install the Debian packages the test suite needs (listed one per line in
# scripts/debian-packages.txt). Idempotent: installs only what is missing and changes
# nothing that is installed, dependencies included.
#
# `apt-get install --no-upgrade` alone keeps only the named packages from being upgraded:
# a missing systemd-container of a newer point release depends on the same systemd
# version, and apt upgrades the installed systemd, libsystemd0, libudev1 ... to get it. So
# every installed package is pinned (apt preferences, priority 1001) to its installed
# version, and every source package with a binary installed to that version's series: a
# missing package comes in the version its installed siblings have. apt's plan is read
# before anything is installed (`apt-get -s`): an upgrade, downgrade or removal of an
# installed package refuses the whole install, with the reason, and changes nothing;
# except that a package of programs only (UNPACKED_OK: systemd-container) whose installed
# siblings' version the lists no longer hold (Debian dropped systemd 252.38 for 252.39) is
# unpacked privately with the libraries it needs, its programs wrapped in /usr/local/bin.
# The package lists are updated (`apt-get update`) only when they cannot provide a
# missing package at all.
#
# Usage: scripts/install-system-deps.sh [--simulate] [PACKAGE ...]
#   --simulate  print apt's plan and the verdict, install nothing (any user)
#   PACKAGE     instead of scripts/debian-packages.txt's list
# Exit: 0 done (or nothing to do; as a normal user it only reports what is missing),
#       3 refused: the packages cannot be installed without changing an installed one,
#       other: apt's own failure.
# apt's configuration is apt's own (APT_CONFIG works as it does for apt-get).
# Needs root to install (CI runs as root).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

simulate=0
wanted=()
for arg in "$@"; do
  case $arg in
    --simulate) simulate=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "install-system-deps: unknown option $arg (expected --simulate, --help)" >&2
      exit 2
      ;;
    *) wanted+=("$arg") ;;
  esac
done
if [ ${#wanted[@]} -eq 0 ]; then
  mapfile -t wanted < <(grep -Ev '^\s*(#|$)' "$here/debian-packages.txt" | sort -u)
fi

# dpkg's database as apt sees it (APT_CONFIG may point apt at another status file)
apt_root=/ # apt's root directory, unless APT_CONFIG says otherwise
eval "$(apt-config shell apt_root Dir)"
status_file=$(apt-config dump --format '%v%n' Dir::State::status)
case $status_file in /*) ;; *) status_file="${apt_root%/}/$status_file" ;; esac
dpkg_query() { dpkg-query --admindir "$(dirname "$status_file")" "$@"; }

# A package of programs only (UNPACKED_OK) that apt cannot install at the installed
# versions is unpacked privately instead: it and the newer libraries its plan would have
# upgraded, under $unpack_root/PACKAGE, its programs on PATH through wrappers in
# /usr/local/bin that load those libraries first; nothing installed changes. (systemd-nspawn
# 252.39 runs beside an installed systemd 252.38 so: the container it boots runs its own.)
UNPACKED_OK=(systemd-container)
unpack_root=${apt_root%/}/usr/local/lib/fastverify-unpacked
wrappers=${apt_root%/}/usr/local/bin

missing=()
for pkg in "${wanted[@]}"; do
  # shellcheck disable=SC2016 # dpkg-query's own ${field} syntax
  state=$(dpkg_query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [ "$state" = "install ok installed" ] || [ -f "$unpack_root/$pkg/.complete" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all ${#wanted[@]} present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ] && [ "$simulate" = 0 ]; then
  echo "system packages missing (run as root to install): ${missing[*]}" >&2
  exit 0
fi

work=$(mktemp -d)
policy=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
  rm -rf "$work"
  if [ "$created_policy" = 1 ]; then rm -f "$policy"; fi
}
trap cleanup EXIT

# The pins: each installed package at its version; each source package with an installed
# binary at that binary's source version (an optional epoch, an optional binNMU +bN).
prefs=$work/keep-installed.pref
# shellcheck disable=SC2016 # dpkg-query's own ${field} syntax
dpkg_query -W -f='${db:Status-Abbrev}\t${Package}\t${Version}\t${source:Package}\t${source:Version}\n' |
  awk -F'\t' '
    $1 ~ /^.i/ {
      printf "Package: %s\nPin: version %s\nPin-Priority: 1001\n\n", $2, $3
      sv = $5; sub(/^[0-9]+:/, "", sv); gsub(/[.+]/, "\\\\&", sv)
      if (!seen[$4 " " sv]++)
        printf "Package: src:%s\nPin: version /^([0-9]+:)?%s(\\+b[0-9]+)?$/\nPin-Priority: 1001\n\n", $4, sv
    }' >"$prefs"

apt_opts=(-o "Dir::Etc::preferences=$prefs" -o DPkg::Lock::Timeout=600)
install=(install -y -q --no-install-recommends --no-upgrade "${missing[@]}")

# plan: apt's simulated run; sets `changes` to its lines that touch an installed package
plan() {
  local rc=0
  plan_text=$(apt-get "${apt_opts[@]}" -s "${install[@]}" 2>&1) || rc=$?
  changes=$(grep -E '^(Inst [^ ]+ \[|Remv |Purg )' <<<"$plan_text" || true)
  return $rc
}
unknown_to_lists() { # the missing packages the package lists have no version of
  local known pkg
  known=$(apt-cache "${apt_opts[@]}" policy "${missing[@]}" 2>/dev/null |
    awk '/^[^ ]/ { sub(/:$/, ""); pkg = $0 } /^  Candidate: [^(]/ { print pkg }')
  for pkg in "${missing[@]}"; do
    grep -qxF "$pkg" <<<"$known" || echo "$pkg"
  done
}
refuse() {
  echo "install-system-deps: refused, nothing was installed or changed: $1" >&2
  echo "  wanted (missing here): ${missing[*]}" >&2
  echo "  apt says:" >&2
  tail -n 25 <<<"$2" | sed 's/^/    /' >&2
  echo "  Install them by hand if the change is acceptable on this machine" \
    "(apt-get install ${missing[*]}), then run this again." >&2
  exit 3
}

lacking=""
if ! plan; then
  lacking=$(unknown_to_lists | tr '\n' ' ')
fi
if [ -n "$lacking" ]; then
  if [ "$simulate" = 1 ]; then
    refuse "the package lists have no version of: ${lacking% } (an install would run apt-get update first)" "$plan_text"
  fi
  echo "the package lists on this machine cannot provide ${lacking% }: apt-get update, then again"
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  plan || true
fi

unpack=()
if [ -n "$changes" ] || ! grep -q '^Inst ' <<<"$plan_text"; then
  rest=()
  for pkg in "${missing[@]}"; do
    if printf '%s\n' "${UNPACKED_OK[@]}" | grep -qxF "$pkg"; then unpack+=("$pkg"); else rest+=("$pkg"); fi
  done
  [ ${#unpack[@]} -gt 0 ] || refuse "installing them would change installed packages" "${changes:-$plan_text}"
  missing=("${rest[@]}")
  if [ ${#missing[@]} -gt 0 ]; then
    install=(install -y -q --no-install-recommends --no-upgrade "${missing[@]}")
    plan || true
    [ -z "$changes" ] || refuse "installing them would change installed packages" "$changes"
    grep -q '^Inst ' <<<"$plan_text" ||
      refuse "apt cannot install them at the installed packages' versions" "$plan_text"
  fi
fi

# the .debs to unpack for PACKAGE: itself and the libraries it depends on that apt's plan
# would have installed or upgraded (systemd-container: libsystemd-shared, at its version)
unpack_debs() {
  local pkg=$1 plan_lines depends
  # apt's own plan, without the pins: what it would install and upgrade
  plan_lines=$(apt-get -s install --no-install-recommends "$pkg" 2>&1 || true)
  depends=$(apt-cache show --no-all-versions "$pkg" | sed -n 's/^Depends: //p' | tr ',|' '\n' |
    awk '{ print $1 }')
  echo "$pkg"
  awk '/^Inst lib/ { print $2 }' <<<"$plan_lines" | grep -xF -f <(echo "$depends") || true
}
if [ "$simulate" = 1 ]; then
  if [ ${#missing[@]} -gt 0 ]; then
    echo "system packages: would install ${missing[*]}, changing nothing installed:"
    grep -E '^Inst ' <<<"$plan_text"
  fi
  for pkg in "${unpack[@]}"; do
    echo "system packages: would unpack $pkg privately (under $unpack_root/$pkg, programs on" \
      "PATH from $wrappers), changing nothing installed: $(unpack_debs "$pkg" | tr '\n' ' ')"
  done
  exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Debian's prometheus and docker.io start services on install when an init runs;
  # policy-rc.d keeps the package scripts from starting anything on this machine.
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    created_policy=1
  fi
  apt-get "${apt_opts[@]}" "${install[@]}"
fi
for pkg in "${unpack[@]}"; do
  dest=$unpack_root/$pkg
  echo "unpacking $pkg privately into $dest (apt cannot install it beside the installed packages)"
  mapfile -t debs < <(unpack_debs "$pkg")
  rm -rf "$dest" "$work/debs" && mkdir -p "$dest" "$work/debs"
  chmod a+x "$work" && chmod a+rwx "$work/debs" # apt's download runs as its own user
  (cd "$work/debs" && apt-get -q download "${debs[@]}")
  for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$dest"; done
  libs=$(find "$dest" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)
  for prog in "$dest"/usr/bin/*; do
    wrapper=$wrappers/$(basename "$prog")
    # shellcheck disable=SC2016 # the wrapper's own $LD_LIBRARY_PATH and "$@", written as they are
    printf '#!/bin/sh\n# %s, unpacked by fastverify scripts/install-system-deps.sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
      "$pkg" "$libs" "$prog" >"$wrapper"
    chmod 755 "$wrapper"
  done
  "$wrappers/$(basename "$(find "$dest/usr/bin" -type f | head -n 1)")" --version | head -n 1
  touch "$dest/.complete"
done
