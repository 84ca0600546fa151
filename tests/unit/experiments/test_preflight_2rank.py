"""Preflight's NCCL log reader, the log parser and the size winners on real 2-rank output
(2 x H200, NCCL 2.28.9; tests/fixtures/nccl-2.28.9-h200x2-2rank/README.md says how it was
made)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fastverify.experiments.preflight import merge as pf_merge
from fastverify.experiments.preflight import run as preflight
from fastverify.experiments.preflight.worker import scaled
from fastverify.sglang import loglines

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-2.28.9-h200x2-2rank"
DECODE = (14336, 28672, 43008, 57344, 114688, 229376, 458752, 917504)
RING_LL_VARS = {
    "NCCL_PROTO": "LL",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
    "NCCL_NVLS_ENABLE": "0",
}


def log(path: str, name: str, rank: int) -> str:
    return gzip.decompress(
        (FIX / "logs" / path / f"{name}.rank{rank}.nccl.log.gz").read_bytes()
    ).decode()


def report(path: str) -> dict:
    return json.loads(gzip.decompress((FIX / f"preflight-report-{path}.json.gz").read_bytes()))


@pytest.mark.parametrize(
    ("path", "name", "want"),
    [
        ("nvlink", "nccl-default", {n: ("RING", "LL") for n in DECODE}),
        ("nvlink", "ring-ll", {n: ("RING", "LL") for n in DECODE}),
        ("nvlink", "tree-ll", {n: ("TREE", "LL") for n in DECODE}),
        # NCCL's own choice without peer access: LL for small messages, SIMPLE from 448 KiB
        (
            "p2p-off",
            "default-nop2p",
            {n: ("RING", "LL" if n <= 229376 else "SIMPLE") for n in DECODE},
        ),
        ("p2p-off", "ring-ll-nop2p", {n: ("RING", "LL") for n in DECODE}),  # forced
        ("p2p-off", "tree-ll-nop2p", {n: ("TREE", "LL") for n in DECODE}),
    ],
)
def test_algo_proto_per_size_from_rank0_tuning_lines(path: str, name: str, want: dict) -> None:
    parsed = pf_merge.parse_nccl_log(log(path, name, 0))
    assert parsed["version"] == "2.28.9+cuda13.0"
    got = {n: (t["algo"], t["proto"]) for n, t in parsed["tuning"].items() if n in DECODE}
    assert got == want
    assert parsed["warnings"] == []


def test_only_rank0_prints_tuning_lines_but_both_confirm_the_environment() -> None:
    r0 = pf_merge.parse_nccl_log(log("nvlink", "ring-ll", 0))
    r1 = pf_merge.parse_nccl_log(log("nvlink", "ring-ll", 1))
    assert r1["tuning"] == {}
    assert r0["confirmed"] == r1["confirmed"] == {**RING_LL_VARS, "NCCL_ALGO": "Ring"}


@pytest.mark.parametrize(
    ("path", "name", "want"),
    [
        ("nvlink", "nccl-default", {"NCCL_NVLS_ENABLE": "0"}),
        ("nvlink", "tree-ll", {**RING_LL_VARS, "NCCL_ALGO": "Tree"}),
        ("p2p-off", "default-nop2p", {"NCCL_NVLS_ENABLE": "0", "NCCL_P2P_DISABLE": "1"}),
        # with P2P disabled NCCL never reads NCCL_P2P_LEVEL, so it does not confirm it
        (
            "p2p-off",
            "tree-ll-nop2p",
            {
                **{k: v for k, v in RING_LL_VARS.items() if k != "NCCL_P2P_LEVEL"},
                "NCCL_ALGO": "Tree",
                "NCCL_P2P_DISABLE": "1",
            },
        ),
    ],
)
def test_set_by_environment_variables(path: str, name: str, want: dict) -> None:
    for rank in (0, 1):
        assert pf_merge.parse_nccl_log(log(path, name, rank))["confirmed"] == want


def test_log_parser_reads_the_same_lines_with_their_device() -> None:
    text = log("p2p-off", "default-nop2p", 0)
    records = list(loglines.iter_records(text.splitlines()))
    tuning = [r for r in records if r["kind"] == "nccl_tuning"]
    assert len(tuning) == text.count(" Bytes -> Algo ")  # one record per TUNING line
    assert {r["device"] for r in tuning} == {0}
    big = [r for r in tuning if r["bytes"] == 917504]
    assert big and {(r["algo"], r["proto"]) for r in big} == {("RING", "SIMPLE")}
    assert all(r["channel_lo"] == 0 and r["channel_hi"] >= 0 for r in big)
    env = {r["var"]: r["value"] for r in records if r["kind"] == "nccl_env"}
    assert env == {"NCCL_NVLS_ENABLE": "0", "NCCL_P2P_DISABLE": "1"}
    versions = {r["version"] for r in records if r["kind"] == "nccl_version"}
    assert versions == {"2.28.9+cuda13.0"}
    rank1 = list(loglines.iter_records(log("p2p-off", "default-nop2p", 1).splitlines()))
    assert not [r for r in rank1 if r["kind"] == "nccl_tuning"]
    assert {r["device"] for r in rank1 if r["kind"] == "nccl_env"} == {1}


@pytest.mark.parametrize("path", ["nvlink", "p2p-off"])
def test_real_report_two_ranks_every_profile_ok(path: str) -> None:
    rep = report(path)
    assert rep["world_size"] == 2 and rep["backend"] == "nccl"
    assert rep["tokens"] == list(preflight.DEFAULT_TOKENS)
    assert len(rep["profiles"]) == 7 and not rep["summary"]["failed"]
    for prof in rep["profiles"]:
        assert prof["env_verified"] and all(s["correct"] for s in prof["sizes"])
        assert [s["bytes"] for s in prof["sizes"]] == [
            7168 * 2 * t for t in preflight.DEFAULT_TOKENS
        ]


@pytest.mark.parametrize("path", ["nvlink", "p2p-off"])
def test_prefill_sizes_use_simple_unless_a_profile_forces_ll(path: str) -> None:
    profs = {p["profile"]: p for p in report(path)["profiles"]}
    largest = {n: p["sizes"][-1] for n, p in profs.items()}
    assert all(s["bytes"] == 117440512 for s in largest.values())
    assert (largest["nccl-default"]["nccl_algo"], largest["nccl-default"]["nccl_proto"]) == (
        "RING",
        "SIMPLE",
    )
    assert (largest["ring-ll"]["nccl_algo"], largest["ring-ll"]["nccl_proto"]) == ("RING", "LL")
    assert (largest["tree-ll"]["nccl_algo"], largest["tree-ll"]["nccl_proto"]) == ("TREE", "LL")


@pytest.mark.parametrize("path", ["nvlink", "p2p-off"])
def test_winners_on_a_real_report(path: str) -> None:
    rep = report(path)
    wins = pf_merge.winners(rep["profiles"])
    assert [w["bytes"] for w in wins] == [7168 * 2 * t for t in preflight.DEFAULT_TOKENS]
    for w in wins:
        figures = {
            p["profile"]: s["graph"]["batch"]["per_op_p50_us"]
            for p in rep["profiles"]
            for s in p["sizes"]
            if s["bytes"] == w["bytes"]
        }
        assert w["graph_us"] == figures
        assert all(figures[w["graph_winner"]] <= v for v in figures.values())
        assert w["graph_margin"] >= 1.0
        assert figures[w["graph_second"]] == pytest.approx(
            figures[w["graph_winner"]] * w["graph_margin"]
        )
    # at 112 MiB a profile that forces LL loses to NCCL's own SIMPLE on both paths
    last = wins[-1]
    assert last["graph_us"]["ring-ll"] > 3 * last["graph_us"]["nccl-default"]
    assert last["graph_winner_algo_proto"] == "RING/SIMPLE"


def test_winners_skip_wrong_sums_and_missing_figures() -> None:
    def size(us: float | None, correct: bool = True) -> dict:
        graph = {"batch": {"per_op_p50_us": us}} if us is not None else {}
        return {"bytes": 100, "tokens": 1, "correct": correct, "graph": graph, "eager": {}}

    profiles = [
        {"profile": "a", "sizes": [size(5.0, correct=False)]},
        {"profile": "b", "sizes": [size(9.0)]},
        {"profile": "c", "sizes": [size(None)]},
    ]
    (w,) = pf_merge.winners(profiles)
    assert w["graph_winner"] == "b" and w["graph_second"] is None and w["graph_us"] == {"b": 9.0}
    assert "eager_winner" not in w


def test_iteration_scaling_matches_what_the_real_run_used() -> None:
    rep = report("nvlink")
    for s in rep["profiles"][0]["sizes"]:
        want = {
            "iters": scaled(50, s["bytes"], preflight.SCALE_BYTES, 5),
            "graph_ops": scaled(20, s["bytes"], preflight.SCALE_BYTES, 2),
            "graph_replays": scaled(20, s["bytes"], preflight.SCALE_BYTES, 3),
        }
        assert {k: s["counts"][k] for k in want} == want
    assert scaled(50, 917504, 1 << 20, 5) == 50  # decode sizes: all iterations
    assert scaled(50, 1835008, 1 << 20, 5) == 29
    assert scaled(50, 117440512, 1 << 20, 5) == 5  # never below the floor
    assert scaled(3, 117440512, 1 << 20, 5) == 3  # never above the count asked for
    assert scaled(50, 117440512, 0, 5) == 50  # 0: no scaling


def test_cli_default_tokens_are_the_module_defaults() -> None:
    from fastverify.cli.preflight_cmd import preflight as command

    opt = next(p for p in command.params if p.name == "tokens")
    assert tuple(int(t) for t in opt.default.split(",")) == preflight.DEFAULT_TOKENS
    assert preflight.DEFAULT_TOKENS[-1] * 7168 * 2 <= 128 << 20  # prefill up to 128 MiB
