"""The front door on the sim, through fastverifyctl: streaming clients through a profile switch
(hold: none cut, none failed; off, today's behaviour: the switch breaks them), a failing
profile whose held requests the rolled-back engine serves, a full hold queue answered 503 +
Retry-After, and a front door that outlives a kill -9 of fastverifyd."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import threading
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.harness import REPO, DaemonHarness
from tests.support.net import free_port
from tests.support.streams import Clients, one_stream, under_clients
from tests.support.switches import last_switch

CLIENTS = 4


def _door(mode: str, **more: object) -> dict:
    # the engine's internal port: a free one (port + 1, the default, may be another's here)
    return {"frontdoor": {"mode": mode, "engine_port": free_port(), **more}}


@pytest.mark.parametrize("mode", ["off", "hold"])
def test_streams_through_a_switch(tmp_path: Path, mode: str) -> None:
    with DaemonHarness(tmp_path, config=_door(mode)) as d:
        # every client streams once before the switch and once after it
        r, tally = under_clients(
            d.server_url, CLIENTS, lambda: d.ctl("profile", "set", "ring-ll", "--json")
        )
        assert r.returncode == 0, r.stdout + r.stderr
        switch = json.loads(r.stdout)["switch"]
        scraped = _frontdoor_series(d)
        if mode == "off":  # today: the switch takes the service down
            assert tally.failed or tally.cut, tally
            assert switch["mode"] == "none"
            assert not tally.refused_503  # nothing answers 503 + Retry-After without it
            assert scraped == {}
            return
        assert (tally.cut, tally.failed, tally.refused_503) == ([], [], [])
        assert switch["mode"] == "hold"
        assert switch["held"] >= 1 and switch["cut"] == 0 and switch["refused"] == 0
        assert 0 < switch["longest_wait_s"] <= switch["downtime_s"]
        hist = json.loads(d.ctl("history", "--json").stdout)
        assert hist[-1]["switch"]["held"] == switch["held"]
        st = d.status()["frontdoor"]
        assert (st["state"], st["totals"]["cut"]) == ("serving", 0)
        assert st["port"] == int(d.status()["engine"]["url"].rsplit(":", 1)[1])
        assert scraped["fastverify_frontdoor_held_requests_total"] >= switch["held"]
        assert scraped["fastverify_frontdoor_hold_seconds_count"] >= switch["held"]
        assert scraped["fastverify_frontdoor_cut_requests_total"] == 0


def _frontdoor_series(d: DaemonHarness) -> dict[str, float]:
    text = urllib.request.urlopen(d.metrics_url, timeout=30).read().decode()
    return {
        s.name: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name.startswith("fastverify_frontdoor_") and "le" not in s.labels
    }


def test_failing_profile_rolls_back_and_serves_the_held(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config=_door("hold")) as d:
        assert d.ctl("profile", "set", "ring-ll").returncode == 0
        with Clients(d.server_url, CLIENTS) as clients:
            clients.wait_answers(CLIENTS)
            r = d.ctl("profile", "set", "tree-ll")
            assert r.returncode == 1, r.stdout + r.stderr
            clients.wait_answers(clients.answers + CLIENTS)
        rec = last_switch(d, "tree-ll")
        assert rec["result"] == "rolled_back"
        assert rec["switch"]["held"] >= 1 and rec["switch"]["cut"] == 0
        assert (clients.tally.cut, clients.tally.failed) == ([], [])
        assert d.status()["profile"] == "ring-ll"
        # what the operator reads: the switch's line, the history's column, status
        held = rec["switch"]["held"]
        assert "clients: hold" in r.stderr and f"(held {held}, " in r.stderr, r.stderr
        assert f"{held}h 0c 0r" in d.ctl("history").stdout
        assert "front door: serving on http://127.0.0.1:" in d.ctl("status").stdout


def test_a_full_queue_answers_503_with_retry_after(tmp_path: Path) -> None:
    # one place in the queue; the sim's 6 s load keeps the restart's hold open while the
    # test fills the queue (two requests, milliseconds)
    with DaemonHarness(tmp_path, config=_door("hold", queue_size=1), sim_load_seconds=6) as d:
        restart: list = []
        t = threading.Thread(target=lambda: restart.append(d.ctl("restart", "--json")))
        t.start()
        d.wait_for(lambda: d.status()["frontdoor"]["state"] == "holding", 60, "the hold")
        held: list = []
        first = threading.Thread(target=lambda: held.append(one_stream(d.server_url)))
        first.start()
        d.wait_for(lambda: d.status()["frontdoor"]["waiting"] == 1, 60, "one request held")
        kind, _, headers = one_stream(d.server_url)
        assert kind == "503" and headers.get("Retry-After") == "5", (kind, headers)
        t.join(120)
        first.join(120)
        r = restart[0]
        assert r.returncode == 0, r.stdout + r.stderr
        assert held[0][0] == "ok", held  # the held one went to the restarted engine
        switch = json.loads(r.stdout)["switch"]
        assert (switch["held"], switch["refused"], switch["cut"]) == (1, 1, 0)


def test_front_door_outlives_kill9_and_is_adopted(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config=_door("hold")) as d:
        door = d.status()["frontdoor"]
        d.kill9()
        # the daemon is gone; the front door and the engine still serve clients
        assert one_stream(d.server_url)[0] == "ok"
        d.restart_daemon()
        again = d.status()["frontdoor"]
        assert again["pid"] == door["pid"] and again["state"] == "serving"
        assert "adopting the running front door" in d.log_text()
    # a stopped daemon stops its front door (a zombie left to an init that does not reap
    # is gone as far as clients go)
    with contextlib.suppress(psutil.NoSuchProcess):
        assert psutil.Process(door["pid"]).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("mode", ["off", "hold"])
def test_a_crash_is_held_and_its_cut_streams_counted(tmp_path: Path, mode: str) -> None:
    with DaemonHarness(tmp_path, config=_door(mode)) as d:
        with Clients(d.server_url, CLIENTS) as clients:
            clients.wait_answers(CLIENTS)
            os.kill(d.status()["engine"]["pid"], signal.SIGKILL)  # the daemon's own engine
            rec = d.wait_for(
                lambda: next(
                    (r for r in d.client.get("/v1/history") if r.get("kind") == "crash_restart"),
                    None,
                ),
                60,
                "the crash restart's record",
            )
            clients.wait_answers(clients.answers + CLIENTS)
        tally = clients.tally
        if mode == "off":  # today: the restart window refuses connections
            assert tally.failed, tally
            return
        assert tally.failed == [] and tally.refused_503 == []
        assert rec["result"] == "ok" and rec["switch"]["mode"] == "hold"
        # a stream the crash broke off is counted on both sides, never retried
        assert rec["switch"]["cut"] == len(tally.cut)


def test_kill9_of_fastverifyd_during_a_hold(tmp_path: Path) -> None:
    # the sim's 6 s load keeps the restart's hold open while the daemon is killed
    with DaemonHarness(tmp_path, config=_door("hold"), sim_load_seconds=6) as d:
        door_pid = d.status()["frontdoor"]["pid"]
        restart = threading.Thread(target=lambda: d.ctl("restart"), daemon=True)
        restart.start()
        d.wait_for(lambda: d.status()["frontdoor"]["state"] == "holding", 60, "the hold")
        held: list = []
        waiter = threading.Thread(target=lambda: held.append(one_stream(d.server_url)))
        waiter.start()
        d.wait_for(lambda: d.status()["frontdoor"]["waiting"] == 1, 60, "one request held")
        d.kill9()
        d.restart_daemon()  # adopts the front door (still holding) and the engine
        waiter.join(120)
        assert held and held[0][0] == "ok", held
        st = d.status()["frontdoor"]
        assert st["pid"] == door_pid and st["state"] == "serving"
        assert st["totals"]["refused"] == 0 and st["totals"]["cut"] == 0


def test_a_killed_front_door_is_started_again_serving(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config=_door("hold")) as d:
        first = d.status()["frontdoor"]["pid"]
        os.kill(first, signal.SIGKILL)  # the daemon's own front door

        def again() -> dict | None:
            fd = d.status()["frontdoor"]
            return fd if fd["pid"] not in (None, first) and fd.get("state") == "serving" else None

        fd = d.wait_for(again, 60, "a new front door, serving")
        assert fd["restarts"] == 1
        assert one_stream(d.server_url)[0] == "ok"


def test_standby_says_why_it_holds(tmp_path: Path) -> None:
    # no weight cache here: a second engine would load a second copy of the weights
    with DaemonHarness(tmp_path, config=_door("standby")) as d:
        fit = d.status()["frontdoor"]["standby"]
        assert fit["mode"] == "hold" and "weight cache" in fit["why"]
        r = d.ctl("profile", "set", "ring-ll", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        switch = json.loads(r.stdout)["switch"]
        assert switch["mode"] == "hold" and switch["standby"] == fit
        doctor = d.ctl("doctor", "--no-topology", timeout=120)
        assert f"front door: mode standby; {fit['why']}" in doctor.stdout, doctor.stdout


def _long_stream(url: str, started: threading.Event, out: list) -> None:
    """One streaming answer long enough to be in flight through a drain (the sim decodes
    about 64 tok/s at TP 2); `started` once its first bytes arrived, `out` its outcome."""
    u = urlsplit(url)
    body = json.dumps({"model": "sim", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 3000, "stream": True}).encode()  # fmt: skip
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.readline()
        started.set()
        while line := resp.readline():
            if line.strip() == b"data: [DONE]":
                out.append("ok")
                return
        out.append("cut")
    except (OSError, http.client.HTTPException) as exc:
        out.append(f"cut: {exc}")
    finally:
        started.set()
        conn.close()


def test_cancel_during_the_drain_is_honoured_at_once(tmp_path: Path) -> None:
    # a drain that would wait 10 minutes for the long stream; the cancel ends it at once and
    # the old engine, never stopped, serves on (the stream included)
    with DaemonHarness(tmp_path, config=_door("hold", drain_timeout_s=600)) as d:
        pid = d.status()["engine"]["pid"]
        started, streamed = threading.Event(), []
        stream = threading.Thread(target=_long_stream, args=(d.server_url, started, streamed))
        stream.start()
        assert started.wait(120) and not streamed, streamed
        switch: list = []
        t = threading.Thread(target=lambda: switch.append(d.ctl("profile", "set", "ring-ll",
                                                                "--json")))  # fmt: skip
        t.start()
        d.wait_for(lambda: (lambda fd: fd["state"] == "holding" and fd["in_flight"] == 1)(
            d.status()["frontdoor"]), 60, "the drain of the long stream")  # fmt: skip
        assert d.ctl("cancel").returncode == 0
        t.join(120)
        r = switch[0]
        still_streaming = not streamed  # the result came while the stream was in flight
        stream.join(300)
        assert still_streaming, "the cancelled switch waited for the drain"
        out = json.loads(r.stdout)
        assert out["result"] == "cancelled", r.stdout + r.stderr
        assert streamed == ["ok"]
        st = d.status()
        assert (st["state"], st["profile"], st["engine"]["pid"]) == ("READY", "nccl-default", pid)
        assert st["frontdoor"]["state"] == "serving"
        assert out["switch"]["cut"] == 0
        assert one_stream(d.server_url)[0] == "ok"


SLOW_START = """
import os, pathlib, time
gate = pathlib.Path(__file__).with_name("hold-frontdoor-start")
if os.environ.get("FASTVERIFY_FRONTDOOR_ID") and gate.exists():
    pathlib.Path(__file__).with_name("frontdoor-waiting").write_text(str(os.getpid()))
    while gate.exists():
        time.sleep(0.01)
