"""Every PromQL expression of every provisioned dashboard (panels and annotations), with
Grafana's variables substituted as Grafana would, evaluated against a real Prometheus
(Debian's) that scraped fastverifyd's exporter and the engine's own /metrics while the sim
engine served load in EAGLE-3 mode, after a rolled-back switch, a good switch and a recorded
baseline. Each must return data (finite values): a panel that can never show anything, a
misspelt metric or label, or a wrong unit conversion base fails here."""

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

from tests import prom
from tests.harness import DaemonHarness

from .test_static import DASHBOARDS, dashboard_exprs

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


def has_data(rows: list[dict]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in rows)


@pytest.mark.slow
def test_every_dashboard_expression_returns_data(tmp_path: Path) -> None:
    exprs = sorted(
        {e for path in DASHBOARDS for e in dashboard_exprs(json.loads(path.read_text()))}
    )
    assert len(exprs) >= 20
    config = {
        "server": {"mode": "eagle3"},
        "daemon": {"default_profile": "ring-ll", "trace_period_s": 2, "trace_steps": 3},
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
                )  # the Load's 4 clients
                # Several profile windows and a rate window of steady load.
                # profile windows of the profile now serving (ring-ll's series exist from
                # before the switches): at least two, so a rate over them has data
                p.wait_for(
                    'fastverify_verify_cycle_seconds_count{profile="ring-simple"}',
                    lambda rows: any(float(r["value"][1]) >= 6 for r in rows),
                    timeout=90,
                )
                time.sleep(12)
                missing = {}
                deadline = time.monotonic() + 30
                pending = list(exprs)
                while pending and time.monotonic() < deadline:
                    for expr in list(pending):
                        rows = p.query(substitute(expr))
                        if has_data(rows):
                            pending.remove(expr)
                        else:
                            missing[expr] = rows
                    time.sleep(1)
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
