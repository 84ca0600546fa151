"""The suite never reads this machine's fastverify directories: /etc/fastverify (its config
and profiles), /var/lib/fastverify (state), /run/fastverify (a running daemon's socket), nor a
user's $XDG_CONFIG_HOME/fastverify and $XDG_STATE_HOME/fastverify. An installed host has
them, and a test that read them would see the host's profiles and daemon, not its own.

Every test process (the root conftest) and every test (an autouse fixture) gets its own
directories through the variables fastverify resolves its default locations from
(fastverify/paths.py): ISOLATING, each pointed into a fresh temporary directory. As root
paths ignores XDG_*, so the FASTVERIFY_* variables carry it; as a user XDG_* do.

`clean_env(drop)`: os.environ without the variables of the given prefixes (a developer's own
FASTVERIFY_*, NCCL_*), the isolating ones kept: what a test passes to the processes it starts.

`guard()`: an audit hook that records every open, listing or connect of this process under the
host's directories; the root conftest fails the test that did it (`take_reads()`).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

# variable -> the path below the isolated base it points at
ISOLATING = {
    "FASTVERIFY_CONFIG": "etc/fastverifyd.toml",  # not created: a host without a config file
    "FASTVERIFY_PROFILE_DIRS": "etc/profiles",
    "FASTVERIFY_STATE_DIR": "state",
    "FASTVERIFY_SOCKET": "run/control.sock",  # nothing listens: a host with no daemon
    "XDG_CONFIG_HOME": "xdg/config",
    "XDG_STATE_HOME": "xdg/state",
    "XDG_RUNTIME_DIR": "xdg/run",
}
CREATED = ("etc/profiles", "state", "run", "xdg/config", "xdg/state", "xdg/run")


def host_dirs(environ: dict[str, str] | os._Environ[str] | None = None) -> list[str]:
    """This machine's fastverify directories, root's and the user's (from `environ` as the
    suite found it)."""
    env = os.environ if environ is None else environ
    home = os.path.expanduser("~")
    config = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    state = env.get("XDG_STATE_HOME") or os.path.join(home, ".local/state")
    found = ["/etc/fastverify", "/var/lib/fastverify", "/run/fastverify",
             os.path.join(config, "fastverify"), os.path.join(state, "fastverify")]  # fmt: skip
    if run := env.get("XDG_RUNTIME_DIR"):
        found.append(os.path.join(run, "fastverify"))
    return found


def isolated_env(base: Path) -> dict[str, str]:
    """The ISOLATING variables for `base` (its directories created, 0700 as XDG wants)."""
    for rel in CREATED:
        (base / rel).mkdir(parents=True, exist_ok=True, mode=0o700)
    return {var: str(base / rel) for var, rel in ISOLATING.items()}


def isolate_process() -> Path:
    """Point this process's environment at a fresh base (short: the socket path is under
    the 108-byte AF_UNIX limit); returns it (the caller removes it at the end)."""
    base = Path(tempfile.mkdtemp(prefix="fvhost-", dir="/tmp"))
    os.environ.update(isolated_env(base))
    return base


def remove(base: Path) -> None:
    shutil.rmtree(base, ignore_errors=True)


def clean_env(drop: tuple[str, ...] = ("FASTVERIFY_",)) -> dict[str, str]:
    """os.environ without variables starting with `drop`, the isolating ones kept."""
    return {k: v for k, v in os.environ.items() if k in ISOLATING or not k.startswith(drop)}


# --- the guard ------------------------------------------------------------------------------

_GUARDED: tuple[str, ...] = ()
_READS: list[str] = []
_EVENTS = {"open", "os.listdir", "os.scandir", "os.chdir", "socket.connect"}


def _under_host(path: object) -> str | None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not path.startswith("/"):
        return None
    path = os.path.normpath(path)
    for d in _GUARDED:
        if path == d or path.startswith(d + "/"):
            return path
    return None


def _hook(event: str, args: tuple) -> None:
    if event not in _EVENTS or not args:
        return
    target = args[1] if event == "socket.connect" and len(args) > 1 else args[0]
    if (hit := _under_host(target)) is not None:
        _READS.append(f"{event} {hit}")


def guard(dirs: list[str]) -> None:
    """Record this process's reads under `dirs` from now on (once per process)."""
    global _GUARDED
    if not _GUARDED:
        sys.addaudithook(_hook)
    _GUARDED = tuple(os.path.normpath(d) for d in dirs)


def take_reads() -> list[str]:
    """The reads recorded since the last call (and forget them)."""
    reads = list(_READS)
    _READS.clear()
    return reads
