"""fastverify's readers on what a real SGLang 0.5.17 printed and served on an H200.

Every file under tests/fixtures/sglang-0.5.17-h200/ is output of that server (TP 1, dummy
weights, managed by fastverifyd through `benchmarks/gpu/real_sglang.py`; its README says
which run wrote which file). A parser that disagrees with a real line fails here.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fastverify import traces
from fastverify.daemon import failures
from fastverify.exporters import sglang_metrics
from fastverify.sglang import adaptive, loglines
from fastverify.sglang import metrics as sglang_names
from fastverify.sglang.facts import resolve
from fastverify.speculation import curve

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "sglang-0.5.17-h200"
INFO_LOGS = sorted(FIX.glob("server-info-*.log"))


def lines(name: str) -> list[str]:
    return (FIX / name).read_text().splitlines()


@pytest.mark.parametrize("log", INFO_LOGS, ids=lambda p: p.name)
def test_every_decode_and_prefill_line_parses(log: Path) -> None:
    seen = 0
    for line in log.read_text().splitlines():
        if "Decode batch" in line or "Prefill batch" in line:
            rec = loglines.parse_sglang_line(line)
            assert rec is not None and rec["kind"] in ("decode", "prefill"), line
            seen += 1
            if rec["kind"] == "decode":
                assert rec["running_reqs"] >= 0 and rec["gen_throughput"] >= 0, (line, rec)
                assert not rec.get("extra"), rec  # every field of 0.5.17's line is known
            else:
                assert rec["new_seqs"] >= 1 and rec["new_tokens"] >= 1, (line, rec)
                assert set(rec.get("extra", {})) <= {"#pending-token"}, rec
    if "deep-gemm" not in log.name and "broken" not in log.name:  # failed: served nothing
        assert seen > 0


def test_decode_line_of_a_speculative_server_carries_the_accept_length() -> None:
    recs = [loglines.parse_sglang_line(ln) for ln in lines("server-info-eagle3.log")]
    decode = [r for r in recs if r and r["kind"] == "decode"]
    assert decode and all(r["accept_len"] is not None for r in decode)
    assert all(1.0 <= r["accept_len"] <= 4.0 for r in decode)


def test_ready_line_and_capture_milestones() -> None:
    log = lines("server-info-baseline.log")
    recs = [r for ln in log if (r := loglines.parse_sglang_line(ln))]
    kinds = [r["kind"] for r in recs]
    assert kinds.count("ready") == 1
    ends = [r for r in recs if r.get("event") == "end" and "role" in r]
    assert [(r["role"], r["phase"]) for r in ends] == [("target", "prefill"), ("target", "decode")]
    assert [r["elapsed_s"] for r in ends] == [70.08, 2.61]


def test_prefill_capture_progress_is_read() -> None:
    """0.5.17 draws the prefill capture as `Capturing num tokens (num_tokens=N ...)`: the
    70 s of the first start's capture must show as progress."""
    recs = [loglines.parse_sglang_line(ln) for ln in lines("server-info-baseline.log")]
    prog = [r for r in recs if r and r["kind"] == "capture_progress"]
    tokens = [r for r in prog if r.get("num_tokens") is not None]
    assert tokens and tokens[-1]["total"] == 58 and tokens[-1]["percent"] == 100


def test_startup_timings_line() -> None:
    recs = [loglines.parse_sglang_line(ln) for ln in lines("server-info-eagle3.log")]
    (t,) = [r for r in recs if r and r["kind"] == "startup_timings"]
    assert t["load_weight"] == 0.09 and t["kv_cache_allocation"] == 1.00
    assert t["scheduler_e2e"] == 12.89 and t["tokenizer_e2e"] == 23.09
    assert t["cuda_graph"] == {
        "prefill": 1.94, "decode": 0.0, "target_verify": 2.62, "draft_prefill": 1.27,
        "draft_decode": 3.52, "draft_extend": 1.02,
    }  # fmt: skip


def test_adaptive_step_changes_are_read_and_flap_on_a_zero_tier() -> None:
    """SGLang's own controller at a [0, 1] tier on dummy weights (accept length ~1.0):
    it never rests at 0 (the EMA freezes at 0 steps and the slot re-probes)."""
    log = lines("server-info-adaptive-head.log")
    changes = [c for ln in log if (c := adaptive.parse_updated(ln))]
    assert (changes[0].old, changes[0].new) == (3, 1)
    zeros = [c for c in changes if c.new == 0]
    back_up = [c for c in changes if c.old == 0 and c.new == 1]
    assert len(zeros) > 10 and len(back_up) >= len(zeros) - 1


