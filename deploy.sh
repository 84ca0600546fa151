#!/usr/bin/env bash
# deploy.sh: install fastverify on a GPU host, managed by systemd.
#
#   ./deploy.sh install   [--mode container|host] [options]
#   ./deploy.sh uninstall [--mode container|host] [--purge] [options]
#   ./deploy.sh status    [--mode container|host] [options]
#
# install: build (or pull) the image (container mode), install the config, the env file and
# the operator profile directory under /etc/fastverify (an edited file is never overwritten:
# the new default goes next to it as FILE.dist, generated files are backed up first),
# create the `fastverify` group, install the host CLI in its own virtual environment
# (/opt/fastverify; in host mode it also runs the daemon), render and install the systemd
# unit, reload systemd, enable and start it, wait until the daemon serves and print status.
# Idempotent: a second install with nothing changed changes nothing.
# uninstall: removes what install added (recorded in a manifest); state under
# /var/lib/fastverify is kept unless --purge.
#
# Options:
#   --mode container|host  container: the compose stack under systemd (default);
#                          host: fastverifyd directly under systemd
#   --dry-run              print every action, change nothing
#   --prefix DIR           install under DIR instead of / (tests, staging)
#   --image NAME           image to build or pull (default fastverify:VERSION)
#   --pull                 pull --image instead of building it from this checkout
#   --base-image NAME      BASE_IMAGE build argument (default: the Dockerfile's pinned SGLang)
#   --engine sglang|auto|sim   engine in a newly installed config (default sglang)
#   --pip-options "..."    extra pip options for the CLI venv (e.g. an offline wheelhouse)
#   --no-start             install and enable, but do not start
#   --no-wait              start, but do not wait for READY
#   --wait-timeout SEC     how long to wait for READY (default 1800: model loads are slow)
#   --purge                uninstall: also remove state (/var/lib/fastverify)
#
# With --prefix, commands for the running service manager (daemon-reload, start, stop) are
# skipped unless FASTVERIFY_DEPLOY_LIVE=1; enable/disable use `systemctl --root=DIR`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$here/fastverify/__init__.py" | head -n 1)

action=""
mode=container
dry_run=0
prefix=""
image="fastverify:${version}"
pull=0
base_image=""
engine=sglang
pip_options=""
start=1
wait_ready=1
wait_timeout=1800
purge=0

die() {
  echo "deploy.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
  case "$1" in
    install | uninstall | status) action=$1 ;;
    --mode) mode=${2:?--mode needs a value}; shift ;;
    --dry-run) dry_run=1 ;;
    --prefix) prefix=${2:?--prefix needs a directory}; shift ;;
    --image) image=${2:?}; shift ;;
    --pull) pull=1 ;;
    --base-image) base_image=${2:?}; shift ;;
    --engine) engine=${2:?}; shift ;;
    --pip-options) pip_options=${2?}; shift ;;
    --no-start) start=0 ;;
    --no-wait) wait_ready=0 ;;
    --wait-timeout) wait_timeout=${2:?}; shift ;;
    --purge) purge=1 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done

[ -n "$action" ] || { usage >&2; exit 2; }
case "$mode" in container | host) ;; *) die "--mode must be container or host" ;; esac
case "$engine" in sglang | auto | sim) ;; *) die "--engine must be sglang, auto or sim" ;; esac
if [ -n "$prefix" ]; then
  prefix=$(realpath -m "$prefix")
fi

etc="$prefix/etc/fastverify"
venv="$prefix/opt/fastverify"
state="$prefix/var/lib/fastverify"
rundir="$prefix/run/fastverify"
unitdir="$prefix/etc/systemd/system"
bindir="$prefix/usr/local/bin"
manifest="$etc/.deploy-manifest"
if [ "$mode" = host ]; then unit=fastverifyd.service; else unit=fastverify.service; fi
socket="$rundir/control.sock"

