"""`fastverifyctl verify` against a real fastverifyd on the sim: every verifier again on the
serving engine, ok on a healthy one, failed with its evidence once what a verifier checks
has drifted (the profile edited on disk after the start), exit 3 without a daemon."""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from tests.support.harness import DaemonHarness, run_ctl

PROFILE = "# description: a profile this test edits\nNCCL_ALGO=Ring\nNCCL_PROTO=LL\n"


def _verify(d: DaemonHarness) -> tuple[int, dict]:
    r = d.ctl("verify", "--json")
    return r.returncode, json.loads(r.stdout)


def test_verify_is_ok_on_a_healthy_engine_and_fails_with_evidence_after_drift(
    tmp_path: Path,
) -> None:
    with DaemonHarness(tmp_path, tp_size=2, config={"daemon": {"nccl_debug": True}}) as d:
        (d.profile_dir / "edited.env").write_text(PROFILE)
        r = d.ctl("profile", "set", "edited")
        assert r.returncode == 0, r.stdout + r.stderr
        pid = d.status()["engine"]["pid"]
        tree = {pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))}

        code, out = _verify(d)
        assert code == 0, out
        assert (out["ok"], out["profile"], out["pid"]) == (True, "edited", pid)
        by = {v["name"]: v for v in out["verifiers"]}
        assert by["env"]["status"] == "ok"
        seen = {p["pid"] for p in by["env"]["evidence"]["processes"]}
        assert seen == tree  # the server and every TP worker, read from /proc
        assert by["env"]["evidence"]["expected"]["NCCL_PROTO"] == "LL"
        assert by["nccl"]["status"] == "ok"  # NCCL's own lines (daemon.nccl_debug)
        assert by["nccl"]["evidence"]["confirmed"]["NCCL_PROTO"] == "LL"
        assert by["profile"]["status"] == "ok"
        assert by["adaptive"]["status"] == "skipped"

        table = d.ctl("verify")
        assert table.returncode == 0, table.stdout + table.stderr
        assert str(pid) in table.stdout and "NCCL_PROTO" in table.stdout

        # the profile changes under the serving engine: it no longer runs what the profile says
        (d.profile_dir / "edited.env").write_text(
            PROFILE.replace("NCCL_PROTO=LL", "NCCL_PROTO=Simple")
        )
        code, out = _verify(d)
        assert code == 1, out
        assert out["ok"] is False and out["reason"] == "profile_drift"
        by = {v["name"]: v for v in out["verifiers"]}
        assert by["env"]["status"] == "ok"  # the processes still hold what they started with
        drift = by["profile"]
        assert drift["status"] == "failed" and drift["reason"] == "profile_drift"
        assert drift["evidence"]["different"] == {"NCCL_PROTO": ["Simple", "LL"]}
        assert "NCCL_PROTO=LL (profile now: Simple)" in drift["message"]
        table = d.ctl("verify")
        assert table.returncode == 1
        assert "FAILED" in table.stdout and "profile now" in table.stdout
        st = d.status()
        assert (st["state"], st["engine"]["pid"]) == ("READY", pid)  # it keeps serving

        r = d.ctl("restart")
        assert r.returncode == 0, r.stdout + r.stderr
        code, out = _verify(d)
        assert code == 0 and out["pid"] != pid, out


def test_verify_without_a_daemon_exits_3(tmp_path: Path) -> None:
    r = run_ctl("verify", "--socket", str(tmp_path / "none.sock"))
    assert r.returncode == 3, r.stdout + r.stderr
    r = run_ctl("verify", "--json", "--socket", str(tmp_path / "none.sock"))
    assert r.returncode == 3 and json.loads(r.stdout)["reachable"] is False