def test_metrics_reduce_on_the_real_scrape() -> None:
    text = (FIX / "metrics-baseline.txt").read_text()
    values = sglang_metrics.reduce(text)
    wanted = ("gen_throughput", "num_running_reqs", "num_queue_reqs", "token_usage",
              "generation_tokens_total", "prompt_tokens_total", "num_requests_total")  # fmt: skip
    assert [k for k in wanted if k not in values] == []
    assert values["generation_tokens_total"] > 0 and values["num_requests_total"] > 0
    assert values["itl_count"] > 0 and values["itl_seconds_sum"] > 0


def test_metric_labels_match_the_facts() -> None:
    """Every `sglang:` family the real server published has the label set the 0.5.17
    facts (read from its wheel) give."""
    from prometheus_client.parser import text_string_to_metric_families

    facts = resolve("0.5.17")
    text = (FIX / "metrics-baseline.txt").read_text()
    fams = {f.name: f for f in text_string_to_metric_families(text) if f.name.startswith("sglang:")}
    known = {n: set(ls) for n, ls in facts.metrics.items()}
    unknown = sorted(n for n in fams if n not in known and n + "_total" not in known)
    assert not unknown, f"families the facts do not list: {unknown}"
    for name, fam in fams.items():
        want = known.get(name, known.get(name + "_total"))
        for s in fam.samples:
            # bucket bounds: prometheus' le/quantile, SGLang's own GaugeHistogram's gt
            # (observability/metrics_collector.py: "gt < count <= le"); pid: a gauge in
            # prometheus-client's multiprocess mode "all" (num_paused/retracted_reqs)
            got = set(s.labels) - {"le", "quantile", "gt", "pid"}
            assert got <= want | {"tp_rank", "pp_rank", "moe_ep_rank"}, (name, got, want)
    # the series fastverify reads that this idle-then-loaded baseline server showed
    read = [*sglang_names.SCHEDULER_GAUGES, *sglang_names.TOKENIZER_COUNTERS]
    shown = [n for n in read if n in fams or n.removesuffix("_total") in fams]
    assert len(shown) >= 12, shown


def test_trace_analyzer_on_the_real_traces() -> None:
    eagle = traces.analyze_path(FIX, files=[FIX / "trace-eagle3-TP-0.trace.json.gz"])
    (rank,) = eagle["ranks"]
    assert rank["verify_passes"] == 5 and 0.2 < rank["verify_ms_p50"] < 2.0
    base = traces.analyze_path(
        FIX, files=[FIX / "trace-baseline-TP-0.trace.json.gz"], span="DECODE"
    )
    assert base["ranks"][0]["verify_passes"] == 5


