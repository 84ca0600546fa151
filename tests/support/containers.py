"""What the deployment tests share besides their fixtures (tests/deployment/conftest.py): the
checkout, the cache of heavy artefacts ($FASTVERIFY_TEST_CACHE), the rootfs recipe, running a
command with its output shown on failure, a private dockerd's CLI, and the rule that a
machine which cannot run a container test says so loudly (and fails under CI)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.net import free_port

__all__ = ["free_port"]  # the others are this module's own

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("FASTVERIFY_TEST_CACHE", "/var/cache/fastverify-test"))
SUITE = "bookworm"
ROOTFS_PACKAGES = (
    "python3",
    "python3-venv",
    "python3-pip",
    "systemd",
    "systemd-sysv",
    "dbus",
    "procps",
)
ROOTFS_KEY = hashlib.sha256(f"{SUITE} {' '.join(ROOTFS_PACKAGES)} v1".encode()).hexdigest()[:12]


def unavailable(reason: str) -> None:
    """Skip loudly where the machine cannot run a container test; fail under CI."""
    if os.environ.get("CI"):
        pytest.fail(f"container test cannot run on this CI machine: {reason}", pytrace=False)
    pytest.skip(f"NOT RUN (machine cannot): {reason}")


def run(
    cmd: list[str], *, timeout: float = 120, check: bool = True, **kw
) -> subprocess.CompletedProcess[str]:
    """subprocess.run with text output captured; a failure shows the command's output."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{cmd!r} exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


def need_root_tools(*tools: str) -> None:
    if os.geteuid() != 0:
        unavailable("needs root (CI runs as root)")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        unavailable(f"missing {', '.join(missing)}: run scripts/install-system-deps.sh")


# How long a run waits for another run's hold on a shared artefact (its dockerd, held for the
# other run's whole session): a run beside a second full suite waits for it, then goes on.
LOCK_WAIT_S = 3600.0
LOCK_POLL_S = 0.5


@contextlib.contextmanager
def locked(path: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """`path` locked (flock) for this process; waits for another holder up to `wait_s`, then
    fails saying which lock and for how long."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{path} stayed locked by another test run for {wait_s:.0f} s (a suite "
                        "beside this one holds it while its dockerd runs); run again once it "
                        "is done"
                    ) from None
                time.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def debian_mirror() -> str:
    """The Debian mirror apt uses here (deb822 or one-line sources)."""
    for path in sorted(Path("/etc/apt").glob("sources.list*")) + sorted(
        Path("/etc/apt/sources.list.d").glob("*")
    ):
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for m in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if m.group(1).rstrip("/").endswith("/debian"):
                return m.group(1)
        for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+bookworm\s", text, re.M):
            return m.group(1)
    return "http://deb.debian.org/debian"


@dataclass
class Docker:
    """A private dockerd: `docker(...)` runs the CLI against it."""

    env: dict[str, str]
    cli: str

    def __call__(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return run([self.cli, *args], env=self.env, timeout=timeout, check=check)
