"""ExporterRuntime against a real HTTP SGLang stand-in: /metrics polling, profile windows
(start_profile -> wait for complete per-rank files -> analysis -> hub), pruning, errors."""

from __future__ import annotations

import http.client
import time
from pathlib import Path

import pytest

from fastverify.exporters import sglang_metrics
from fastverify.exporters.hub import MetricsHub
from fastverify.exporters.runtime import CaptureError, CaptureRefused, ExporterRuntime
from tests.fixtures.sglang_stub import SGLangStub


@pytest.fixture
def stub():
    s = SGLangStub(tp_size=2).start()
    s.values["num_running_reqs"] = 3.0  # serving: a window has steps to record
    yield s
    s.stop()


def _get(url: str) -> str:
    host, port = url.split("//")[1].split("/")[0].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return text


def test_reduce_reads_lowest_tp_rank_and_sums_counters(stub: SGLangStub) -> None:
    stub.values.update(gen_throughput=82.5, num_running_reqs=3, spec_accept_length=2.1,
                       generation_tokens_total=1234)  # fmt: skip
    values = sglang_metrics.reduce(sglang_metrics.fetch(stub.url))
    assert values["gen_throughput"] == 82.5  # TP0's, not the sum over 2 ranks
    assert values["num_running_reqs"] == 3
    assert values["spec_accept_length"] == 2.1
    assert values["generation_tokens_total"] == 1234
    with pytest.raises(sglang_metrics.MetricsFetchError, match="HTTP 404"):
        sglang_metrics.fetch(stub.url + "/nope")


def test_fetch_errors_are_actionable() -> None:
    with pytest.raises(sglang_metrics.MetricsFetchError, match=r"127\.0\.0\.1:1/metrics"):
        sglang_metrics.fetch("http://127.0.0.1:1", timeout=1)


def test_capture_window_end_to_end(stub: SGLangStub, tmp_path: Path) -> None:
    hub = MetricsHub()
    hub.set_engine(True, "ring-ll", "eagle3", {}, "sim", stub.url)
    rt = ExporterRuntime(hub, "127.0.0.1:0", stub.url, tmp_path / "traces", 0, 5,
                         keep_windows=2, expected_ranks=2, capture_timeout_s=20)  # fmt: skip
    rt.start()
    try:
        t0 = time.monotonic()
        analysis = rt.capture(7)
        assert time.monotonic() - t0 >= 0.5  # waited for the slowly written files
        assert stub.profile_requests[-1]["num_steps"] == 7
        assert stub.profile_requests[-1]["with_stack"] is False  # small traces, low overhead
        assert Path(stub.profile_requests[-1]["output_dir"]).parent == tmp_path / "traces"
        assert [r["rank"] for r in analysis["ranks"]] == [0, 1]
        assert all(r["allreduce_per_verify"] == 122 for r in analysis["ranks"])
        assert analysis["steps"] == 7
        text = _get(rt.metrics_url)
        assert 'fastverify_allreduce_per_verify{mode="eagle3",profile="ring-ll"} 122.0' in text
        assert "fastverify_verify_cycle_seconds_count" in text
        for _ in range(2):
            rt.capture(3)
        windows = sorted(p.name for p in (tmp_path / "traces").iterdir())
        assert len(windows) == 2  # older windows deleted
    finally:
        rt.stop()
    assert (tmp_path / "traces").exists()  # a given trace dir is not ours to delete


def test_capture_failures(stub: SGLangStub, tmp_path: Path) -> None:
    hub = MetricsHub()
    rt = ExporterRuntime(hub, "", None, tmp_path, 0, 5, capture_timeout_s=1.0)
    with pytest.raises(CaptureError, match="no engine is serving"):
        rt.capture(5)
    rt.set_server_url(stub.url)
    stub.profile_status = 503
    with pytest.raises(CaptureError, match="HTTP 503"):
        rt.capture(5)
    stub.profile_status = 200
    stub.write_traces = False
    with pytest.raises(CaptureError, match="is it receiving requests"):
        rt.capture(5)
    text = "".join(f"{k}={v}" for k, v in hub.traces.windows().items())
    assert text == "failed=2"  # the empty-URL refusal is not a window


def test_poller_feeds_hub_and_survives_engine_down(stub: SGLangStub) -> None:
    hub = MetricsHub()
    rt = ExporterRuntime(hub, "", stub.url, None, 0, 5, poll_interval_s=0.1)
    rt.start()
    try:
        stub.values.update(gen_throughput=50.0, generation_tokens_total=100)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and hub.decode.tokens_total() != {("", ""): 100}:
            time.sleep(0.05)
        assert hub.up is True
        rt.set_server_url("http://127.0.0.1:1")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and hub.up:
            time.sleep(0.05)
        assert hub.up is False
    finally:
        rt.stop()


