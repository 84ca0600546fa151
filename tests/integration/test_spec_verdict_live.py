"""The speculation verdict on a real daemon + sim, benched by the real `fastverifyctl`:
a baseline measured with 1 request and EAGLE-3 run with 2 give no
verdict (or one matched to a 1-request reading), never two gauges that disagree; a
baseline measured with 2 requests gives the matched verdict; the live break-even agrees
with the rates bench measures."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.harness import DaemonHarness

BENCH = ("--output-len", "48", "--input-len", "32", "--json")


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _one(m: dict, name: str) -> tuple[dict[str, str], float] | None:
    rows = m.get(name) or []
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def _bench(d: DaemonHarness, concurrency: int, duration: float, *extra: str) -> dict[str, Any]:
    r = d.ctl("bench", "-c", str(concurrency), "--duration", str(duration), *BENCH, *extra,
              timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _post(d: DaemonHarness, result: dict[str, Any], concurrency: int) -> None:
    d.client.post("/v1/baselines", {
        "profile": "nccl-default", "concurrency": concurrency,
        "tokens_per_second": result["output_tokens_per_second"],
        "per_request_tokens_per_second": result["per_request_tokens_per_second"],
    })  # fmt: skip


def _check_agreement(m: dict, seen: list[dict[str, Any]]) -> None:
    """What one scrape says about speculation must be one verdict."""
    be, sp = (_one(m, "fastverify_spec_breakeven_accept_length"),
              _one(m, "fastverify_spec_speedup_estimate"))  # fmt: skip
    accept = _one(m, "fastverify_spec_accept_length")
    assert (be is None) == (sp is None), (be, sp)
    if be is None:
        return
    assert accept is not None
    assert be[0]["concurrency"] == sp[0]["concurrency"]
    assert (sp[1] > 1.0) == (accept[1] > be[1]), (accept, be, sp)
    seen.append({"concurrency": be[0]["concurrency"], "accept": accept[1], "breakeven": be[1],
                 "speedup": sp[1]})  # fmt: skip


def test_baseline_at_one_request_eagle3_at_two(tmp_path: Path) -> None:
    # no profile windows: the verdict comes from decode readings, never from a trace
    with DaemonHarness(tmp_path, tp_size=2, config={"daemon": {"trace_period_s": 0}}) as d:
        base1 = _bench(d, 1, 3.0, "--record-baseline")  # what a user types
        rec = d.client.get("/v1/baselines")["nccl-default"]
        assert rec["concurrency"] == 1
        assert rec["per_request_tokens_per_second"] == base1["per_request_tokens_per_second"]
        base2 = _bench(d, 2, 3.0)  # measured now, recorded later
        r = d.ctl("mode", "set", "eagle3", "-q", timeout=60)
        assert r.returncode == 0, r.stderr
        # an EAGLE-3 run is no baseline: refused before any load
        r = d.ctl("bench", "-c", "2", "--duration", "1", "--record-baseline", timeout=60)
        assert r.returncode == 2 and "baseline mode with real weights" in r.stderr, r.stderr

        done: list[Any] = []
        load = threading.Thread(target=lambda: done.append(_bench(d, 2, 25.0)), daemon=True)
        load.start()
        seen: list[dict[str, Any]] = []
        two_running = 0  # scrapes whose reading had EAGLE-3 decoding 2 requests
        while load.is_alive() and two_running < 8:
            m = _scrape(d.metrics_url)
            _check_agreement(m, seen)
            running = _one(m, "fastverify_running_requests")
            if running and running[1] == 2 and _one(m, "fastverify_spec_accept_length"):
                two_running += 1
            time.sleep(0.3)
        assert two_running >= 8, "the 2-client load never showed 2 running requests"
        # only a reading of 1 request may be compared with the 1-request baseline
        assert all(v["concurrency"] == "1" for v in seen), seen

        _post(d, base2, 2)
        matched: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while not any(v["concurrency"] == "2" for v in matched):
            assert load.is_alive() or done, "the load ended"
            assert time.monotonic() < deadline, f"no verdict at 2 requests: {matched}"
            _check_agreement(_scrape(d.metrics_url), matched)
            time.sleep(0.3)
        load.join(60)
        v = next(v for v in matched if v["concurrency"] == "2")
        # the matched verdict is the per-request comparison at 2 requests
        assert v["speedup"] == v["accept"] / v["breakeven"]
        print("verdict at 2 requests:", v, "baseline per request:",
              base2["per_request_tokens_per_second"])  # fmt: skip


def test_the_live_break_even_agrees_with_the_measured_rates(tmp_path: Path) -> None:
    """The live gauge's cycle is decode-only (SGLang's inter-token latency), like
    bench's and sweep's per-request rates: during an EAGLE-3 bench at 1 request, the live
    speedup estimate is that bench's per-request rate over the baseline recorded at 1
    request (before: the decode log's throughput counted prefill, 0.79-0.97 against 1.05)."""
    import statistics
    import threading

    from prometheus_client.parser import text_string_to_metric_families

    lengths = ("--output-len", "64", "--input-len", "64")
    with DaemonHarness(tmp_path, sim_load_seconds=0.3,
                       config={"daemon": {"trace_period_s": 0}}) as d:  # fmt: skip
        sw = d.ctl("sweep", "nccl-default", "--repeats", "2", "--duration", "3", *lengths,
                   "--then-eagle3", "1", "--no-plot", "--json", "--output",
                   str(tmp_path / "sw"), timeout=600)  # fmt: skip
        assert sw.returncode == 0, sw.stderr[-2000:]
        base = d.client.get("/v1/baselines")["nccl-default"]["by_concurrency"]["1"]
        assert d.ctl("mode", "set", "eagle3").returncode == 0
        got: dict[str, Any] = {}

        def load() -> None:
            got["bench"] = d.ctl("bench", "-c", "1", "--duration", "8", *lengths, "--json",
                                 timeout=300)  # fmt: skip

        t = threading.Thread(target=load)
        t.start()
        seen: list[float] = []
        while t.is_alive():
            text = httpx.get(d.metrics_url, timeout=10).text
            for fam in text_string_to_metric_families(text):
                seen += [s.value for s in fam.samples
                         if s.name == "fastverify_spec_speedup_estimate"
                         and s.labels.get("concurrency") == "1"]  # fmt: skip
            t.join(0.5)
        bench = json.loads(got["bench"].stdout)
    measured = bench["per_request_tokens_per_second"] / base["per_request_tokens_per_second"]
    assert len(seen) >= 3, seen
    live = statistics.median(seen[len(seen) // 3 :])  # past the first polls of the load
    assert live == pytest.approx(measured, rel=0.10), (live, measured, seen)
