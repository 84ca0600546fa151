"""The sim playing SGLang 0.5.17 at TP 1 against what a real SGLang 0.5.17 printed on an H200
(tests/fixtures/sglang-0.5.17-h200/, written by benchmarks/gpu/real_sglang.py): the start's
milestones in the same order with the same fields, the same line prefix, the startup
timings line, and /health answering after SGLang's poll as the real one does.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest

from fastverify.sglang import loglines
from tests.support.sim import SimProcess

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "sglang-0.5.17-h200"
PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")  # TP 1: no " TP0"
PLAIN = ("Load weight begin.", "Load weight end.", "KV Cache is allocated.", "Memory pool end.")


def milestones(lines: list[str]) -> list[tuple]:
    """The start's milestones: each a kind and, for a capture line, its role, phase, event
    and the fields it carries (0.5.17: `bs` on the decode begin line, not on its end)."""
    out: list[tuple] = []
    for ln in lines:
        plain = next((p for p in PLAIN if p in ln), None)
        if plain:
            out.append((plain,))
            continue
        rec = loglines.parse_sglang_line(ln)
        if rec is None:
            continue
        if rec["kind"] == "capture_progress" and rec.get("event"):
            fields = tuple(sorted(k for k, v in rec.items() if v is not None and k != "ts"))
            out.append((rec["role"], rec["phase"], rec["event"], fields))
        elif rec["kind"] in ("ready", "startup_timings"):
            out.append((rec["kind"],))
    return out


def prefixes_ok(lines: list[str]) -> list[str]:
    """The milestone lines whose prefix is not SGLang's TP-1 form."""
    marks = (*PLAIN, "Capture ", loglines.STARTUP_TIMINGS_TEXT, "fired up")
    return [ln for ln in lines if any(m in ln for m in marks) and not PREFIX.match(ln)]


@pytest.mark.parametrize(
    ("fixture", "eagle3"),
    [("server-info-baseline.log", False), ("server-info-eagle3.log", True)],
)
def test_the_start_reads_as_the_real_one(fixture: str, eagle3: bool) -> None:
    real = (FIX / fixture).read_text().splitlines()
    with SimProcess(tp=1, eagle3=eagle3, load=0.3, extra=["--sim-sglang-version", "0.5.17"]) as s:
        s.wait_ready()
        sim = s.text().splitlines()
    assert milestones(sim) == milestones(real)
    assert prefixes_ok(real) == [] and prefixes_ok(sim) == []


def test_health_answers_after_sglangs_poll() -> None:
    """The real 0.5.17 served `GET /health` 200 only after its 1 s poll (one 200 per probe
    that waited); the sim answers no sooner than one poll either."""
    real = (FIX / "server-info-weight-cache-client.log").read_text()
    assert '"GET /health HTTP/1.1" 200 OK' in real
    with SimProcess(tp=1, eagle3=False, load=0.3, extra=["--sim-sglang-version", "0.5.17"]) as s:
        s.wait_ready()
        url = f"http://127.0.0.1:{s.port}/health"
        tic = time.monotonic()
        with urllib.request.urlopen(url, timeout=30) as r:
            assert r.status == 200
        assert time.monotonic() - tic >= 1.0  # a lower bound: never sooner than the poll


def _families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """The `sglang:` families that carry samples: type and label names (multiprocess
    SGLang exports a declared family only once it has a series)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith("sglang:") and fam.samples:
            labels = frozenset(k for s in fam.samples for k in s.labels if k not in ("le",))
            out[fam.name] = (fam.type, labels)
    return out


def test_metrics_are_a_subset_of_the_real_ones() -> None:
    """After a request, every `sglang:` family the sim at 0.5.17 serves is one the real
    baseline server served (metrics-baseline.txt), with the same type and label names."""
    import json

    real = _families((FIX / "metrics-baseline.txt").read_text())
    with SimProcess(tp=1, eagle3=False, load=0.3, extra=["--sim-sglang-version", "0.5.17"]) as s:
        s.wait_ready()
        body = json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}})
        req = urllib.request.Request(f"http://127.0.0.1:{s.port}/generate", body.encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{s.port}/metrics", timeout=30) as r:
            sim = _families(r.read().decode())
    assert sim and set(sim) <= set(real), sorted(set(sim) - set(real))
    assert {k: sim[k] for k in sim} == {k: real[k] for k in sim}


def _span_counts(events: list[dict]) -> dict[tuple[str, str], int]:
    """Step and stage ranges per annotation kind, by name up to its first space."""
    import collections

    names = ("step[", "draft")
    out: collections.Counter = collections.Counter()
    for e in events:
        n = e.get("name", "")
        if e.get("cat") in ("user_annotation", "gpu_user_annotation") and n.startswith(names):
            out[(e["cat"], n.split(" ")[0])] += 1
    return dict(out)


@pytest.mark.parametrize(
    ("fixture", "eagle3"),
    [("trace-baseline-TP-0.trace.json.gz", False), ("trace-eagle3-TP-0.trace.json.gz", True)],
)
def test_trace_ranges_are_the_real_ones(fixture: str, eagle3: bool, tmp_path: Path) -> None:
    """A 5-step profile window under one request: the same ranges as the real server's
    (baseline `step[DECODE ..]`; EAGLE-3 `step[TARGET_VERIFY ..]` and one `draft` and one
    `draft_extend` range per cycle, no step span for the drafter's graph replays)."""
    import gzip
    import json
    import threading

    real = json.loads(gzip.decompress((FIX / fixture).read_bytes()))["traceEvents"]
    with SimProcess(tp=1, eagle3=eagle3, load=0.3, extra=["--sim-sglang-version", "0.5.17"]) as s:
        s.wait_ready()
        gen = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 200}}
        bg = threading.Thread(target=s.post_json, args=("/generate", gen), daemon=True)
        bg.start()
        status, _, body = s.request("POST", "/start_profile", {
            "output_dir": str(tmp_path), "num_steps": 5, "activities": ["CPU", "GPU"],
        }, timeout=60)  # fmt: skip
        assert status == 200, body
        bg.join(60)
    (trace,) = tmp_path.glob("*.trace.json.gz")
    sim = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    want = {k: v for k, v in _span_counts(real).items()}
    assert _span_counts(sim) == want