def test_capture_falls_back_to_the_bare_body_on_old_releases(
    stub: SGLangStub, tmp_path: Path
) -> None:
    stub.reject_extended = True
    hub = MetricsHub()
    rt = ExporterRuntime(hub, "", stub.url, tmp_path, 0, 4, expected_ranks=2,
                         capture_timeout_s=20)  # fmt: skip
    analysis = rt.capture()
    assert [sorted(b) for b in stub.profile_requests] == [
        ["activities", "num_steps", "output_dir", "record_shapes", "with_stack"],
        ["num_steps", "output_dir"],
    ]
    assert analysis["steps"] == 4 and len(analysis["ranks"]) == 2


def test_capture_on_an_idle_engine_is_refused_before_anything_starts(
    stub: SGLangStub, tmp_path: Path
) -> None:
    stub.values["num_running_reqs"] = 0.0
    hub = MetricsHub()
    rt = ExporterRuntime(hub, "", stub.url, tmp_path, 0, 5, capture_timeout_s=30,
                         traffic_window_s=1.0, traffic_poll_s=0.1)  # fmt: skip
    with pytest.raises(CaptureRefused, match=r"idle .*no forward pass.*send traffic"):
        rt.capture(5)
    assert stub.metrics_requests >= 2  # evidence read over the window, not one sample
    assert stub.profile_requests == [] and list(tmp_path.iterdir()) == []
    assert hub.traces.windows() == {}  # not a failed window
    stub.values["num_queue_reqs"] = 2.0  # queued requests will run: not idle
    assert rt.capture(5)["steps"] == 5


def test_counters_that_move_are_traffic_though_the_gauges_read_zero(
    stub: SGLangStub, tmp_path: Path
) -> None:
    """Between two batches SGLang's gauges read 0 (refreshed at log intervals); tokens that
    keep being counted are traffic: the window starts."""
    stub.values["num_running_reqs"] = 0.0

    def serve(s: SGLangStub) -> None:  # a request finishes between two reads
        s.values["generation_tokens_total"] += 32

    stub.on_metrics = serve
    rt = ExporterRuntime(MetricsHub(), "", stub.url, tmp_path, 0, 5, capture_timeout_s=30,
                         expected_ranks=2, traffic_window_s=30.0, traffic_poll_s=0.1)  # fmt: skip
    assert rt.capture(5)["steps"] == 5
    assert stub.metrics_requests >= 2 and len(stub.profile_requests) == 1


def test_no_activity_counter_means_no_refusal(stub: SGLangStub, tmp_path: Path) -> None:
    """A server that publishes no counter to watch gives no evidence of idleness: the window
    is tried (its own timeout applies), never refused on the gauges alone."""
    stub.values["num_running_reqs"] = 0.0
    stub.counters = False
    rt = ExporterRuntime(MetricsHub(), "", stub.url, tmp_path, 0, 5, capture_timeout_s=30,
                         expected_ranks=2, traffic_window_s=30.0, traffic_poll_s=0.1)  # fmt: skip
    assert rt.capture(5)["steps"] == 5
    assert stub.metrics_requests == 1


def test_a_failed_window_leaves_no_directory(stub: SGLangStub, tmp_path: Path) -> None:
    stub.write_traces = False
    (tmp_path / "window-old-empty").mkdir()  # left by an older version
    rt = ExporterRuntime(MetricsHub(), "", stub.url, tmp_path, 0, 5, capture_timeout_s=0.5)
    rt.start()
    try:
        assert list(tmp_path.iterdir()) == []  # start-up removed the empty window
        with pytest.raises(CaptureError, match="removed"):
            rt.capture(5)
        assert list(tmp_path.iterdir()) == []
    finally:
        rt.stop()


def test_a_capture_waits_for_a_window_in_progress_when_asked(tmp_path: Path) -> None:
    """The daemon's API capture waits (`wait_s`) for a background window instead of refusing;
    without `wait_s` a second window at once is refused and nothing of it starts."""
    import threading

    stub = SGLangStub(tp_size=2, profile_delay_s=1.5).start()
    try:
        stub.values["num_running_reqs"] = 2.0
        rt = ExporterRuntime(MetricsHub(), "", stub.url, tmp_path, 0, 3, capture_timeout_s=30,
                             expected_ranks=2)  # fmt: skip
        first: dict = {}
        t = threading.Thread(target=lambda: first.update(rt.capture(3)))
        t.start()
        deadline = time.monotonic() + 20
        while not stub.profile_requests and time.monotonic() < deadline:  # window 1 runs
            time.sleep(0.05)
        assert len(stub.profile_requests) == 1
        with pytest.raises(CaptureRefused, match="another profile window"):
            rt.capture(3)
        assert len(stub.profile_requests) == 1  # the refused one started nothing
        second = rt.capture(3, wait_s=30)
        t.join(30)
        assert first["steps"] == 3 and second["steps"] == 3
        assert len(stub.profile_requests) == 2 and first["window"] != second["window"]
    finally:
        stub.stop()
