"""Nothing a caller writes reaches a terminal raw: a lease description holding ESC[2J (clear
screen), OSC 52 (clipboard write) and ESC[8m (hidden text), taken through the daemon's real
socket, read back by `fastverifyctl` under a real pseudo-terminal (status, the 409 of a
switch, --json), and an engine's log line with the same bytes (`fastverifyctl logs`)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

from fastverify.client import ControlClient
from tests.support.harness import REPO, DaemonHarness

EVIL = "job \x1b[2J\x1b]52;c;ZXZpbA==\x07 \x1b[8mhidden\x1b[0m \x9b31m \u202egnp.exe\r\nforged: ok"


def ctl_on_a_tty(d: DaemonHarness, *args: str) -> tuple[int, bytes]:
    """fastverifyctl with stdout and stderr on a pty (isatty() is true, as for an operator)."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FASTVERIFY_", "NCCL_"))}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), *args],
        stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env,
    )  # fmt: skip
    os.close(follower)
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError(f"fastverifyctl {args} wrote nothing for 60 s: {out!r}")
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    return proc.wait(30), out


def assert_inert(out: bytes) -> None:
    for seq in (b"\x1b[2J", b"\x1b]52", b"\x1b[8m", b"\xc2\x9b", "\u202e".encode(), b"\rforged"):
        assert seq not in out, (seq, out)
    assert b"\\x1b[2J" in out  # shown, not swallowed


def test_a_lease_description_never_reaches_the_terminal_raw(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        lease = ControlClient(d.socket).take_lease("sweep", description=EVIL)
        assert lease["description"] == EVIL  # the daemon keeps what it was given
        rc, out = ctl_on_a_tty(d, "status")
        assert rc == 0, out
        assert_inert(out)
        assert b"\\x0d\\x0aforged" in out  # the description stays on its line
        rc, out = ctl_on_a_tty(d, "profile", "set", "ring-ll")
        assert rc == 4, out  # the lease holds: 409
        assert_inert(out)
        r = d.ctl("status", "--json")
        assert json.loads(r.stdout)["lease"]["description"] == EVIL  # JSON keeps it exactly
        assert "\x1b" not in r.stdout and "\x9b" not in r.stdout and "\u202e" not in r.stdout


def test_engine_log_lines_are_escaped_in_logs(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        log = Path(d.status()["engine"]["log"])
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"[worker] {EVIL}\n")
        d.wait_for(lambda: "forged" in d.ctl("logs", "-n", "500").stdout, 30, "the line in logs")
        rc, out = ctl_on_a_tty(d, "logs", "-n", "500")
        assert rc == 0, out
        assert_inert(out)
