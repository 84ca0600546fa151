"""Speculation on the sim, end to end through real server processes: the histogram in
meta_info, bench's accept curve against the sim's ground truth, per-request variation,
--speculative-adaptive served with SGLang's controller (its log lines, the two step gauges,
the accept rate of a steps-0 interval) and SGLang's per-request metrics file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from fastverify.experiments.bench.load import BenchConfig, run_bench
from fastverify.profiles.store import ProfileStore
from fastverify.sglang import adaptive, request_stamps
from fastverify.speculation.curve import AcceptCurve
from tests.support.sim import sim_server

EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/d"]
# the shipped pcie-ipc profile's variables: on the sim's PCIe-only box its all-reduce makes a
# verify pass ~4x shorter than NCCL's; the acceptance the long benches below assert is the same
PCIE_IPC = dict(ProfileStore().load("pcie-ipc").env)


def test_bench_accept_curve_equals_the_sims_ground_truth(tmp_path: Path) -> None:
    with sim_server(tmp_path, *EAGLE, "--speculative-num-steps", "3",
                    "--sim-accept-length", "2.0", env=PCIE_IPC) as url:  # fmt: skip
        cfg = BenchConfig(url=url, concurrency=16, duration=None, requests=16,
                          output_len=200, warmup=0)  # fmt: skip
        result = run_bench(cfg)
        truth = httpx.get(f"{url}/server_info").json()["sim"]["acceptance"]
    hist = result.accept_histogram
    assert hist is not None and len(hist) == 4 and result.accept_steps == 3
    assert sum(hist) >= 16 * 90  # every completed request's passes, ~100 each
    curve = result.accept_curve
    assert curve is not None and set(curve) == {"1", "2", "3"}
    for k, length in curve.items():
        assert length == pytest.approx(truth["accept_length_by_steps"][k], rel=0.01), k
    assert curve["3"] == pytest.approx(2.0, rel=0.01)
    # the curve is the chain formula over the summed histogram
    assert curve == AcceptCurve.from_histogram(hist, 3).curve()


def test_baseline_server_has_no_histogram(tmp_path: Path) -> None:
    with sim_server(tmp_path) as url:
        result = run_bench(BenchConfig(url=url, duration=None, requests=2, output_len=8,
                                       warmup=0))  # fmt: skip
    assert result.accept_histogram is None and result.accept_curve is None


def _metric(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_adaptive_steps_down_where_drafting_loses_and_says_so(tmp_path: Path) -> None:
    # tier 1: [0, 3], dropping to 0 below 1.5 accepted drafts; the sim accepts ~0.3
    cfg = {"1": {"candidate_steps": [0, 3], "down_hysteresis": 1.0}, "4": {"candidate_steps": [0]}}
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(cfg))
    with sim_server(tmp_path, *EAGLE, "--speculative-num-steps", "3", "--sim-accept-length",
                    "1.3", adaptive.FLAG_ADAPTIVE, adaptive.FLAG_ADAPTIVE_CONFIG,
                    str(path), "--decode-log-interval", "5") as url:  # fmt: skip
        info = httpx.get(f"{url}/server_info").json()
        assert info["speculative_adaptive"] is True
        assert info["speculative_adaptive_config"] == str(path)
        out = httpx.post(f"{url}/generate", json={"text": "go", "sampling_params":
                         {"max_new_tokens": 60}}, timeout=60).json()  # fmt: skip
        metrics = httpx.get(f"{url}/metrics").text
        log = next(tmp_path.glob("sim-*.log")).read_text()
    changes = [c for line in log.splitlines() if (c := adaptive.parse_updated(line))]
    assert changes and (changes[0].old, changes[0].new) == (3, 0)
    assert changes[0].ema <= 1.5
    # the decode line's accept rate divides by the active step count's draft tokens: 0 in
    # an interval logged while steps 0 is active (metrics_reporter.py reads the spec config
    # adaptive overrides)
    active, rates = 3, []
    for line in log.splitlines():
        if (c := adaptive.parse_updated(line)) is not None:
            active = c.new
        elif "Decode batch" in line and "accept rate: " in line:
            rates.append((active, float(line.split("accept rate: ")[1].split(",")[0])))
    assert any(a == 0 for a, _ in rates) and all(r == 0.0 for a, r in rates if a == 0), rates
    # meta_info's per-request rate divides by the launch's (the tokenizer's spec config)
    meta = out["meta_info"]
    correct = sum(j * n for j, n in enumerate(meta[adaptive.HISTOGRAM_KEY]))
    assert meta["spec_accept_rate"] == pytest.approx(correct / (meta["spec_verify_ct"] * 3))
    # warm-up 10 passes, then a decision every 5: the first move is after pass 15
    hist = out["meta_info"][adaptive.HISTOGRAM_KEY]
    assert sum(hist) == out["meta_info"]["spec_verify_ct"] >= 16
    assert hist[0] > sum(hist[1:])  # steps 0 passes count as 0 accepted drafts
    steps = _metric(metrics, "sglang:spec_num_steps")
    assert steps in (0.0, 3.0)
    assert _metric(metrics, "sglang:spec_num_draft_tokens") == steps + 1


def test_adaptive_refused_for_topk_above_1_serves_static_and_logs_sglangs_line(
    tmp_path: Path,
) -> None:
    with sim_server(tmp_path, *EAGLE, "--speculative-num-steps", "3", "--speculative-eagle-topk",
                    "4", "--speculative-num-draft-tokens", "8",
                    adaptive.FLAG_ADAPTIVE) as url:  # fmt: skip
        info = httpx.get(f"{url}/server_info").json()
        log = next(tmp_path.glob("sim-*.log")).read_text()
    assert info["speculative_adaptive"] is False
    reasons = [r for line in log.splitlines() if (r := adaptive.parse_disabled(line))]
    assert reasons == [adaptive.unsupported_reason("EAGLE3", 4)]


def test_requests_accept_alike_without_a_spread_and_apart_with_one(tmp_path: Path) -> None:
    """--sim-accept-spread: each request has its own acceptance (a prompt set's variation);
    the pooled accept length stays --sim-accept-length."""
    spread = {}
    for s in (0.0, 0.2):
        with sim_server(tmp_path, *EAGLE, "--speculative-num-steps", "3", "--sim-accept-length",
                        "2.5", "--sim-accept-spread", str(s), env=PCIE_IPC) as url:  # fmt: skip
            r = run_bench(BenchConfig(url=url, concurrency=16, duration=None, requests=16,
                                      output_len=100, warmup=0))  # fmt: skip
        assert r.accept_requests is not None and len(r.accept_requests) == 16
        lengths = [AcceptCurve.from_histogram(h, 3).length(3) for h in r.accept_requests]
        mean = sum(lengths) / len(lengths)
        spread[s] = (sum((x - mean) ** 2 for x in lengths) / len(lengths)) ** 0.5
        # 16 requests: with the spread, the pooled figure's sampling error is ~0.2 (3 sigma
        # below); without it only the verify passes' own draws vary
        tol = 0.6 if s else 0.15
        assert r.accept_curve is not None and r.accept_curve["3"] == pytest.approx(2.5, abs=tol)
    assert spread[0.0] < 0.1 < spread[0.2], spread


def test_per_request_metrics_go_to_sglangs_file(tmp_path: Path) -> None:
    out = tmp_path / "metrics"
    with sim_server(tmp_path, *EAGLE, "--speculative-num-steps", "2",
                    "--export-metrics-to-file", "--export-metrics-to-file-dir",
                    str(out)) as url:  # fmt: skip
        body = {"text": "hello", "sampling_params": {"max_new_tokens": 20, "temperature": 0.5}}
        r = httpx.post(f"{url}/generate", json=body, timeout=60).json()
    (path,) = out.glob("sglang-request-metrics-*.log")
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    mine = [x for x in recs if x.get("id") == r["meta_info"]["id"]]
    assert len(mine) == 1 and json.loads(mine[0]["request_parameters"])["sampling_params"] == {
        "max_new_tokens": 20, "temperature": 0.5}  # fmt: skip
    assert mine[0][adaptive.HISTOGRAM_KEY] == r["meta_info"][adaptive.HISTOGRAM_KEY]
    assert "hello" not in path.read_text()  # the sim never writes the prompt
    # the record is the finished output's meta_info: with --enable-metrics (sim_server's),
    # SGLang's stamps (a non-streamed request has no first chunk, so no first chunk's send)
    keys = [k for k in request_stamps.META_STAMPS if k != "response_sent_to_client_ts"]
    stamps = request_stamps.stamps_of(mine[0])
    assert set(keys) <= set(stamps), mine[0]
    assert stamps["request_received_ts"] <= stamps["forward_entry_time"]
    assert stamps["prefill_finished_time"] <= stamps["request_finished_ts"]
