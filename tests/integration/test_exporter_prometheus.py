"""Done-when for the exporter: a real Prometheus (Debian's `prometheus`) scrapes fastverifyd's
exporter every second while the sim engine serves streaming load in EAGLE-3 mode.

- the metric families are present in Prometheus;
- a profile window (`fastverifyctl trace capture`) yields fastverify_allreduce_per_verify
  == 122 (the sim's 61 layers x 2 all-reduces; draft forwards excluded);
- the exporter's tokens/s is within 2% of the rate this test's own client measured from
  the tokens it received over the same window;
- break-even and speedup gauges are absent without a baseline and appear with one;
- fastverify_profile_info switches label when the profile switches.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse

import pytest

from tests.support import prom
from tests.support.harness import DaemonHarness

pytestmark = pytest.mark.skipif(
    not prom.available(),
    reason="prometheus binary not found (Debian package `prometheus`, "
    "listed in scripts/debian-packages.txt)",
)


class StreamingLoad:
    """Closed-loop streaming clients against SGLang's /generate; records (time, tokens)."""

    def __init__(self, url: str, clients: int = 6, max_new_tokens: int = 100_000) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.clients = clients
        self.max_new_tokens = max_new_tokens
        self.events: list[tuple[float, int]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def start(self) -> StreamingLoad:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)

    def tokens_between(self, t0: float, t1: float) -> int:
        with self._lock:
            return sum(n for t, n in self.events if t0 <= t < t1)

    def _run(self) -> None:
        while not self._stop.is_set():
            conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
            try:
                body = {"text": "benchmark prompt " * 8, "stream": True,
                        "sampling_params": {"max_new_tokens": self.max_new_tokens}}  # fmt: skip
                conn.request("POST", "/generate", json.dumps(body),
                             {"Content-Type": "application/json"})  # fmt: skip
                resp = conn.getresponse()
                seen = 0
                while not self._stop.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                        continue
                    done = json.loads(line[6:])["meta_info"]["completion_tokens"]
                    if done > seen:
                        with self._lock:
                            self.events.append((time.time(), done - seen))
                        seen = done
            except (OSError, http.client.HTTPException, ValueError) as exc:
                if not self._stop.is_set():
                    self.errors.append(repr(exc))
                    time.sleep(0.2)
            finally:
                conn.close()


def _target(metrics_url: str) -> str:
    return urllib.parse.urlsplit(metrics_url).netloc


def test_prometheus_sees_the_verify_diagnosis_live(tmp_path) -> None:
    config = {
        "server": {"mode": "eagle3"},
        "daemon": {"default_profile": "ring-ll", "trace_period_s": 0, "trace_steps": 3},
    }
    with DaemonHarness(tmp_path, sim_load_seconds=0.3, tp_size=2, config=config) as d:
        status = d.status()
        assert (status["profile"], status["mode"]) == ("ring-ll", "eagle3"), status
        with prom.Prometheus(tmp_path, [_target(d.metrics_url)]) as p:
            load = StreamingLoad(d.server_url).start()
            try:
                _run_checks(d, p, load)
            finally:
                load.stop()


