"""Trace capture against a real daemon and sim engine: refused up front on an idle engine,
and a window that times out or is cancelled is stopped on the server (no `Profiling is
already in progress` afterwards) and leaves no directory."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fastverify.client import ApiError
from fastverify.exporters import sglang_metrics
from fastverify.exporters.hub import MetricsHub
from fastverify.exporters.runtime import CaptureError, ExporterRuntime
from tests.harness import DaemonHarness


@contextmanager
def traffic(d: DaemonHarness) -> Iterator[None]:
    """Closed-loop /generate requests until the block ends; yields once SGLang's gauge
    reports a running request."""
    stop = threading.Event()
    body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 64}}).encode()

    def load() -> None:
        while not stop.is_set():
            req = urllib.request.Request(
                d.server_url + "/generate", data=body, headers={"Content-Type": "application/json"}
            )
            urllib.request.urlopen(req, timeout=30).read()

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        d.wait_for(lambda: running(d) > 0, 20, "a running request")
        yield
    finally:
        stop.set()
        t.join(30)


def running(d: DaemonHarness) -> float:
    values = sglang_metrics.reduce(sglang_metrics.fetch(d.server_url))
    return values["num_running_reqs"] + values["num_queue_reqs"]


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
