"""A wall-clock step does not orphan the engine: after kill -9 of fastverifyd, a new daemon
that sees the clock stepped by an hour (its own mount namespace with a /proc/stat whose
btime moved, as the kernel's does after `date -s` or an NTP step) still adopts its engine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.harness import DaemonHarness, engines_on_port

STEP_S = 3600


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount --bind /proc/stat /proc/stat"],
        capture_output=True,
        check=False,
    )
    return r.returncode == 0


def _btime() -> str:
    line = next(ln for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("btime"))
    return line.split()[1]


def stepped_stat(tmp: Path, step_s: int) -> Path:
    """/proc/stat as the kernel shows it after the wall clock moved by `step_s`."""
    out = []
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            line = f"btime {int(line.split()[1]) + step_s}"
        out.append(line)
    fake = tmp / "stat-stepped"
    fake.write_text("\n".join(out) + "\n")
    return fake


class SteppedClockDaemon(DaemonHarness):
    """The daemon started in a mount namespace whose /proc/stat is `stat_file` (once set)."""

    stat_file: Path | None = None

    def argv(self) -> list[str]:
        argv = super().argv()
        if self.stat_file is None:
            return argv
        script = f'mount --bind {self.stat_file} /proc/stat && exec "$@"'
        return ["unshare", "-m", "sh", "-c", script, "sh", *argv]


@pytest.mark.skipif(not _can_unshare(), reason="needs a mount namespace (unshare -m, root)")
def test_a_clock_step_between_daemons_keeps_the_engine_ours(tmp_path: Path) -> None:
    d = SteppedClockDaemon(tmp_path, metrics=False, start=False)
    try:
        d.start()
        before = d.status()["engine"]
        d.kill9()
        d.stat_file = stepped_stat(tmp_path, STEP_S)
        d.restart_daemon(wait_ready=True, timeout=30)
        st = d.status()
        # the new daemon's view of the engine's start moved by the step (a real step)
        seen = subprocess.run(
            ["nsenter", "-t", str(d.pid), "-m", "grep", "^btime", "/proc/stat"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert int(seen.split()[1]) == int(_btime()) + STEP_S
        assert st["state"] == "READY", st
        assert st["engine"]["pid"] == before["pid"], (before, st["engine"], st["findings"])
        assert st["engine"]["adopted"] is True
        assert not any("leaving it alone" in f for f in st["findings"]), st["findings"]
        groups = engines_on_port(int(d.server_url.rsplit(":", 1)[1]))
        assert list(groups) == [before["pgid"]]
    finally:
        d.close()
