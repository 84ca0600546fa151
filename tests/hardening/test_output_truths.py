"""What the CLI prints must be true and labelled, through the real `fastverifyctl` (and a real
daemon on the sim): help text as printed, an adopted engine's status and crash reason, the
sweep's closing lines."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.support.harness import DaemonHarness, run_ctl


def test_spec_plan_help_prints_percent_signs_once() -> None:
    r = run_ctl("spec", "plan", "--help")
    assert r.returncode == 0, r.stderr
    assert "35% less likely" in r.stdout and "%%" not in r.stdout, r.stdout


def test_an_adopted_engine_is_not_shown_as_a_load_and_its_crash_has_a_reason(
    tmp_path: Path,
) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        loaded = d.ctl("status")
        assert "ready in:" in loaded.stdout, loaded.stdout
        d.kill9()
        d.restart_daemon()
        st = d.status()
        assert st["engine"]["adopted"] is True
        shown = d.ctl("status").stdout
        assert "ready in:" not in shown and "adopted:" in shown, shown
        os.kill(st["engine"]["pid"], signal.SIGKILL)
        d.wait_for(lambda: d.status()["restarts"]["total"] == 1, 30, "the crash counted")
        failure = d.status()["last_failure"]
        assert failure["reason"] == "exited" and "?" not in failure["reason"], failure
        assert "exit status" in failure["message"], failure
        d.wait_state("READY", 60)


def test_a_sweep_says_restored_once(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False, config={"daemon": {"trace_period_s": 0}}) as d:
        r = d.ctl("sweep", "ring-ll", "--repeats", "1", "--duration", "0.5", "--output-len",
                  "16", "--output", str(tmp_path / "s"), "--no-plot", timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        said = (r.stdout + r.stderr).splitlines()
        restored = [x for x in said if "restored:" in x]
        assert len(restored) == 1, said


def test_profile_validate_says_nothing_of_the_content_of_a_file_it_never_read(
    tmp_path: Path,
) -> None:
    d = tmp_path / "profiles"
    d.mkdir()
    (tmp_path / "elsewhere.env").write_text("NCCL_ALGO=Ring\n")
    (d / "link.env").symlink_to(tmp_path / "elsewhere.env")
    (d / "big.env").write_text("NCCL_ALGO=Ring\n" * 80_000)
    r = run_ctl("profile", "--dir", str(d), "validate", "link", "big")
    assert r.returncode == 1, r.stdout + r.stderr
    said = r.stdout + r.stderr
    assert "symbolic link" in said and "larger than" in said, said
    assert "description" not in said, said
