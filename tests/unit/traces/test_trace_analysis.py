"""Trace analysis: exact on constructed traces with known truth, on the real H200 traces, and
on traces written by the sim engine; the fast scanner agrees with the straightforward parser."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify import traces
from fastverify.traces import reader
from tests.fixtures import tracegen

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-2.28.9-h200-1rank"
VERIFY_US = [10_000.0, 20_000.0, 30_000.0, 40_000.0, 50_000.0]


def _check(result: dict, truth: tracegen.Truth) -> None:
    assert result["rank"] == truth.rank
    assert result["verify_passes"] == truth.verify_passes
    assert result["allreduce_per_verify"] == pytest.approx(truth.allreduce_per_verify)
    assert result["allreduce_ms_per_verify"] == pytest.approx(truth.allreduce_ms_per_verify)
    assert result["allreduce_share"] == pytest.approx(truth.allreduce_share)
    assert sorted(result["verify_ms_samples"]) == pytest.approx(sorted(truth.verify_ms))


@pytest.mark.parametrize("family", ["dev", "old", "custom"])
@pytest.mark.parametrize("pretty", [False, True])
@pytest.mark.parametrize("suffix", [".trace.json.gz", ".trace.json"])
def test_constructed_rank_is_exact(tmp_path: Path, family: str, pretty: bool, suffix: str) -> None:
    doc, truth = tracegen.build_rank(3, verify_us=VERIFY_US, family=family)
    path = tracegen.write(tmp_path / f"w-TP-3{suffix}", doc, pretty=pretty)
    result = traces.analyze_file(path)
    _check(result, truth)
    # p50/p90 of 10..50 ms by linear interpolation: 30 ms and 46 ms
    assert result["verify_ms_p50"] == pytest.approx(30.0)
    assert result["verify_ms_p90"] == pytest.approx(46.0)
    # 5 passes x (6 verify + 2 draft + 1 outside); the other device's 3 per pass excluded
    assert result["allreduce_calls"] == truth.allreduce_calls == 45
    assert result["span_source"] == "gpu"
    assert result["exact_parser"] is False  # the fast path handled it


def test_directory_of_two_ranks(tmp_path: Path) -> None:
    truths = {}
    for rank, ar in ((0, 122), (1, 122)):
        doc, truth = tracegen.build_rank(
            rank,
            verify_us=[30_000.0] * 4,
            ar_per_verify=ar,
            ar_dur_us=200.0 if rank == 0 else 150.0,
        )
        tracegen.write(tmp_path / f"prof-1700-TP-{rank}.trace.json.gz", doc)
        truths[rank] = truth
    (tmp_path / "notes.txt").write_text("not a trace")
    analysis = traces.analyze_path(tmp_path)
    assert [r["rank"] for r in analysis["ranks"]] == [0, 1]
    for r in analysis["ranks"]:
        _check(r, truths[r["rank"]])
    assert analysis["ranks"][0]["allreduce_ms_per_verify"] == pytest.approx(122 * 0.2)
    assert analysis["ranks"][1]["allreduce_ms_per_verify"] == pytest.approx(122 * 0.15)
    view = traces.public_view(analysis)
    assert set(view) == {"ranks"}
    assert list(view["ranks"][0]) == list(traces.PUBLIC_KEYS)


def test_cpu_ranges_when_no_gpu_annotations(tmp_path: Path) -> None:
    cpu = [8_000.0, 9_000.0, 10_000.0]
    doc, truth = tracegen.build_rank(
        0, verify_us=[12_000.0] * 3, gpu_annotations=False, cpu_verify_us=cpu
    )
    path = tracegen.write(tmp_path / "cpu-TP-0.trace.json.gz", doc)
    result = traces.analyze_file(path)
    assert result["span_source"] == "cpu"
    _check(result, truth)
    assert result["verify_ms_p50"] == pytest.approx(9.0)


@pytest.mark.parametrize(
    ("name", "fallback"), [("draft step[DECODE bs={1}]", False), ("draft step[DECODE bs=}1]", True)]
)
def test_braces_in_annotation_names(tmp_path: Path, name: str, fallback: bool) -> None:
    doc, truth = tracegen.build_rank(0, verify_us=VERIFY_US)
    for ev in doc["traceEvents"]:
        if "annotation" in ev.get("cat", "") and ev["name"].startswith("draft"):
            ev["name"] = name
    path = tracegen.write(tmp_path / "b-TP-0.trace.json.gz", doc, pretty=True)
    result = traces.analyze_file(path)
    _check(result, truth)  # exact either way
    # balanced braces are cut correctly; an unbalanced one sends the file to the exact parser
    assert result["exact_parser"] is fallback


@pytest.mark.parametrize("chunk", [97, 1000, 4099])
def test_chunk_boundaries_anywhere(tmp_path: Path, monkeypatch, chunk: int) -> None:
    doc, _ = tracegen.build_rank(0, verify_us=VERIFY_US, family="custom")
    path = tracegen.write(tmp_path / "c-TP-0.trace.json.gz", doc, pretty=True)
    monkeypatch.setattr(reader, "_CHUNK_OUT", chunk)
    monkeypatch.setattr(reader, "_CHUNK_IN", 64)
    for launches in (False, True):
        fast = traces.scan_events(path, want_launches=launches)
        exact = traces.exact_events(path, want_launches=launches)
        assert fast.spans == exact.spans
        assert [k[:4] for k in fast.kernels] == [k[:4] for k in exact.kernels]
        assert fast.launches == exact.launches
        assert len(fast.kernels) == 5 * (6 + 2 + 1 + 3)


def test_truncated_and_foreign_files_are_clear_errors(tmp_path: Path) -> None:
    doc, _ = tracegen.build_rank(0, verify_us=VERIFY_US)
    data = gzip.compress(tracegen.dumps(doc))
    cut = tmp_path / "cut-TP-0.trace.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(traces.TraceError, match="truncated"):
        traces.analyze_file(cut)
    foreign = tmp_path / "x.json"
    foreign.write_text("hello")
    with pytest.raises(traces.TraceError):
        traces.analyze_file(foreign)
    with pytest.raises(traces.TraceError, match="no trace files"):
        traces.analyze_path(_empty(tmp_path))


def _empty(tmp_path: Path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d


def test_two_traces_of_one_rank_refused(tmp_path: Path) -> None:
    doc, _ = tracegen.build_rank(0, verify_us=VERIFY_US)
    tracegen.write(tmp_path / "a-TP-0.trace.json.gz", doc)
    tracegen.write(tmp_path / "b-TP-0.trace.json.gz", doc)
    with pytest.raises(traces.TraceError, match="two traces for TP rank 0"):
        traces.analyze_path(tmp_path)


# ---------------------------------------------------------------- real H200 traces
def test_real_cudagraph_trace_three_replays() -> None:
    path = FIX / "torch-trace-cudagraph-3-verify-passes.json.gz"
    result = traces.analyze_file(path)
    # README: three graph replays inside step[TARGET_VERIFY bs=1]; one rank: no NCCL kernel
    assert result["verify_passes"] == 3
    assert result["span_source"] == "gpu"
    assert result["allreduce_per_verify"] == 0
    raw = json.loads(gzip.decompress(path.read_bytes()))
    gpu = sorted(
        e["dur"] / 1000 for e in raw["traceEvents"] if e.get("cat") == "gpu_user_annotation"
    )
    assert sorted(result["verify_ms_samples"]) == pytest.approx(gpu)


@pytest.mark.parametrize(
    "name", ["torch-trace-cudagraph-3-verify-passes.json.gz", "torch-trace-ring-ll.json.gz"]
)
def test_real_traces_fast_equals_exact(name: str) -> None:
    fast = traces.scan_events(FIX / name, want_launches=True)
    exact = traces.exact_events(FIX / name, want_launches=True)
    assert fast.spans == exact.spans and fast.launches == exact.launches
    assert (
        len(fast.spans)
        == {"torch-trace-cudagraph-3-verify-passes.json.gz": 10, "torch-trace-ring-ll.json.gz": 24}[
            name
        ]
    )


def test_real_ring_ll_trace_with_span_option() -> None:
    result = traces.analyze_file(FIX / "torch-trace-ring-ll.json.gz", span="verify")
    assert result["verify_passes"] == 3  # three GPU ranges named "verify"
    assert result["rank"] == 0  # from distributedInfo


# ---------------------------------------------------------------- sim-written traces
def test_sim_written_traces_two_ranks(tmp_path: Path) -> None:
    sim = pytest.importorskip("fastverify.sim.traces")
    for rank in range(2):
        sim.write_trace(
            tmp_path / f"sim-TP-{rank}.trace.json.gz", steps=6, rank=rank, tp_size=2, mode="eagle3"
        )
    analysis = traces.analyze_path(tmp_path)
    assert [r["rank"] for r in analysis["ranks"]] == [0, 1]
    for r in analysis["ranks"]:
        assert r["verify_passes"] == 6
        assert r["allreduce_per_verify"] == 122  # 61 layers x 2; draft forwards excluded
        assert r["allreduce_calls"] > r["allreduce_calls_in_verify"] == 6 * 122
        assert 0 < r["allreduce_share"] < 1


# ---------------------------------------------------------------- the CLI
def test_cli_analyze_json_shape_and_exit_codes(tmp_path: Path) -> None:
    doc, _ = tracegen.build_rank(0, verify_us=[30_000.0] * 3, ar_per_verify=122, ar_dur_us=200.0)
    tracegen.write(tmp_path / "p-TP-0.trace.json.gz", doc)
    run = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "trace", "analyze", "--json", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out == {
        "ranks": [
            {
                "rank": 0,
                "verify_passes": 3,
                "verify_ms_p50": pytest.approx(30.0),
                "verify_ms_p90": pytest.approx(30.0),
                "allreduce_per_verify": 122.0,
                "allreduce_ms_per_verify": pytest.approx(24.4),
                "allreduce_share": pytest.approx(24.4 / 30.0),
            }
        ]
    }
    human = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "trace", "analyze", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert human.returncode == 0
    assert (
        "verify 30.0 ms p50 (p90 30.0), 122 all-reduces/verify, 24.4 ms (81%) in all-reduce"
    ) in human.stdout
    none = subprocess.run(
        [
            sys.executable,
            "-m",
            "fastverify.ctl",
            "trace",
            "analyze",
            "--span",
            "NO_SUCH",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert none.returncode == 1 and "no NO_SUCH range found" in none.stderr, none.stderr


def test_cli_capture_without_daemon_exits_3(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "--socket", str(tmp_path / "none.sock"),
         "trace", "capture", "--steps", "2", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 3
    assert json.loads(run.stdout)["reachable"] is False


def test_stage_files_merge_and_other_parallel_ranks_stay_apart(tmp_path: Path) -> None:
    # SGLang's profile_by_stage: one file per stage and rank; EP ranks add `-EP-n`
    decode, truth = tracegen.build_rank(0, verify_us=[30_000.0] * 3, ar_per_verify=122)
    prefill, _ = tracegen.build_rank(0, verify_us=[30_000.0] * 2, ar_per_verify=122)
    for ev in prefill["traceEvents"]:
        if ev.get("name") == "step[TARGET_VERIFY bs=1]":
            ev["name"] = "step[EXTEND bs=1]"  # prefill forwards are no verify passes
        if "ts" in ev:
            ev["ts"] -= 10_000_000.0  # the prefill stage was recorded before the decode stage
    tracegen.write(tmp_path / "p7-TP-0-EP-0-decode.trace.json.gz", decode)
    tracegen.write(tmp_path / "p7-TP-0-EP-0-prefill.trace.json.gz", prefill)
    other, _ = tracegen.build_rank(1, verify_us=[30_000.0] * 3, ar_per_verify=122)
    tracegen.write(tmp_path / "p7-TP-1-EP-1-decode.trace.json.gz", other)
    analysis = traces.analyze_path(tmp_path)
    assert [(r["rank"], r["rank_id"]) for r in analysis["ranks"]] == [
        (0, "TP-0-EP-0"), (1, "TP-1-EP-1"),
    ]  # fmt: skip
    r0 = analysis["ranks"][0]
    _check(r0, truth)
    assert len(r0["file"]) == 2
    assert traces.rank_key("x-TP-3-DP-1.trace.json.gz") == (3, "DP-1", "")
    assert traces.rank_key("x-TP-3-decode.trace.json") == (3, "", "decode")
    assert traces.rank_key("x-TP-3.txt") is None
