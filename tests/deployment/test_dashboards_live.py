"""Every PromQL expression of every provisioned dashboard (panels and annotations), with
Grafana's variables substituted as Grafana would, evaluated against a real Prometheus
(Debian's) that scraped fastverifyd's exporter and the engine's own /metrics while the sim
engine served load in EAGLE-3 mode, after a rolled-back switch, a good switch and a recorded
baseline. Each must return data (finite values): a panel that can never show anything, a
misspelt metric or label, or a wrong unit conversion base fails here.

Every step waits for an event, never for a wall-clock window: the switch and restart
counters exist at 0 before the switches (the exporter publishes the label sets it knows) and
Prometheus has scraped that 0; the annotations' 1-minute expressions are evaluated at the
scrape that first saw each increment (plus 2 s), whatever the load did to the rest of the
test; the other panels are polled until their rate windows have data."""

from __future__ import annotations

import http.client
import json
import math
import re
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.support import prom
from tests.support.dashboards import DASHBOARDS, dashboard_exprs
from tests.support.harness import DaemonHarness
from tests.support.net import free_port

pytestmark = pytest.mark.skipif(
    not prom.available(),
    reason="NOT RUN: prometheus binary missing (Debian package prometheus, setup script)",
)

# What Grafana substitutes: "All" for the multi-value variables, and its interval macros.
GRAFANA_VARS = {
    "$__rate_interval": "30s",
    "$__interval": "5s",
    "$__range": "5m",
    "$profile": ".*",
    "$mode": ".*",
    "$weights": ".*",
}


def substitute(expr: str) -> str:
    for name in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARS[name])
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


class Load:
    """Closed-loop /generate clients against the engine; bounded by stop() and a deadline."""

    def __init__(self, url: str, clients: int = 4, deadline_s: float = 120) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.done = 0
        self._stop = threading.Event()
        self._deadline = time.monotonic() + deadline_s
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        body = json.dumps({"text": "dashboard load " * 16,
                           "sampling_params": {"max_new_tokens": 48}})  # fmt: skip
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
                if conn.getresponse().read() is not None:
                    self.done += 1
            except (OSError, http.client.HTTPException):
                time.sleep(0.2)  # the engine restarts during switches
            finally:
                conn.close()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(35)


# Counters that exist at 0 from the daemon's start (their label sets are known in advance).
ZERO_BEFORE = (
    'fastverify_profile_switches_total{result="ok"}',
    'fastverify_profile_switches_total{result="rolled_back"}',
    'fastverify_engine_restarts_total{reason="switch"}',
    'fastverify_switch_downtime_seconds_count{mode="hold"}',
)
# event -> (series, the value it reaches): a rolled-back and a good switch, two restarts
EVENTS = {
    "switches": ('fastverify_profile_switches_total{result="ok"}', 1),
    "restarts": ('fastverify_engine_restarts_total{reason="switch"}', 2),
    # both switches stopped the engine behind the front door: each one's downtime
    "downtime": ('fastverify_switch_downtime_seconds_count{mode="hold"}', 2),
}


def first_seen(p: prom.Prometheus, series: str, at_least: float, since: float) -> float:
    """Timestamp of the first scrape at which `series` had reached `at_least` (waits for
    Prometheus to have one)."""
    p.wait_for(f"{series} >= {at_least}", timeout=120)
    for r in p.query_range(series, since - 5, time.time() + 1, step=0.5):
        for t, v in r["values"]:
            if float(v) >= at_least:
                return float(t)
    raise AssertionError(f"{series} >= {at_least} now but not in its range: {since}")


def event_time(expr: str, seen: dict[str, float]) -> float | None:
    """Where an expression is about an event (the switch/restart annotations and stats),
    evaluate it 2 s after Prometheus first saw that event (or now, if sooner); else now."""
    for metric, event in (("fastverify_engine_restarts_total", "restarts"),
                          ("fastverify_profile_switches_total", "switches"),
                          ("fastverify_switch_downtime_seconds", "downtime"),
                          ("fastverify_switch_last_info", "downtime")):  # fmt: skip
        if metric in expr:
            return min(seen[event] + 2, time.time())
    return None


