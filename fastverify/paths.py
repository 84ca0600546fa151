"""Default locations (root vs. unprivileged user) shared by the daemon and the CLI.

As root (production, systemd): /etc/fastverify, /run/fastverify, /var/lib/fastverify.
As a user: $XDG_CONFIG_HOME/fastverify, $XDG_RUNTIME_DIR/fastverify (else
$XDG_STATE_HOME), $XDG_STATE_HOME/fastverify, so the README's run command works for anyone.
Environment overrides: FASTVERIFY_SOCKET, FASTVERIFY_STATE_DIR, FASTVERIFY_PROFILE_DIRS
(os.pathsep-separated), FASTVERIFY_CONFIG.
"""

from __future__ import annotations

import os
from pathlib import Path


def _is_root() -> bool:
    return os.geteuid() == 0


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else Path.home() / fallback


def config_dir() -> Path:
    return (
        Path("/etc/fastverify") if _is_root() else _xdg("XDG_CONFIG_HOME", ".config") / "fastverify"
    )


def state_dir() -> Path:
    if env := os.environ.get("FASTVERIFY_STATE_DIR"):
        return Path(env)
    if _is_root():
        return Path("/var/lib/fastverify")
    return _xdg("XDG_STATE_HOME", ".local/state") / "fastverify"


def runtime_dir() -> Path:
    if _is_root():
        return Path("/run/fastverify")
    if env := os.environ.get("XDG_RUNTIME_DIR"):
        return Path(env) / "fastverify"
    return state_dir() / "run"


def socket_path() -> Path:
    if env := os.environ.get("FASTVERIFY_SOCKET"):
        return Path(env)
    return runtime_dir() / "control.sock"


def config_file() -> Path:
    if env := os.environ.get("FASTVERIFY_CONFIG"):
        return Path(env)
    return config_dir() / "fastverifyd.toml"


def user_profile_dirs() -> list[Path]:
    """Operator profile directories, searched before the shipped profiles."""
    if env := os.environ.get("FASTVERIFY_PROFILE_DIRS"):
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [config_dir() / "profiles"]


def shipped_profile_dir() -> Path:
    """Profiles shipped with the package (wheel) or with the source checkout."""
    installed = Path(__file__).parent / "_shipped_profiles"
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parent.parent / "profiles"


def template_dir(kind: str) -> Path:
    """Templates for `render` ("systemd" or "compose"): packaged copy, else the checkout."""
    installed = Path(__file__).parent / "_templates" / kind
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parent.parent / kind
