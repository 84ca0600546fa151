"""Trace capture against a real daemon and sim engine: refused up front on an idle engine,
and a window that times out or is cancelled is stopped on the server (no `Profiling is
already in progress` afterwards) and leaves no directory."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from fastverify.client import ApiError
from fastverify.exporters.hub import MetricsHub
from fastverify.exporters.runtime import CaptureError, ExporterRuntime
from tests.support.harness import DaemonHarness
from tests.support.traffic import running, traffic


def windows(d: DaemonHarness) -> list[Path]:
    return sorted((d.state_dir / "traces").glob("window-*"))


def test_capture_on_an_idle_engine_is_409_at_once_and_leaves_nothing(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config={"daemon": {"trace_period_s": 0}}) as d:
        d.wait_for(lambda: running(d) == 0, 20, "an idle engine")
        with pytest.raises(ApiError) as err:
            d.client.post("/v1/trace/capture", {"steps": 3})
        assert err.value.status == 409, err.value.body
        assert "idle" in err.value.body["error"] and "traffic" in err.value.body["error"]
        assert windows(d) == []
        r = d.ctl("trace", "capture")
        assert r.returncode != 0 and "idle" in r.stderr + r.stdout, r.stdout + r.stderr
        with traffic(d):
            res = d.client.post("/v1/trace/capture", {"steps": 3}, timeout=120)
        assert res["steps"] == 3 and len(res["ranks"]) == 2
        assert [w.name for w in windows(d)] == [Path(res["window"]).name]


@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_an_abandoned_window_is_stopped_on_the_server_and_removed(tmp_path: Path, how: str) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        d.wait_for(lambda: running(d) == 0, 20, "an idle engine")
        traces = tmp_path / "traces"
        # The traffic check is what refuses an idle engine; skip it to reach the wait.
        rt = ExporterRuntime(MetricsHub(), "", d.server_url, traces, 0, 3,
                             capture_timeout_s=1.0 if how == "timeout" else 600.0,
                             expected_ranks=2)  # fmt: skip
        windows_seen = threading.Event()

        def cancelled() -> bool:
            present = any(traces.glob("window-*"))
            if present:
                windows_seen.set()
            return how == "cancel" and present

        with pytest.raises(CaptureError) as err:
            rt.capture(3, cancelled, require_traffic=False)
        msg = str(err.value)
        assert windows_seen.is_set()
        assert ("cancelled" if how == "cancel" else "no complete trace") in msg, msg
        assert "profiling stopped on the server" in msg and "removed" in msg, msg
        assert list(traces.iterdir()) == []
        # The server is not left profiling: the next window (under load) works.
        rt.capture_timeout_s = 120.0
        with traffic(d):
            analysis = rt.capture(3)
        assert len(analysis["ranks"]) == 2
        assert "already in progress" not in d.log_text()


class PacedLoad:
    """`clients` closed-loop clients, each holding about `tokens_per_s` (a request of
    `max_new_tokens`, then the rest of its time slot idle): the engine's batch empties
    between requests, so one sample of SGLang's running-requests gauge often reads 0 while
    traffic flows (100 tok/s at concurrency 2)."""

    def __init__(self, url: str, clients: int = 2, tokens_per_s: float = 50.0,
                 max_new_tokens: int = 32) -> None:  # fmt: skip
        self.url = url
        self.slot_s = max_new_tokens / tokens_per_s
        params = {"max_new_tokens": max_new_tokens}
        self.body = json.dumps({"text": "steady load", "sampling_params": params}).encode()
        self.done = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            req = urllib.request.Request(self.url + "/generate", data=self.body,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
            urllib.request.urlopen(req, timeout=60).read()
            self.done += 1
            self.stop.wait(max(0.0, self.slot_s - (time.monotonic() - t0)))  # pacing

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


@pytest.mark.slow
def test_capture_under_steady_load_is_accepted_every_time_and_refused_when_idle(
    tmp_path: Path,
) -> None:
    """Sim at TP 8 in EAGLE-3 mode, background windows on (the sim's default period): five
    captures during paced load at concurrency 2 are all accepted (through the API and
    `fastverifyctl trace capture`), whatever the running-requests gauge read at the moment;
    the same engine idle, before and after the load, is refused."""
    with DaemonHarness(tmp_path, tp_size=8, config={"server": {"mode": "eagle3"}}) as d:
        d.wait_for(lambda: running(d) == 0, 60, "an idle engine")
        with pytest.raises(ApiError) as err:
            d.client.post("/v1/trace/capture", {"steps": 5}, timeout=120)
        assert err.value.status == 409 and "idle" in err.value.body["error"], err.value.body
        load = PacedLoad(d.server_url)
        try:
            d.wait_for(lambda: load.done >= 4, 120, "four finished requests")
            accepted = []
            for i in range(5):
                if i % 2:
                    r = d.ctl("trace", "capture", "--steps", "5", "--json", timeout=300)
                    assert r.returncode == 0, r.stdout + r.stderr
                    res = json.loads(r.stdout)  # the public view: ranks only
                else:
                    res = d.client.post("/v1/trace/capture", {"steps": 5}, timeout=300)
                    assert res["steps"] == 5, res
                assert len(res["ranks"]) == 8, res
                accepted.append(res)
            assert len(accepted) == 5
        finally:
            load.close()
        d.wait_for(lambda: running(d) == 0, 60, "the engine idle again")
        with pytest.raises(ApiError) as err:
            d.client.post("/v1/trace/capture", {"steps": 5}, timeout=120)
        assert err.value.status == 409 and "idle" in err.value.body["error"], err.value.body


def test_periodic_windows_on_an_idle_engine_are_skipped_without_a_warning(
    tmp_path: Path,
) -> None:
    """An idle engine's periodic profile windows (trace_period_s) are skipped as idle, a DEBUG
    line each: the daemon's own liveness checks (a 1-token /health_generate every second
    here) are not traffic, so no window starts, waits out its capture timeout and logs a
    WARNING."""
    cfg = {"daemon": {"trace_period_s": 1, "log_level": "debug"}, "watch": {"interval_s": 1}}
    skipped = "profile window skipped: the engine is idle"
    with DaemonHarness(tmp_path, config=cfg) as d:
        d.wait_for(lambda: d.log_text().count(skipped) >= 1, 90, "a first window skipped")
        checks = d.status()["engine"]["health"]["checks"]
        d.wait_for(lambda: d.log_text().count(skipped) >= 4, 90, "three more windows skipped")
        assert d.status()["engine"]["health"]["checks"] > checks  # the watch kept checking
        log = d.log_text()
        assert not [x for x in log.splitlines() if "WARNING" in x and "window" in x], log
        assert windows(d) == []  # none was started