# --- actions: every change goes through run() so that --dry-run shows it --------------
changed=0
run() {
  changed=1
  if [ "$dry_run" = 1 ]; then
    printf 'would run:'
    printf ' %q' "$@"
    printf '\n'
  else
    printf '+'
    printf ' %q' "$@"
    printf '\n'
    "$@"
  fi
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

# The checksum install recorded for a path (empty when none).
recorded() {
  [ -f "$manifest" ] || return 0
  awk -v p="$1" '$1 == "file" && $3 == p { print $2 }' "$manifest" | tail -n 1
}

# Lines for the manifest of this run; written once at the end (not in --dry-run).
manifest_lines=()
note() { manifest_lines+=("$*"); }

ensure_dir() { # ensure_dir DIR MODE
  if [ ! -d "$1" ]; then
    run install -d -m "$2" "$1"
  fi
  note "dir - $1"
}

# install_file SRC DST MODE KIND: KIND=config keeps an edited DST (new default -> DST.dist);
# KIND=generated replaces an edited DST after backing it up to DST.bak.<time>.
install_file() {
  local src=$1 dst=$2 mode=$3 kind=$4 new old
  new=$(sha "$src")
  if [ -f "$dst" ]; then
    old=$(sha "$dst")
    if [ "$old" = "$new" ]; then
      note "file $new $dst"
      return 0
    fi
    if [ "$old" != "$(recorded "$dst")" ]; then # edited since we installed it (or not ours)
      if [ "$kind" = config ]; then
        echo "keeping edited $dst; the new default is $dst.dist"
        if [ ! -f "$dst.dist" ] || [ "$(sha "$dst.dist")" != "$new" ]; then
          run install -m "$mode" "$src" "$dst.dist"
        fi
        note "file $(recorded "$dst") $dst"
        note "dist - $dst.dist"
        return 0
      fi
      run cp -p "$dst" "$dst.bak.$(date +%Y%m%d%H%M%S)"
    fi
  fi
  run install -m "$mode" "$src" "$dst"
  note "file $new $dst"
}

systemctl_() {
  if [ -n "$prefix" ]; then
    run systemctl --root="$prefix" "$@"
  else
    run systemctl "$@"
  fi
}

# Commands that talk to the running service manager: skipped under --prefix unless the
# caller says the prefix is live (tests use recording stand-ins for systemctl).
live_systemctl() {
  if [ -n "$prefix" ] && [ "${FASTVERIFY_DEPLOY_LIVE:-0}" != 1 ]; then
    echo "skipping (--prefix): systemctl $*"
    return 0
  fi
  run systemctl "$@"
}

ctl() { "$venv/bin/fastverifyctl" --socket "$socket" "$@"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- install ------------------------------------------------------------------------
install_group() {
  if [ -n "$prefix" ]; then
    [ -f "$prefix/etc/group" ] || die "--prefix $prefix has no etc/group (copy one in first)"
    grep -q '^fastverify:' "$prefix/etc/group" || run groupadd --prefix "$prefix" --system fastverify
  else
    getent group fastverify > /dev/null || run groupadd --system fastverify
  fi
}

install_venv() {
  local pip_opts=() wheel want
  read -r -a pip_opts <<< "$pip_options"
  if [ ! -x "$venv/bin/python" ]; then
    run python3 -m venv "$venv"
  fi
  if [ ! -x "$venv/bin/python" ]; then # --dry-run on a fresh host
    run "$venv/bin/python" -m pip install "${pip_opts[@]}" "$here"
  else
    # Build the wheel first: its checksum tells whether the venv already has this version.
    "$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps "${pip_opts[@]}" \
      --wheel-dir "$tmp/wheel" "$here" > /dev/null
    wheel=$(find "$tmp/wheel" -name 'fastverify-*.whl' | head -n 1)
    want=$(sha "$wheel")
    if [ "$(cat "$venv/.fastverify-wheel" 2> /dev/null || true)" != "$want" ]; then
      # Same version number, new build: replace fastverify itself, then add missing deps.
      run "$venv/bin/python" -m pip install -q --disable-pip-version-check "${pip_opts[@]}" \
        --force-reinstall --no-deps "$wheel"
      run "$venv/bin/python" -m pip install -q --disable-pip-version-check "${pip_opts[@]}" "$wheel"
      if [ "$dry_run" = 0 ]; then echo "$want" > "$venv/.fastverify-wheel"; fi
    fi
  fi
  note "venv - $venv"
  ensure_dir "$bindir" 0755
  if [ "$(readlink "$bindir/fastverifyctl" 2> /dev/null || true)" != "$venv/bin/fastverifyctl" ]; then
    run ln -sfn "$venv/bin/fastverifyctl" "$bindir/fastverifyctl"
  fi
  note "link - $bindir/fastverifyctl"
}

install_image() {
  if [ "$pull" = 1 ]; then
    run docker pull "$image"
  else
    local args=(build --tag "$image" --build-arg "VERSION=$version" --label "org.opencontainers.image.revision=$(git -C "$here" rev-parse HEAD 2> /dev/null || echo unknown)")
    if [ -n "$base_image" ]; then args+=(--build-arg "BASE_IMAGE=$base_image"); fi
    # Docker's layer cache makes a rebuild of an unchanged checkout a no-op.
    if [ "$dry_run" = 1 ]; then
      run docker "${args[@]}" "$here"
    else
      printf '+ docker'
      printf ' %q' "${args[@]}" "$here"
      printf '\n'
      docker "${args[@]}" "$here"
    fi
  fi
}

write_config() {
  local src="$here/systemd/fastverifyd.host.toml"
  if [ "$mode" = container ]; then src="$here/compose/fastverifyd.container.toml"; fi
  local gid=""
  if [ "$mode" = container ]; then
    # The group exists on the host only: the daemon in the container gets its number.
    gid=$(awk -F: '$1 == "fastverify" { print $3 }' "$prefix/etc/group" 2> /dev/null || true)
  fi
  sed -e "s/^engine = \"sglang\"/engine = \"$engine\"/" \
    -e "s/^socket_group = \"fastverify\"/socket_group = \"${gid:-fastverify}\"/" \
    "$src" > "$tmp/fastverifyd.toml"
  install_file "$tmp/fastverifyd.toml" "$etc/fastverifyd.toml" 0644 config
  install_file "$here/systemd/fastverify.env" "$etc/fastverify.env" 0640 config
}

render_unit() {
  local args=(render systemd --mode "$mode" --output "$tmp/$unit"
    --config /etc/fastverify/fastverifyd.toml --env-file /etc/fastverify/fastverify.env
    --docs-path "$here/docs/guides/deployment.md")
  if [ "$mode" = host ]; then
    args+=(--fastverifyd /opt/fastverify/bin/fastverifyd)
  else
    args+=(--compose-dir /etc/fastverify/compose)
  fi
  if [ ! -x "$venv/bin/fastverifyctl" ]; then # --dry-run on a fresh host: no CLI yet
    echo "would run: fastverifyctl ${args[*]} && install it as $unitdir/$unit"
    return 0
  fi
  "$venv/bin/fastverifyctl" "${args[@]}" 2> /dev/null
  install_file "$tmp/$unit" "$unitdir/$unit" 0644 generated
}

render_compose() {
  if [ ! -x "$venv/bin/fastverifyctl" ]; then # --dry-run on a fresh host: no CLI yet
    echo "would run: fastverifyctl render compose --output-dir $etc/compose --image $image" \
      "--env-file /etc/fastverify/fastverify.env"
    return 0
  fi
  # the container's environment: the env file this script installs (always there)
  "$venv/bin/fastverifyctl" render compose --output-dir "$tmp/compose" --image "$image" \
    --env-file /etc/fastverify/fastverify.env 2> /dev/null
  ensure_dir "$etc/compose" 0755
  local f rel d
  while IFS= read -r -d '' f; do
    rel=${f#"$tmp/compose/"}
    d=$(dirname "$etc/compose/$rel")
    while [ "$d" != "$etc/compose" ]; do # every directory we create goes in the manifest
      ensure_dir "$d" 0755
      d=$(dirname "$d")
    done
    install_file "$f" "$etc/compose/$rel" 0644 generated
  done < <(find "$tmp/compose" -type f -print0 | sort -z)
}

# Prints the daemon's state (READY, STARTING, FAILED, ...) or nothing when it does not answer.
daemon_state() {
  "$venv/bin/python" - "$socket" 2> /dev/null << 'PY' || true
import sys
from fastverify.client import ControlClient
print(ControlClient(sys.argv[1], timeout=5).get("/v1/status").get("state", ""))
PY
}

wait_for_ready() {
  local deadline=$((SECONDS + wait_timeout)) state=""
  echo "waiting for fastverifyd to serve (up to ${wait_timeout}s; a model load takes minutes)"
  while [ $SECONDS -lt "$deadline" ]; do
    state=$(daemon_state)
    case "$state" in
      READY)
        ctl status || true
        return 0
        ;;
      FAILED)
        ctl status || true
        die "fastverifyd reports FAILED; see: journalctl -u $unit"
        ;;
    esac
    sleep 2
  done
  die "fastverifyd not READY after ${wait_timeout}s (last state: ${state:-no answer}); see: journalctl -u $unit"
}

do_install() {
  if [ "$mode" = container ]; then install_image; fi
  ensure_dir "$etc" 0755
  ensure_dir "$etc/profiles" 0755
  ensure_dir "$state" 0750
  install_group
  install_venv
  write_config
  if [ "$mode" = container ]; then render_compose; fi
  ensure_dir "$unitdir" 0755
  render_unit
  if [ "$dry_run" = 0 ]; then
    {
      echo "# deploy.sh manifest: what install added (mode $mode); uninstall reads it"
      echo "mode - $mode"
      echo "unit - $unitdir/$unit"
      printf '%s\n' "${manifest_lines[@]}"
    } > "$tmp/manifest"
    if ! cmp -s "$tmp/manifest" "$manifest"; then
      install -m 0644 "$tmp/manifest" "$manifest"
    fi
  fi
  local files_changed=$changed
  if [ "$files_changed" = 1 ]; then live_systemctl daemon-reload; fi
  if ! systemctl_is_enabled; then systemctl_ enable "$unit"; fi
  if [ "$start" = 1 ]; then
    # Type=notify (host mode): `start` returns once the daemon sent READY=1.
    live_systemctl start "$unit"
    if [ "$wait_ready" = 1 ] && [ "$dry_run" = 0 ]; then wait_for_ready; fi
  fi
  if [ "$files_changed" = 0 ]; then echo "fastverify: already installed, nothing changed"; fi
}

systemctl_is_enabled() {
  if [ -n "$prefix" ]; then
    systemctl --root="$prefix" is-enabled --quiet "$unit" 2> /dev/null
  else
    systemctl is-enabled --quiet "$unit" 2> /dev/null
  fi
}

# --- uninstall ----------------------------------------------------------------------
do_uninstall() {
  [ -f "$manifest" ] || die "nothing to uninstall: no manifest at $manifest"
  local installed_mode installed_unit
  installed_mode=$(awk '$1 == "mode" { print $3 }' "$manifest")
  installed_unit=$(awk '$1 == "unit" { print $3 }' "$manifest")
  live_systemctl stop "$(basename "$installed_unit")" || true
  systemctl_ disable "$(basename "$installed_unit")" || true
  run rm -f "$installed_unit"
  if [ "$installed_mode" = container ]; then
    echo "keeping image $image (docker image rm $image to remove it)"
  fi
  local kind sum path entries
  entries=$(grep -v '^#' "$manifest")
  # Files first, then links and venvs, then directories deepest first.
  while read -r kind sum path; do
    case "$kind" in
      file)
        if [ -f "$path" ] && [ -n "$sum" ] && [ "$sum" != - ] && [ "$(sha "$path")" != "$sum" ]; then
          echo "keeping edited $path (saved as $path.bak.uninstall)"
          run mv "$path" "$path.bak.uninstall"
        elif [ -e "$path" ]; then
          run rm -f "$path"
        fi
        ;;
      dist) if [ -e "$path" ]; then run rm -f "$path"; fi ;;
      link) if [ -L "$path" ]; then run rm -f "$path"; fi ;;
      venv) if [ -d "$path" ]; then run rm -rf "$path"; fi ;;
    esac
  done <<< "$entries"
  run rm -f "$manifest"
  while read -r path; do
    if [ "$path" = "$state" ] && [ "$purge" = 0 ]; then
      echo "keeping state in $state (--purge removes it)"
      continue
    fi
    if [ "$path" = "$state" ]; then
      run rm -rf "$state"
    elif [ -d "$path" ] && [ -z "$(ls -A "$path")" ]; then
      run rmdir "$path"
    fi
  done < <(awk '$1 == "dir" { print $3 }' <<< "$entries" | sort -r -u)
  live_systemctl daemon-reload
}

do_status() {
  live_systemctl status --no-pager "$unit" || true
  if [ -x "$venv/bin/fastverifyctl" ]; then
    ctl status || true
  fi
}

case "$action" in
  install) do_install ;;
  uninstall) do_uninstall ;;
  status) do_status ;;
esac