def _run_checks(d: DaemonHarness, p: prom.Prometheus, load: StreamingLoad) -> None:
    p.wait_for("fastverify_up == 1", timeout=20)
    # a profile window through the CLI -> per-rank analysis -> exporter -> Prometheus
    run = d.ctl("trace", "capture", "--steps", "3", "--json", timeout=60)
    assert run.returncode == 0, run.stderr
    ranks = json.loads(run.stdout)["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["allreduce_per_verify"] == 122 for r in ranks), ranks
    rows = p.wait_for("fastverify_allreduce_per_verify", lambda r: len(r) == 1, timeout=15)
    assert float(rows[0]["value"][1]) == 122.0
    assert rows[0]["metric"]["profile"] == "ring-ll" and rows[0]["metric"]["mode"] == "eagle3"

    # every family of the design's table (and the derived ones) is in Prometheus
    for series in (
        "fastverify_up", "fastverify_profile_info", "fastverify_generation_tokens_per_second",
        "fastverify_spec_accept_length", "fastverify_spec_cycle_seconds",
        "fastverify_verify_cycle_seconds_bucket", "fastverify_verify_cycle_seconds_count",
        "fastverify_allreduce_per_verify", "fastverify_allreduce_seconds_per_verify",
        "fastverify_allreduce_calls_total", "fastverify_profile_switches_total",
        "fastverify_engine_start_seconds",
    ):  # fmt: skip
        assert p.wait_for(series, timeout=10), series
    assert p.value('fastverify_allreduce_calls_total{source="trace"}') >= 3 * 122
    assert p.value("fastverify_verify_cycle_seconds_count") == 3
    share = p.value("fastverify_allreduce_verify_share_ratio")
    assert 0 < share < 1
    # no baseline recorded: the comparisons are absent, not zero
    assert p.query("fastverify_spec_breakeven_accept_length") == []
    assert p.query("fastverify_spec_speedup_estimate") == []

    # tokens/s: the exporter's gauge vs what the client received over the same 10 s
    time.sleep(max(0.0, 12.0 - _load_age(load)))  # a full rate window of steady load
    t1 = time.time()
    gauge = p.value("fastverify_generation_tokens_per_second", at=t1)
    window = 10.0
    # the gauge is the rate over the exporter's last 10 s of polls as of its newest poll,
    # which Prometheus scraped within the last second: align our window with it
    lag = _poll_lag(p, t1)
    client = load.tokens_between(t1 - lag - window, t1 - lag) / window
    assert client > 0
    assert abs(gauge - client) / client < 0.02, (gauge, client, lag)

    # with a baseline for this profile at the load's concurrency the comparisons appear
    # (the load's 6 requests never finish: SGLang runs 6 at every reading)
    d.client.post("/v1/baselines", {"profile": "ring-ll", "tokens_per_second": 6 * 82.0,
                                    "per_request_tokens_per_second": 82.0,
                                    "concurrency": 6})  # fmt: skip
    breakeven = p.wait_for("fastverify_spec_breakeven_accept_length", timeout=10)
    assert breakeven[0]["metric"]["concurrency"] == "6"
    cycle = p.value("fastverify_spec_cycle_seconds")
    assert float(breakeven[0]["value"][1]) == pytest.approx(cycle * 82.0, rel=0.2)
    assert p.wait_for("fastverify_spec_speedup_estimate", timeout=10)
    assert p.wait_for('fastverify_baseline_age_seconds{profile="ring-ll"}', timeout=10)

    assert load.errors == [], load.errors[:3]  # (the switch below restarts the engine)
    print(f"tok/s exporter {gauge:.2f} client {client:.2f} lag {lag:.2f}s")

    # the profile switch shows in the info metric's labels
    run = d.ctl("profile", "set", "ring-simple", timeout=60)
    assert run.returncode == 0, run.stderr
    rows = p.wait_for('fastverify_profile_info{profile="ring-simple"}', timeout=20)
    labels = rows[0]["metric"]
    assert labels["mode"] == "eagle3" and labels["nccl_proto"] == "Simple", labels
    assert p.query('fastverify_profile_info{profile="ring-ll"}') == []
    assert p.wait_for('fastverify_profile_switches_total{result="ok"} >= 1', timeout=10)


def _load_age(load: StreamingLoad) -> float:
    with load._lock:
        return time.time() - load.events[0][0] if load.events else 0.0


def _poll_lag(p: prom.Prometheus, at: float) -> float:
    """Seconds between `at` and the exporter's newest poll it reflected (<= 1 poll + scrape)."""
    rows = p.query("timestamp(fastverify_generation_tokens_total)", at=at)
    scraped = float(rows[0]["value"][1]) if rows else at
    return max(0.0, at - scraped) + 0.5  # half a poll interval on average
