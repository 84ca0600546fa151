#!/usr/bin/env bash
# Install the Debian packages the test suite needs (listed one per line in
# scripts/debian-packages.txt). Idempotent: installs only what is missing, and upgrades
# nothing that is installed: it first installs from the package lists already on the
# machine (their versions are the installed ones', so no dependency needs a newer one; an
# `apt-get update` first pulled e.g. a newer systemd into a cold run), and only when those
# lists cannot provide a package (none yet, or too old) updates them and tries again.
# Needs root (CI runs as root); as a normal user it only reports what is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t wanted < <(grep -Ev '^\s*(#|$)' "$here/debian-packages.txt" | sort -u)
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all ${#wanted[@]} present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "system packages missing (run as root to install): ${missing[*]}" >&2
  exit 0
fi
echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Debian's prometheus and docker.io start services on install when an init runs;
# policy-rc.d keeps the package scripts from starting anything on this machine.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod +x "$policy"
  created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
install=(apt-get install -y -qq --no-install-recommends --no-upgrade "${missing[@]}")
if ! "${install[@]}"; then
  echo "the package lists on this machine cannot provide them: apt-get update, then again"
  apt-get update -qq
  "${install[@]}"
fi
