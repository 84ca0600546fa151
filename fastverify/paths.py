"""Default locations (root vs. unprivileged user) shared by the daemon and the CLI.

As root (production, systemd): /etc/fastverify, /run/fastverify, /var/lib/fastverify.
As a user: $XDG_CONFIG_HOME/fastverify, $XDG_RUNTIME_DIR/fastverify (else
$XDG_STATE_HOME), $XDG_STATE_HOME/fastverify, so the README's run command works for anyone.
Environment overrides: FASTVERIFY_SOCKET, FASTVERIFY_STATE_DIR, FASTVERIFY_PROFILE_DIRS
(os.pathsep-separated), FASTVERIFY_CONFIG.

Each location is computed once, as a string (`*_str`); the Path variants wrap it. pathlib
is imported only by those wrappers: `fastverifyctl profile list` uses the strings and
`normalize`, so it never pays for pathlib (and urllib.parse).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def _path(text: str) -> Path:
    from pathlib import Path

    return Path(text)


def normalize(path: str | os.PathLike[str]) -> str:
    """`str(Path(path))` without pathlib: '.' and empty components dropped, '..' kept, one
    trailing or repeated '/' removed, a leading '//' (and only that) kept."""
    text = os.fspath(path)
    if not text:
        return "."
    lead = "//" if text.startswith("//") and not text.startswith("///") else ""
    if not lead and text.startswith("/"):
        lead = "/"
    parts = [p for p in text.split("/") if p and p != "."]
    return lead + "/".join(parts) if (lead or parts) else "."


def _is_root() -> bool:
    return os.geteuid() == 0


def _xdg_str(var: str, fallback: str) -> str:
    """`$var/fastverify`, else `~/fallback/fastverify`."""
    base = os.environ.get(var) or os.path.join(os.path.expanduser("~"), fallback)
    return os.path.join(base, "fastverify")


def _config_dir_str() -> str:
    return "/etc/fastverify" if _is_root() else _xdg_str("XDG_CONFIG_HOME", ".config")


def state_dir() -> Path:
    return _path(state_dir_str())


def state_dir_str() -> str:
    """state_dir() as a string (no pathlib)."""
    if env := os.environ.get("FASTVERIFY_STATE_DIR"):
        return env
    if _is_root():
        return "/var/lib/fastverify"
    return _xdg_str("XDG_STATE_HOME", ".local/state")


def socket_path() -> Path:
    return _path(socket_path_str())


def socket_path_str() -> str:
    """socket_path() as a normalized string (no pathlib)."""
    if env := os.environ.get("FASTVERIFY_SOCKET"):
        return normalize(env)
    if _is_root():
        run = "/run/fastverify"
    elif env := os.environ.get("XDG_RUNTIME_DIR"):
        run = os.path.join(env, "fastverify")
    else:
        run = os.path.join(state_dir_str(), "run")
    return normalize(os.path.join(run, "control.sock"))


def config_file() -> Path:
    return _path(config_file_str())


def config_file_str() -> str:
    """config_file() as a normalized string (no pathlib)."""
    if env := os.environ.get("FASTVERIFY_CONFIG"):
        return normalize(env)
    return normalize(os.path.join(_config_dir_str(), "fastverifyd.toml"))


def user_profile_dirs() -> list[Path]:
    """Operator profile directories, searched before the shipped profiles."""
    return [_path(d) for d in user_profile_dirs_str()]


def user_profile_dirs_str() -> list[str]:
    """user_profile_dirs() as normalized strings (no pathlib)."""
    if env := os.environ.get("FASTVERIFY_PROFILE_DIRS"):
        return [normalize(p) for p in env.split(os.pathsep) if p]
    return [normalize(os.path.join(_config_dir_str(), "profiles"))]


def shipped_profile_dir() -> Path:
    """Profiles shipped with the package (wheel) or with the source checkout."""
    return _path(shipped_profile_dir_str())


def shipped_profile_dir_str() -> str:
    """shipped_profile_dir() as a normalized string (no pathlib)."""
    installed = os.path.join(os.path.dirname(__file__), "_shipped_profiles")
    if os.path.isdir(installed):
        return normalize(installed)
    return normalize(
        os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "profiles")
    )


def template_dir(kind: str) -> Path:
    """Templates for `render` ("systemd" or "compose"): packaged copy, else the
    checkout."""
    from pathlib import Path

    installed = Path(__file__).parent / "_templates" / kind
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parent.parent / kind
