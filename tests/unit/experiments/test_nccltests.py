"""nccl-tests output parsing, on real all_reduce_perf output captured on one H200."""

from __future__ import annotations

from pathlib import Path

from fastverify.experiments import nccltests

DATA = Path(__file__).parent / "data" / "all_reduce_perf-h200-1gpu.txt"


def test_parse_real_all_reduce_perf_output() -> None:
    parsed = nccltests.parse(DATA.read_text())
    assert parsed["version"] == {
        "nccl_tests": "2.19.6",
        "nccl_headers": "22809",
        "nccl_library": "22809",
    }
    eager, graph = parsed["rows"]
    assert (eager["bytes"], eager["count"], eager["type"], eager["redop"]) == (
        14336,
        7168,
        "bfloat16",
        "sum",
    )
    assert eager["nranks"] == 1 and eager["gpu"] == "NVIDIA H200"
    assert eager["graph_launches"] == 0 and graph["graph_launches"] == 50
    assert eager["out_of_place"]["time_us"] == 4.88
    assert eager["in_place"]["algbw_gbs"] == 47.40
    assert graph["out_of_place"]["time_us"] == 0.96
    assert graph["in_place"]["wrong"] == "0"


def test_compare_pairs_sizes_and_flags_the_10pct_goal() -> None:
    rows = nccltests.parse(DATA.read_text())["rows"]
    profile = {
        "sizes": [
            {
                "tokens": 1,
                "bytes": 14336,
                "eager": {"p50_us": 25.0, "batch": {"per_op_mean_us": 0.32}},
                "graph": {"p50_us": 9.0, "batch": {"per_op_p50_us": 0.5}},
            },
            {"tokens": 2, "bytes": 28672, "eager": {}, "graph": {}},
        ]
    }
    out = nccltests.compare(profile, rows)
    assert out[0]["nccl_tests_eager_in_place_us"] == 0.30
    assert out[0]["ratio_eager"] == 0.32 / 0.30
    assert out[0]["within_10pct_eager"] is True
    assert out[0]["within_10pct_graph"] is False  # 0.5 us vs 0.01 us
    assert out[1]["nccl_tests_eager_in_place_us"] is None  # size not in the capture
    assert out[1]["ratio_eager"] is None
