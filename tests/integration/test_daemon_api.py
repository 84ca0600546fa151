"""Control API extras on a real daemon: exporter feed, baselines, TCP + token, log follow."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fastverify.api_answers import EngineStatus, StatusBody
from fastverify.api_reference import part_sections
from fastverify.api_schema import documented
from fastverify.client import ApiError, ControlClient
from fastverify.exporters import sglang_metrics
from tests.support.harness import REPO, DaemonHarness, free_port


def scrape(url: str) -> dict[str, float]:
    out = {}
    for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines():
        if line.startswith("fastverify_"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_exporter_is_fed_switches_restarts_start_time_and_baselines(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path) as d:
        assert d.ctl("profile", "set", "ring-ll", "-q").returncode == 0
        assert d.ctl("profile", "set", "tree-ll", "-q").returncode == 1
        body = {
            "profile": "ring-ll",
            "tokens_per_second": 82.4,
            "per_request_tokens_per_second": 80,
            "concurrency": 1,
        }
        rec = d.client.post("/v1/baselines", body)
        assert rec["tokens_per_second"] == 82.4
        m = scrape(d.metrics_url)
        assert m['fastverify_profile_switches_total{result="ok"}'] == 1
        assert m['fastverify_profile_switches_total{result="rolled_back"}'] == 1
        assert m['fastverify_engine_restarts_total{reason="switch"}'] == 2
        assert m["fastverify_up"] == 1
        assert 0 < m["fastverify_engine_start_seconds"] < 10
        assert m['fastverify_baseline_tokens_per_second{concurrency="1",profile="ring-ll"}'] == 82.4
        assert any(k.startswith("fastverify_profile_info{") and 'profile="ring-ll"' in k for k in m)
        # Baselines survive a daemon restart (state_dir/baselines.json) and reach the hub again.
        assert d.stop() == 0
        d._closed = False
        d.restart_daemon()
        assert d.client.get("/v1/baselines")["ring-ll"]["per_request_tokens_per_second"] == 80
        m = scrape(d.metrics_url)
        assert m['fastverify_baseline_tokens_per_second{concurrency="1",profile="ring-ll"}'] == 82.4


def test_the_status_body_is_the_declared_one(tmp_path: Path) -> None:
    """GET /v1/status answers exactly the fields api_models declares and the sections the
    daemon's parts declare (docs/reference/api.md's table)."""
    with DaemonHarness(tmp_path, metrics=False) as d:
        st = d.client.status()
    assert st["state"] == "READY"
    sections = [f.name for f in part_sections()]
    assert st["parts"] == sections == ["weight_cache", "allreduce", "speculation", "frontdoor"]
    assert sorted(st) == sorted([f.name for f in documented(StatusBody)] + sections)
    assert sorted(st["engine"]) == sorted(f.name for f in documented(EngineStatus))


def test_tcp_needs_the_token(tmp_path: Path) -> None:
    token = "t0k3n-" + "x" * 20
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    tf.chmod(0o600)
    port = free_port()
    cfg = {"daemon": {"tcp_listen": f"127.0.0.1:{port}", "token_file": str(tf)}}
    with DaemonHarness(tmp_path, config=cfg, metrics=False) as d:
        ok = ControlClient(tcp=f"127.0.0.1:{port}", token=token, timeout=5).get("/v1/status")
        assert ok["state"] == "READY"
        for bad in (None, "wrong-token-wrong-token"):
            with pytest.raises(ApiError) as exc:
                ControlClient(tcp=f"127.0.0.1:{port}", token=bad, timeout=5).get("/v1/status")
            assert exc.value.status == 401
        assert d.client.get("/v1/status")["state"] == "READY"  # the Unix socket needs none


def test_tcp_without_token_file_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[daemon]\ntcp_listen = "127.0.0.1:1"\n')
    r = subprocess.run(
        [sys.executable, "-m", "fastverify.daemon.main", "--config", str(cfg),
         "--state-dir", str(tmp_path / "s"), "--socket", str(tmp_path / "x.sock")],
        capture_output=True, text=True, timeout=30, cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 2
    assert "token_file" in r.stderr and "tcp_listen" in r.stderr


def test_logs_tail_and_follow(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl("logs", "-n", "5", "--json")
        lines = [json.loads(x) for x in r.stdout.splitlines()]
        assert len(lines) == 5 and all(x["event"] == "log" for x in lines)
        cmd = [
            sys.executable,
            "-m",
            "fastverify.ctl",
            "--socket",
            str(d.socket),
            "logs",
            "-f",
            "-n",
            "0",
        ]
        follower = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            time.sleep(0.5)
            assert d.ctl("profile", "set", "ring-ll", "-q").returncode == 0
            deadline = time.monotonic() + 10
            seen = []
            while time.monotonic() < deadline:
                line = follower.stdout.readline()
                seen.append(line)
                if "ring-ll/baseline is serving" in line:
                    break
            assert any("ready to roll" in x for x in seen)
            assert any("ring-ll/baseline is serving" in x for x in seen)
        finally:
            follower.terminate()
            follower.wait(5)


def test_unreachable_daemon_exit_code(tmp_path: Path) -> None:
    sock = tmp_path / "none.sock"
    for args in (["status"], ["status", "--json"], ["profile", "set", "ring-ll"], ["history"]):
        r = subprocess.run(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(sock), *args],
            capture_output=True, text=True, timeout=30, cwd=REPO, check=False,
        )  # fmt: skip
        assert r.returncode == 3, (args, r.stdout, r.stderr)
        assert "not reachable" in (r.stderr + r.stdout)


def test_trace_capture_and_throughput_under_traffic(tmp_path: Path) -> None:
    import threading

    with DaemonHarness(tmp_path, config={"daemon": {"trace_period_s": 0}}) as d:
        stop = threading.Event()

        def load() -> None:
            body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 32}}).encode()
            while not stop.is_set():
                req = urllib.request.Request(
                    d.server_url + "/generate",
                    data=body,
                    headers={"Content-Type": "application/json"},
                )
                urllib.request.urlopen(req, timeout=10).read()

        t = threading.Thread(target=load)
        t.start()
        try:
            # a capture needs a running request (an idle engine is refused with 409)
            d.wait_for(
                lambda: sglang_metrics.reduce(sglang_metrics.fetch(d.server_url))[
                    "num_running_reqs"
                ],
                20,
                "a running request",
            )
            res = d.client.post("/v1/trace/capture", {"steps": 3}, timeout=60)
            assert res["steps"] == 3 and len(res["ranks"]) == 2  # one trace per TP rank
            assert all(
                Path(r["file"]).name.endswith(f"-TP-{r['rank']}.trace.json.gz")
                for r in res["ranks"]
            )
            st = d.wait_for(
                lambda: (s := d.status())["tokens_per_second"] and s, 10, "decode lines"
            )
            assert st["status_line"] == (
                f"serving nccl-default/baseline {st['tokens_per_second']:.1f} tok/s (simulated)"
            )
        finally:
            stop.set()
            t.join(15)
        with pytest.raises(ApiError) as exc:
            d.client.post("/v1/trace/capture", {"steps": 0})
        assert exc.value.status == 422


def test_sglang_engine_without_model_path_fails_clearly_and_keeps_answering(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, engine="sglang", metrics=False, start=False) as d:
        d.start(wait_ready=False)
        st = d.wait_state("FAILED", timeout=20)
        assert st["last_failure"]["reason"] == "config_error"
        assert "server.model_path is not set" in st["last_failure"]["message"]
        assert st["engine"]["name"] == "sglang" and st["engine"]["simulated"] is False
        r = d.ctl("server", "check", "--json")
        assert r.returncode == 2 and "model_path" in r.stdout
