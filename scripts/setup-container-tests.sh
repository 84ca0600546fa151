#!/usr/bin/env bash
# Install the Debian packages that the deployment tests (tests/deployment) need:
# a Docker engine, systemd-nspawn, debootstrap, systemd-analyze, Compose v1 (Debian's
# docker-compose, a real Compose implementation for `config`), promtool, shellcheck.
# Idempotent: packages already installed are left alone; runs apt-get update only
# when something is missing. Needs root (CI runs as root).
set -euo pipefail

packages=(
  docker.io
  systemd-container
  debootstrap
  systemd
  docker-compose
  prometheus
  shellcheck
  python3-venv
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup-container-tests: all packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup-container-tests: need root to install: ${missing[*]}" >&2
  exit 1
fi

echo "setup-container-tests: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -q
# --no-install-recommends: no services we did not ask for (the tests start their own).
apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
# Debian's postinst may start services on machines with a running init; the tests start
# their own private instances, so stop the packaged ones only if this script's install
# started them (policy-rc.d-less containers usually start nothing).