def has_data(rows: list[dict]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in rows)


@pytest.mark.slow
def test_every_dashboard_expression_returns_data(tmp_path: Path) -> None:
    exprs = sorted(
        {e for path in DASHBOARDS for e in dashboard_exprs(json.loads(path.read_text()))}
    )
    assert len(exprs) >= 20
    config = {
        # the weight cache's series exist (down: EAGLE-3 loads from disk) with auto
        "server": {"mode": "eagle3", "weight_cache": "auto"},
        "daemon": {"default_profile": "ring-ll", "trace_period_s": 2, "trace_steps": 3},
        # the front door's panels: the load is held through the two switches
        "frontdoor": {"mode": "hold", "engine_port": free_port()},
    }
    with DaemonHarness(tmp_path, sim_load_seconds=0.3, tp_size=2, config=config) as d:
        engine = urllib.parse.urlsplit(d.server_url).netloc
        sglang_job = (
            "  - job_name: sglang\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
            f"    static_configs:\n      - targets: [{json.dumps(engine)}]\n"
        )
        exporter = urllib.parse.urlsplit(d.metrics_url).netloc
        with prom.Prometheus(tmp_path, [exporter], extra_scrape_configs=[sglang_job]) as p:
            load = Load(d.server_url)
            try:
                p.wait_for("fastverify_up == 1", timeout=20)
                # The counters the annotations read exist at 0 before anything happens, and
                # Prometheus has scraped that 0: the increments below are increases it sees.
                for series in ZERO_BEFORE:
                    p.wait_for(f"{series} == 0", timeout=30)
                t_switches = time.time()
                rolled = d.ctl("profile", "set", "tree-ll", timeout=60)
                assert rolled.returncode != 0  # Tree + CUDA graphs: rolled back
                ok = d.ctl("profile", "set", "ring-simple", timeout=60)
                assert ok.returncode == 0, ok.stderr
                d.client.post(
                    "/v1/baselines",
                    {
                        "profile": "ring-simple",
                        "tokens_per_second": 82.0,
                        "per_request_tokens_per_second": 82.0,
                        "concurrency": 4,
                    },
                )  # concurrency 4: the Load's clients
                # When Prometheus first saw each event (a scrape's own timestamp): the
                # annotations (1-minute windows) are evaluated just after it, however long
                # the rest of the test takes on a busy machine.
                seen = {what: first_seen(p, series, at_least, t_switches)
                        for what, (series, at_least) in EVENTS.items()}  # fmt: skip
                # profile windows of the profile now serving (ring-ll's series exist from
                # before the switches): at least two, so a rate over them has data
                p.wait_for(
                    'fastverify_verify_cycle_seconds_count{profile="ring-simple"}',
                    lambda rows: any(float(r["value"][1]) >= 6 for r in rows),
                    timeout=90,
                )
                missing: dict[str, object] = {}
                pending = list(exprs)
                # until every panel has data (rate windows fill as scrapes arrive)
                deadline = time.monotonic() + 120
                while pending and time.monotonic() < deadline:
                    for expr in list(pending):
                        at = event_time(expr, seen)
                        rows = p.query(substitute(expr), at=at)
                        if has_data(rows):
                            pending.remove(expr)
                        else:
                            missing[expr] = {"at": at, "rows": rows}
                    if pending:
                        time.sleep(0.5)  # between polls
                assert load.done > 0
            finally:
                load.stop()
        assert not pending, {e: missing[e] for e in pending}


def test_substitution_covers_every_variable_the_dashboards_use() -> None:
    used = set()
    for path in DASHBOARDS:
        for expr in dashboard_exprs(json.loads(path.read_text())):
            used |= set(re.findall(r"\$\w+", expr))
    assert used <= set(GRAFANA_VARS), used - set(GRAFANA_VARS)