def test_span_names_of_a_real_eagle3_trace() -> None:
    with gzip.open(FIX / "trace-eagle3-TP-0.trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e["name"] for e in events if e.get("cat") == "user_annotation"}
    assert "step[TARGET_VERIFY bs=2]" in names
    assert {"draft", "draft_extend"} <= names  # the drafter's forwards: no step[...] span
    assert not any(n.startswith("step[DECODE") for n in names)


def test_acceptance_from_real_meta_info() -> None:
    meta = json.loads((FIX / "generate-eagle3.json").read_text())["meta_info"]
    hist = meta[adaptive.HISTOGRAM_KEY]
    assert sum(hist) == meta["spec_verify_ct"]
    c = curve.AcceptCurve.from_histogram(hist, steps=3)
    assert c.length(3) == pytest.approx(meta["spec_accept_length"], abs=0.05)


def test_failure_classifier_on_real_failed_starts() -> None:
    no_dg = failures.classify(lines("server-info-eagle3-no-deep-gemm.log"), exit_code=1)
    assert no_dg.reason == "import_error"
    assert "No module named 'deep_gemm'" in no_dg.line  # not SGLang's "Ignore import error"
    partial = failures.classify(lines("server-info-llama8b-deep-gemm-partial.log"), exit_code=1)
    assert "deep_gemm.utils.layout" in partial.line


def test_refusals_quote_sglang() -> None:
    parser = json.loads((FIX / "refused-parser.json").read_text())
    assert parser["reason"] == "argv_rejected" and parser["http_status"] == 422
    assert "invalid choice: 'no-such-backend'" in parser["error"]
    resolved = json.loads((FIX / "refused-resolve.json").read_text())
    assert "--weight-cache-mode is not supported together with speculative" in resolved["error"]


def test_capture_milestones_of_every_eagle3_phase() -> None:
    recs = [loglines.parse_sglang_line(ln) for ln in lines("server-info-eagle3.log")]
    ends = {(r["role"], r["phase"]) for r in recs if r and r.get("event") == "end"}
    assert ends == {("target", "prefill"), ("target", "verify"), ("draft", "decode"),
                    ("draft", "extend"), ("draft", "prefill")}  # fmt: skip


def test_load_progress_moves_through_the_capture() -> None:
    """What `status` shows while the first start spends 70 s capturing prefill graphs."""
    from fastverify.daemon.logs import parse_progress

    steps = [p for ln in lines("server-info-baseline.log") if (p := parse_progress(ln))]
    graphs = [p for p in steps if p[0] == "cuda_graph"]
    assert len(graphs) > 50  # one per captured token count and batch size, not one line
    assert graphs[0][2] == "capturing target prefill CUDA graphs (backend breakable)"
    assert "target prefill CUDA graphs captured in 70.1 s" in [p[2] for p in graphs]
    percents = [p[1] for p in steps]
    assert percents[-1] == 100.0 and max(percents[:-1]) < 100.0


def test_the_parsers_literal_texts_are_each_releases_own() -> None:
    """The texts the new readers look for, in every release's facts (read from its wheel)
    that prints the line at all."""
    from fastverify.sglang.facts import known_versions

    marks = {
        "startup_timings": loglines.STARTUP_TIMINGS_TEXT,
        "capture_progress_tokens": loglines.CAPTURE_TOKENS_TEXT + " (num_tokens=",
        "adaptive_step_change": "Adaptive spec params updated: steps ",
    }
    seen = dict.fromkeys(marks, 0)
    for version in known_versions():
        formats = resolve(version).data["log_formats"]
        for kind, text in marks.items():
            for site in formats.get(kind, []):
                assert site["pieces"][0].startswith(text), (version, kind, site)
                seen[kind] += 1
    assert all(n > 0 for n in seen.values()), seen


def test_a_cache_clients_lines_say_the_weights_came_from_the_cache() -> None:
    """The Llama-8B-shaped start served by fastverifyd's weight cache: what `status` and the
    switch's result then say about its weights (source, seconds, the start's split)."""
    from fastverify.daemon.weights import Gate, WeightsWatch, weights_summary

    watch = WeightsWatch(resolve("0.5.17"), asked=True)
    for ln in lines("server-info-weight-cache-client.log"):
        watch.on_line(ln)
    assert watch.hit and watch.refusal() is None
    assert watch.seconds() == pytest.approx(0.08)  # the IPC loader's total
    assert watch.graphs_s == pytest.approx(11.43 + 1.80)  # target prefill + decode capture
    out = weights_summary(watch, Gate(True), ready_s=51.46, cache_bytes=16722690048)
    assert out["source"] == "cache"
    assert out["text"] == "weights: from the cache (15.6 GiB over IPC, 0.08 s)"
    assert out["phases"] == {"weights": 0.08, "cuda_graph": 13.23, "rest": 38.15}


def test_a_disk_start_of_the_same_model_is_read_as_from_disk() -> None:
    from fastverify.daemon.weights import Gate, WeightsWatch, weights_summary

    watch = WeightsWatch(resolve("0.5.17"), asked=False)
    for ln in lines("server-info-llama8b-first-start.log"):
        watch.on_line(ln)
    assert not watch.hit and watch.seconds() == pytest.approx(12.98)
    out = weights_summary(watch, Gate(False, "weight_cache = off", kind="off"), 160.7, None)
    assert out["source"] == "disk" and out["phases"]["cuda_graph"] == pytest.approx(96.39)


def test_the_weight_cache_daemons_own_lines() -> None:
    """The daemon's log as fastverifyd keeps it: its disk load and readiness, and the
    connection of the client above."""
    text = (FIX / "weight-cache-daemon.log").read_text()
    assert "Model loaded from disk in 5.25s" in text
    assert "Exported 196 tensors as IPC handles. Ready to serve." in text
    client = (FIX / "server-info-weight-cache-client.log").read_text()
    assert "Fetched 196 IPC handles from daemon" in client  # the same 196 tensors


def test_a_broken_draft_fails_after_the_load_and_the_cause_is_quoted() -> None:
    f = failures.classify(lines("server-info-eagle3-broken-draft.log"), exit_code=1)
    assert f.reason == "cuda_graph_capture"
    assert f.line == "Fail when using backend: breakable for prefill runner."
    # SGLang's summary line says where; the exception before it says what
    assert "(RuntimeError: The size of tensor a (1536) must match the size of tensor b (768)" in (
        f.message
    )
    log = lines("server-info-eagle3-broken-draft.log")
    assert any("Load weight end." in ln for ln in log)  # after the target's load
