"""Merging rank reports and the per-profile verdict, on rank documents shaped as the worker
writes them (the GPU failure paths cannot be provoked on one GPU; see
docs/guides/experiments.md)."""

from __future__ import annotations

import pytest

from fastverify.experiments.preflight import merge as pf_merge

OK_GRAPH = {"capture": "ok", "replay": "ok", "correct": True, "p50_us": 10.0, "p99_us": 12.0}
CAPTURE_FAIL = {"capture": "failed", "replay": "not run",
                "error": "RuntimeError: NCCL error: invalid usage"}  # fmt: skip
SKIPPED = {"capture": "skipped", "replay": "skipped",
           "reason": "an earlier capture failed in this process"}  # fmt: skip


def _size(tokens: int, p50: float, graph: dict, correct: bool = True) -> dict:
    nbytes = 7168 * 2 * tokens
    return {"tokens": tokens, "bytes": nbytes, "correct": correct,
            "eager": {"status": "ok", "p50_us": p50, "p99_us": p50 * 2,
                      "batch": {"ops": 50, "per_op_mean_us": p50 / 2}},
            "graph": dict(graph)}  # fmt: skip


def test_merge_takes_the_slowest_rank_and_computes_busbw() -> None:
    ranks = [
        {"sizes": [_size(1, 20.0, OK_GRAPH)]},
        {"sizes": [_size(1, 30.0, OK_GRAPH)]},
    ]
    tuning = {14336: {"algo": "RING", "proto": "LL"}}
    (row,) = pf_merge.merge_sizes(ranks, 2, tuning)
    assert row["eager"]["p50_us"] == 30.0 and row["eager"]["p99_us"] == 60.0
    assert row["eager"]["algbw_gbs"] == pytest.approx(14336 / 30e-6 / 1e9)
    assert row["eager"]["busbw_gbs"] == pytest.approx(row["eager"]["algbw_gbs"] * 1.0)
    assert row["eager"]["batch"]["per_op_mean_us"] == 15.0
    assert (row["nccl_algo"], row["nccl_proto"]) == ("RING", "LL")
    assert row["correct"] is True and row["graph"]["capture"] == "ok"


def test_busbw_factor_for_eight_ranks() -> None:
    ranks = [{"sizes": [_size(4, 40.0, OK_GRAPH)]} for _ in range(8)]
    (row,) = pf_merge.merge_sizes(ranks, 8, {})
    assert row["eager"]["busbw_gbs"] == pytest.approx(row["eager"]["algbw_gbs"] * 2 * 7 / 8)


def test_one_wrong_rank_makes_the_size_wrong() -> None:
    ranks = [{"sizes": [_size(1, 20.0, OK_GRAPH)]}, {"sizes": [_size(1, 20.0, OK_GRAPH, False)]}]
    rows = pf_merge.merge_sizes(ranks, 2, {})
    v = pf_merge.verdict(rows, [], False, [], {}, 180)
    assert v == {"status": "failed", "error": "wrong all-reduce result at 14336 bytes"}


def test_capture_failure_is_unsafe_for_a_cuda_graph_server() -> None:
    ranks = [{"sizes": [_size(1, 20.0, CAPTURE_FAIL), _size(2, 20.0, SKIPPED)]}] * 2
    rows = pf_merge.merge_sizes(ranks, 2, {})
    assert rows[0]["graph"]["capture"] == "failed"
    assert rows[1]["graph"]["capture"] == "skipped"
    v = pf_merge.verdict(rows, [], False, [], {}, 180)
    assert v["status"] == "unsafe-cuda-graph"
    assert "invalid usage" in v["error"]
    # A profile that declares it needs CUDA graphs off is fine to serve eagerly.
    v = pf_merge.verdict(rows, [], False, [], {"cuda-graph": "off"}, 180)
    assert v["status"] == "ok" and "requires cuda-graph=off" in v["note"]


def test_failure_precedence() -> None:
    rows = pf_merge.merge_sizes([{"sizes": [_size(1, 20.0, OK_GRAPH)]}], 1, {})
    assert pf_merge.verdict(rows, [], False, [], {}, 180) == {"status": "ok"}
    assert pf_merge.verdict(rows, [], True, [], {}, 30)["error"] == "timed out after 30 s"
    v = pf_merge.verdict(rows, [], False, ["NCCL_ALGO"], {}, 180)
    assert v["status"] == "failed" and "NCCL_ALGO" in v["error"]
    v = pf_merge.verdict([], ["process group init failed: boom"], False, [], {}, 180)
    assert v == {"status": "failed", "error": "process group init failed: boom"}
