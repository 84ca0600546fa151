"""nccl-tests output parsing, on real all_reduce_perf output captured on one H200."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastverify.experiments.preflight import nccltests

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


def _two_rank_report() -> dict:
    import gzip
    import json

    fix = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-2.28.9-h200x2-2rank"
    return json.loads(gzip.decompress((fix / "preflight-report-nvlink.json.gz").read_bytes()))


def test_matrix_rows_per_profile_size_mode_and_path() -> None:
    report = _two_rank_report()  # real 2-rank preflight, 12 sizes
    text = DATA.read_text()  # real nccl-tests output, one size (14336), eager and -G
    doc = nccltests.matrix(
        [("nvlink", "ring-ll", report, text), ("p2p-off", "ring-ll", report, text)]
    )
    rows = doc["rows"]
    assert len(rows) == 2 * 12 * 2  # paths x sizes x modes
    assert {(r["path"], r["mode"]) for r in rows} == {
        (p, m) for p in ("nvlink", "p2p-off") for m in ("eager", "graph")
    }
    prof = next(p for p in report["profiles"] if p["profile"] == "ring-ll")
    first = prof["sizes"][0]
    eager = next(
        r for r in rows if r["path"] == "nvlink" and r["mode"] == "eager" and r["bytes"] == 14336
    )
    graph = next(
        r for r in rows if r["path"] == "nvlink" and r["mode"] == "graph" and r["bytes"] == 14336
    )
    assert eager["preflight_us"] == first["eager"]["batch"]["per_op_mean_us"]
    assert eager["nccl_tests_us"] == 0.30 and eager["nccl_tests_out_of_place_us"] == 4.88
    assert eager["ratio"] == eager["preflight_us"] / 0.30
    assert graph["preflight_us"] == first["graph"]["batch"]["per_op_p50_us"]
    assert graph["nccl_tests_us"] == 0.01 and graph["ratio"] == graph["preflight_us"] / 0.01
    assert (eager["nccl_algo"], eager["nccl_proto"]) == ("RING", "LL")
    assert eager["preflight_counts"]["iters"] == 50
    missing = [r for r in rows if r["bytes"] != 14336]
    assert all(r["ratio"] is None and r["within_10pct"] is None for r in missing)
    summary = {(s["path"], s["mode"]): s for s in doc["summary"]}
    s = summary[("nvlink", "graph")]
    assert s["sizes"] == 12 and s["all_within_10pct"] is False
    assert s["outside_10pct_bytes"] == [14336] and len(s["missing_bytes"]) == 11
    assert doc["world_size"] == 2 and doc["nccl_tests"]["nccl_tests"] == "2.19.6"


def test_matrix_refuses_an_unknown_profile_or_empty_output() -> None:
    report = _two_rank_report()
    with pytest.raises(ValueError, match="no profile 'nope' in the preflight report for nvlink"):
        nccltests.matrix([("nvlink", "nope", report, DATA.read_text())])
    with pytest.raises(ValueError, match="no all_reduce_perf rows"):
        nccltests.matrix([("nvlink", "ring-ll", report, "# nothing measured\n")])


def test_matrix_command_line_writes_the_file(tmp_path: Path) -> None:
    import gzip

    fix = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-2.28.9-h200x2-2rank"
    pf = tmp_path / "pf.json"
    pf.write_bytes(gzip.decompress((fix / "preflight-report-nvlink.json.gz").read_bytes()))
    out = tmp_path / "m.json"
    assert nccltests.main(["matrix", str(out), f"nvlink:nccl-default:{pf}:{DATA}"]) == 0
    assert out.exists() and '"path": "nvlink"' in out.read_text()
    with pytest.raises(SystemExit) as exc:  # argparse usage error
        nccltests.main(["matrix", str(out), f"nvlink:{pf}"])
    assert exc.value.code == 2
    assert (
        nccltests.main(["matrix", str(out), f"nvlink:ring-ll:{tmp_path / 'absent.json'}:{DATA}"])
        == 2
    )
