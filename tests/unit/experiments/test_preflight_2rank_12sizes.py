"""Preflight's NCCL log reader on real 2-rank logs at all 12 default sizes, decode and
prefill (2 x H200, NCCL 2.28.9, nccl-default / ring-ll / tree-ll over NVLink and with
NCCL_P2P_DISABLE=1; tests/fixtures/nccl-2.28.9-h200x2-2rank/README.md says how they were
made). The expected algorithm/protocol per size is what NCCL printed in those logs'
`AllReduce: N Bytes -> Algo X proto Y` lines, read by eye."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fastverify.experiments.preflight import merge as pf_merge

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-2.28.9-h200x2-2rank"
LOGS = FIX / "logs-12sizes"
SIZES = tuple(7168 * 2 * t for t in (1, 2, 3, 4, 8, 16, 32, 64, 128, 512, 2048, 8192))


def log(path: str, name: str, rank: int) -> str:
    return gzip.decompress((LOGS / path / f"{name}.rank{rank}.nccl.log.gz").read_bytes()).decode()


def report(path: str) -> dict:
    return json.loads(gzip.decompress((LOGS / path / "report.json.gz").read_bytes()))


def ll_up_to(limit: int, algo: str = "RING") -> dict[int, tuple[str, str]]:
    return {n: (algo, "LL" if n <= limit else "SIMPLE") for n in SIZES}


@pytest.mark.parametrize(
    ("path", "name", "want"),
    [
        # NCCL's own choice: LL up to 896 KiB over NVLink, up to 224 KiB through host memory
        ("nvlink", "nccl-default", ll_up_to(917504)),
        ("p2p-off", "nccl-default", ll_up_to(229376)),
        # forced LL stays LL at 112 MiB on both paths
        ("nvlink", "ring-ll", {n: ("RING", "LL") for n in SIZES}),
        ("p2p-off", "ring-ll", {n: ("RING", "LL") for n in SIZES}),
        ("nvlink", "tree-ll", {n: ("TREE", "LL") for n in SIZES}),
        ("p2p-off", "tree-ll", {n: ("TREE", "LL") for n in SIZES}),
    ],
)
def test_algo_proto_at_decode_and_prefill_sizes(path: str, name: str, want: dict) -> None:
    parsed = pf_merge.parse_nccl_log(log(path, name, 0))
    assert parsed["version"] == "2.28.9+cuda13.0"
    got = {n: (t["algo"], t["proto"]) for n, t in parsed["tuning"].items() if n in SIZES}
    assert got == want
    assert pf_merge.parse_nccl_log(log(path, name, 1))["tuning"] == {}  # rank 1 prints none


@pytest.mark.parametrize("path", ["nvlink", "p2p-off"])
def test_report_of_the_same_run_carries_what_the_logs_say(path: str) -> None:
    rep = report(path)
    assert rep["world_size"] == 2 and [p["profile"] for p in rep["profiles"]] == [
        "nccl-default",
        "ring-ll",
        "tree-ll",
    ]
    for prof in rep["profiles"]:
        tuning = pf_merge.parse_nccl_log(log(path, prof["profile"], 0))["tuning"]
        assert [s["bytes"] for s in prof["sizes"]] == list(SIZES)
        for s in prof["sizes"]:
            assert s["correct"] is True
            assert (s["nccl_algo"], s["nccl_proto"]) == (
                tuning[s["bytes"]]["algo"],
                tuning[s["bytes"]]["proto"],
            )