"""


def test_a_front_door_restarted_while_the_engine_becomes_ready_serves_it(
    tmp_path: Path,
) -> None:
    # The front door is killed during a restart and its successor is kept at interpreter
    # start (a sitecustomize on its PYTHONPATH waits on a file this test removes) until the
    # engine is READY: the daemon's `serve` finds no control socket. The successor, started
    # holding, must still be told where the engine serves.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_START)
    gate, waiting = hook / "hold-frontdoor-start", hook / "frontdoor-waiting"
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(hook)])}
    with DaemonHarness(tmp_path, config=_door("hold"), sim_load_seconds=4, env=env) as d:
        restart = threading.Thread(target=lambda: d.ctl("restart"), daemon=True)
        restart.start()
        d.wait_for(lambda: d.status()["state"] == "STARTING", 60, "the new engine's start")
        gate.touch()
        os.kill(d.status()["frontdoor"]["pid"], signal.SIGKILL)  # the daemon's own front door
        d.wait_for(waiting.exists, 60, "the next front door, kept at its start")
        d.wait_for(lambda: "front door: serve failed" in d.log_text(), 60, "the lost serve")
        assert d.status()["state"] == "READY"
        gate.unlink()
        restart.join(120)
        fd = d.wait_for(
            lambda: (lambda f: f if f.get("state") == "serving" else None)(
                d.status()["frontdoor"]), 60, "the restarted front door serving")  # fmt: skip
        assert fd["pid"] == int(waiting.read_text())
        assert fd["port"] == int(d.status()["engine"]["url"].rsplit(":", 1)[1])
        assert one_stream(d.server_url)[0] == "ok"


def test_bench_reaches_the_front_door_and_a_switch_holds_it(tmp_path: Path) -> None:
    """`fastverifyctl bench` measures the server as its clients reach it: through the front
    door, so a switch during the bench holds its requests. (It went to the engine's internal
    port, around the door: the switch cut its streams, "peer closed connection".)"""
    with DaemonHarness(tmp_path, config=_door("hold")) as d:
        done: dict[str, object] = {}
        args = ("bench", "-c", "2", "-d", "8", "--warmup", "0", "--input-len", "16",
                "--output-len", "64", "--json")  # fmt: skip
        bench = threading.Thread(target=lambda: done.update(r=d.ctl(*args, timeout=300)))
        bench.start()
        try:
            d.wait_for(lambda: d.status()["frontdoor"].get("in_flight"), 120,
                       "the bench's requests in the front door")  # fmt: skip
            r = d.ctl("profile", "set", "ring-ll", "--json", timeout=120)
        finally:
            bench.join(300)
        assert r.returncode == 0, r.stdout + r.stderr
        b = done["r"]
        assert isinstance(b, subprocess.CompletedProcess)
        assert b.returncode == 0, b.stdout + b.stderr
        assert f"bench: {d.server_url} through the front door (hold)" in b.stderr, b.stderr
        result = json.loads(b.stdout)
        assert result["failed"] == 0 and result["completed"] >= 2, result
        switch = json.loads(r.stdout)["switch"]
        assert (switch["mode"], switch["cut"], switch["refused"]) == ("hold", 0, 0), switch
