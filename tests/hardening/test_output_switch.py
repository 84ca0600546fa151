"""What `profile set` prints: the failed or cancelled engine's own log excerpt, each thing once."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.harness import REPO, DaemonHarness, _scrubbed_env
from tests.support.switches import last_switch

TIMESTAMP = re.compile(r"^\[\s*\d+\.\d+s\] ")


def excerpt_of(stderr: str) -> tuple[str, list[str]]:
    """(header, lines) of the `last engine log lines (...)` block."""
    _before, found, rest = stderr.partition("last engine log lines (")
    assert found, f"no excerpt in:\n{stderr}"
    header, _, body = rest.partition("\n")
    lines = []
    for line in body.splitlines():
        if not line.startswith("  | "):
            break
        lines.append(line[4:])
    return header, lines


def log_lines(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()


def test_failed_switch_excerpt_is_the_failed_engines_own_log(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        assert d.ctl("profile", "set", "ring-ll", "-q").returncode == 0
        r = d.ctl("profile", "set", "tree-ll")
        assert r.returncode == 1, r.stdout + r.stderr
        header, lines = excerpt_of(r.stderr)
        rec = last_switch(d, "tree-ll")
        assert rec["result"] == "rolled_back" and rec["log"], rec
        assert header.startswith(f"tree-ll/baseline, {rec['log']}"), header
        failed = log_lines(rec["log"])
        assert lines and all(line in failed for line in lines), (lines, failed[-15:])
        assert lines == [ln for ln in failed if ln.strip()][-len(lines) :]  # its last lines
        assert any("Capture cuda graph failed" in ln for ln in lines), lines
        # nothing of the rollback server's start-up (its own, different log file)
        rollback_log = d.status()["engine"]["log"]
        assert rollback_log != rec["log"]
        text = "\n".join(lines)
        for startup in ("Uvicorn running", "fired up and ready to roll", "Started server"):
            assert startup not in text, text

        q = d.ctl("profile", "set", "tree-ll", "-q")
        assert q.returncode == 1 and q.stdout == "", q.stdout
        assert "last engine log lines" not in q.stderr and "  | " not in q.stderr, q.stderr
        assert q.stderr.splitlines()[0].startswith("rolled_back: tree-ll/baseline failed:")
        assert all(ln.startswith(("rolled_back:", "  log line:")) for ln in q.stderr.splitlines())


def test_cancelled_switch_excerpt_is_the_cancelled_engines_log(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, sim_load_seconds=6.0, metrics=False) as d:
        before = d.status()["engine"]["log"]
        switch = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket),
             "profile", "set", "ring-simple"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**_scrubbed_env(), "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        try:
            st = d.wait_for(
                lambda: (
                    (s := d.status())["state"] == "STARTING"
                    and s["engine"]["log"] not in (None, before)
                    and "Load weight begin" in Path(s["engine"]["log"]).read_text()
                    and s
                ),
                30,
                "the ring-simple engine to be loading weights",
            )
            loading_log = st["engine"]["log"]
            c = d.ctl("cancel")
            assert c.returncode == 0, c.stdout + c.stderr
            out, err = switch.communicate(timeout=120)
        finally:
            if switch.poll() is None:
                switch.kill()
        assert switch.returncode == 7, out + err  # EXIT_CANCELLED
        header, lines = excerpt_of(err)
        assert header.startswith(f"ring-simple/baseline, {loading_log}"), header
        cancelled = log_lines(loading_log)
        assert lines and all(line in cancelled for line in lines), (lines, cancelled[-15:])
        assert not any("fired up and ready to roll" in ln for ln in lines), lines
        assert d.status()["engine"]["log"] != loading_log  # the previous profile is back


def test_piped_profile_set_says_each_thing_once(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl("profile", "set", "ring-ll")
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout.splitlines()
        assert sum("hold exactly NCCL_ALGO=Ring" in ln for ln in out) == 1, r.stdout
        assert sum("engine pid" in ln or "engine started" in ln for ln in out) == 1, r.stdout
        assert sum("is serving" in ln for ln in out) == 1, r.stdout
        assert out[-1].startswith("ok: ring-ll/baseline is serving"), r.stdout
        bodies = [TIMESTAMP.sub("", ln).removeprefix("  * ") for ln in out]
        assert len(bodies) == len(set(bodies)), r.stdout
        # a rollback says "serving again" in its state line and the result, not a third time
        t = d.ctl("profile", "set", "tree-ll")
        assert t.returncode == 1
        assert "rolled back: ring-ll/baseline is serving" not in t.stdout, t.stdout
