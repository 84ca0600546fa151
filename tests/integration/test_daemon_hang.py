"""A hung engine is a crash, and FAILED is left by policy.

The real fastverifyd with the sim engine. The sim hangs like SGLang on SIGUSR1: its
scheduler stops while the process, its workers and its /health live; /health_generate then
answers 503 after SGLANG_HEALTH_CHECK_TIMEOUT with SGLang's "Health check failed" line.
SIGSTOP freezes the whole server (no answer at all). Tests wait for states and records,
never for time.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from tests.support.harness import DaemonHarness, free_port
from tests.support.notify import NotifyListener

WATCH = {"watch_interval_s": 0.2, "watch_timeout_s": 10, "watch_failures": 2}
# the sim reads SGLang's own variable: its /health_generate gives up after 1 s
FAST_SGLANG = {"SGLANG_HEALTH_CHECK_TIMEOUT": "1"}


def restarted(d: DaemonHarness, old_pid: int, reason: str) -> dict[str, Any] | None:
    st = d.status()
    by = st["restarts"]["by_reason"]
    pid = (st.get("engine") or {}).get("pid")
    if st["state"] == "READY" and by.get(reason) and pid and pid != old_pid:
        return st
    return None


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_hung_scheduler_is_detected_and_restarted(tmp_path: Path) -> None:
    config = {"daemon": WATCH, "server": {"env": FAST_SGLANG}}
    with DaemonHarness(tmp_path, config=config) as d:
        pid = d.engine_pid()
        assert pid
        os.kill(pid, signal.SIGUSR1)  # the sim's scheduler hangs; the process lives
        st = d.wait_for(lambda: restarted(d, pid, "engine_unresponsive"), 60, "a restart")
        failure = st["last_failure"]
        assert failure["reason"] == "engine_unresponsive", failure
        # the configured window: the 2nd failed answer in a row, SGLang's own line quoted
        assert "/health_generate failed 2 times in a row (last: HTTP 503)" in failure["message"]
        assert " s after its first failed check" in failure["message"], failure
        assert (
            "SGLang: Health check failed. Server couldn't get a response from detokenizer for "
            "last 1 seconds" in failure["message"]
        ), failure
        assert failure["line"].startswith("Health check failed.")
        assert gone(pid)  # the hung engine was stopped, not left holding its GPUs
        # READY is published just before the restart's record is appended: wait for it
        record = d.wait_for(
            lambda: [r for r in d.client.get("/v1/history") if r["kind"] == "crash_restart"],
            30,
            "the crash_restart record",
        )[-1]
        assert record["result"] == "ok" and record["profile"] == st["profile"]
        assert record["reason"] == "engine_unresponsive", record  # why it was restarted
        assert any(
            line.split("\t")[1:2] == ["crash_restart"] and "\tengine_unresponsive\t" in line
            for line in d.ctl("history").stdout.splitlines()
        )
        # the exporter counts it under its reason
        assert d.metrics_url is not None
        with urllib.request.urlopen(d.metrics_url, timeout=10) as resp:
            text = resp.read().decode()
        assert 'fastverify_engine_restarts_total{reason="engine_unresponsive"} 1.0' in text


def test_a_failing_check_shows_in_status_and_readyz_at_once(tmp_path: Path) -> None:
    """From the first failed check of /health_generate the engine is not Ready (/readyz
    503) and `status` says how many checks failed and since when, before the watch decides
    it is unresponsive (never here: 100 failures in a row)."""
    port = free_port()
    daemon = dict(WATCH, watch_failures=100, watch_retry_s=0.2, health_listen=f"127.0.0.1:{port}")
    with DaemonHarness(tmp_path, config={"daemon": daemon, "server": {"env": FAST_SGLANG}}) as d:
        assert http(f"http://127.0.0.1:{port}/readyz")[0] == 200
        pid = d.engine_pid()
        assert pid
        os.kill(pid, signal.SIGUSR1)  # the sim's scheduler hangs; the process lives
        st = d.wait_for(
            lambda: (
                ((s := d.status())["engine"]["health"] or {}).get("failed_checks", 0) >= 2 and s
            ),
            60,
            "two failed checks",
        )
        assert st["state"] == "READY" and st["engine"]["pid"] == pid
        health = st["engine"]["health"]
        assert health["last_failed"] == "HTTP 503" and isinstance(health["failing_since"], float)
        code, body = http(f"http://127.0.0.1:{port}/readyz")
        assert code == 503, body
        assert "engine failing its health check: " in body["why"], body
        assert "failed checks of /health_generate in a row since " in body["why"], body
        text = d.ctl("status").stdout
        assert "health:     " in text and "(last: HTTP 503; 100 make the engine" in text, text
        assert "/readyz answers 503" in text


def test_a_frozen_server_times_out_and_is_restarted(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config={"daemon": dict(WATCH, watch_timeout_s=1)}) as d:
        pid = d.engine_pid()
        assert pid
        os.kill(pid, signal.SIGSTOP)  # nothing answers, not even the HTTP server
        try:
            st = d.wait_for(lambda: restarted(d, pid, "engine_unresponsive"), 60, "a restart")
        finally:
            if not gone(pid):
                os.kill(pid, signal.SIGCONT)  # only our own engine, if the daemon did not
        assert "gave no answer within 1 s" in st["last_failure"]["message"]
        assert gone(pid)


def test_a_busy_server_is_not_unresponsive(tmp_path: Path) -> None:
    """SGLang answers /health_generate at once while it produces output: a loaded engine
    passes every poll (the watch never restarts a server for being busy)."""
    config = {"daemon": dict(WATCH, watch_failures=1), "server": {"env": FAST_SGLANG}}
    with DaemonHarness(tmp_path, config=config) as d:
        pid = d.engine_pid()
        body = json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 300}}).encode()
        req = urllib.request.Request(
            d.server_url + "/generate", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=300) as resp:
            assert resp.status == 200
        st = d.status()
        assert st["state"] == "READY" and st["engine"]["pid"] == pid
        assert not st["restarts"]["by_reason"], st["restarts"]


def http(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def unverifiable(d: DaemonHarness) -> None:
    """A profile that starts, answers /health, then fails verification (NCCL finds no such
    tuner plugin): FAILED every time it is started."""
    (d.profile_dir / "t.tuner.csv").write_text(
        "collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes\n"
        "AllReduce,0,1024,Ring,LL,-1,2,1\n"
    )
    (d.profile_dir / "unverifiable.env").write_text(
        "# extends: nccl-default\nFASTVERIFY_TUNER_TABLE=t.tuner.csv\n"
        "NCCL_TUNER_PLUGIN=fastverify-missing\n"
    )


def spent(d: DaemonHarness) -> dict[str, Any] | None:
    st = d.status()
    return st if st["recovery"]["spent"] else None


def test_declarative_failed_retries_with_backoff_then_livez_fails(tmp_path: Path) -> None:
    port = free_port()
    config = {
        "daemon": {
            "declarative": True,
            "default_profile": "unverifiable",
            "health_listen": f"127.0.0.1:{port}",
            "recover_retries": 2,
            "recover_backoff_s": [0.2, 0.3],
        }
    }
    d = DaemonHarness(tmp_path, config=config, start=False)
    unverifiable(d)
    with d:
        d.start(wait_ready=False)
        st = d.wait_for(lambda: spent(d), 120, "the recovery retries to be spent")
        assert st["state"] == "FAILED"
        assert st["recovery"]["retries"] == st["recovery"]["limit"] == 2
        assert st["recovery"]["backoff_s"] == [0.2, 0.3]
        recovers = d.wait_for(  # the last record is appended just after FAILED
            lambda: (
                (rs := [r for r in d.client.get("/v1/history") if r["kind"] == "recover"])
                and len(rs) == 2
                and rs
            ),
            30,
            "two recover records",
        )
        assert [(r["profile"], r["result"], r["reason"]) for r in recovers] == [
            ("unverifiable", "failed", "tuner_not_loaded")
        ] * 2
        code, body = http(f"http://127.0.0.1:{port}/livez")
        assert code == 503 and "2 recovery retries" in body["why"], body
        assert "tuner_not_loaded" in body["why"]
        assert http(f"http://127.0.0.1:{port}/readyz")[0] == 503
        out = d.ctl("status", "--json")
        assert json.loads(out.stdout)["recovery"]["spent"] is True
        text = d.ctl("status").stdout
        assert "recovery:   2/2 retries of unverifiable/baseline (the declared profile): spent" in (
            text
        ), text


def test_failed_recovers_the_last_good_profile(tmp_path: Path) -> None:
    """A crash with no restart left (burst 0) is FAILED; the daemon itself starts the last
    good profile again after the backoff. Not declarative: /livez never fails."""
    port = free_port()
    config = {
        "daemon": {
            "restart_burst": 0,
            "recover_retries": 3,
            "recover_backoff_s": [0.2, 1],
            "health_listen": f"127.0.0.1:{port}",
        }
    }
    with DaemonHarness(tmp_path, config=config) as d:
        assert d.ctl("profile", "set", "ring-ll").returncode == 0
        pid = d.engine_pid()
        assert pid
        os.kill(pid, signal.SIGKILL)
        d.wait_for(
            lambda: [r for r in d.client.get("/v1/history") if r["kind"] == "recover"],
            60,
            "a recover record",
        )
        st = d.wait_state("READY", 60)
        assert (st["profile"], st["mode"]) == ("ring-ll", "baseline")
        assert st["recovery"]["retries"] == 1 and not st["recovery"]["spent"]
        st = d.wait_for(lambda: (s := d.status())["recovery"]["last"] and s, 30, "the outcome")
        assert st["recovery"]["last"].startswith("ok:")
        kinds = [r["kind"] for r in d.client.get("/v1/history")]
        assert kinds[-2:] == ["crash_restart", "recover"], kinds
        assert http(f"http://127.0.0.1:{port}/livez")[0] == 200


def test_declarative_under_systemd_exits_3_when_spent(tmp_path: Path) -> None:
    addr = str(tmp_path / "notify.sock")
    listener = NotifyListener(addr)
    config = {
        "daemon": {
            "declarative": True,
            "default_profile": "unverifiable",
            "recover_retries": 1,
            "recover_backoff_s": [0.2, 0.2],
        }
    }
    d = DaemonHarness(tmp_path, config=config, start=False, env={"NOTIFY_SOCKET": addr})
    unverifiable(d)
    try:
        d.start(wait_ready=False)
        assert d.proc is not None
        assert d.proc.wait(120) == 3  # the unit fails; systemd's Restart= decides
        assert "restart.recover_retries spent" in d.log_text()  # the key, by its table
        assert listener.first("STOPPING=1") is not None
        assert not d.leaked(), "engine process leaked"  # it stopped its group first
    finally:
        listener.close()
        d.close(check_leaks=False)
