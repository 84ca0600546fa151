"""`rehearse --batch-sizes/--tokens/--shard-of-tp` on CPUs: the grid's shard logic, its JSON
(the schema `spec plan` reads), the all-reduce sources, and real gloo rank processes.

The GPU runs of the same code are benchmarks/results/rehearse-grid-kimi-k2.5-shard-of-tp8-h200.json
(before the grid timed the drafter; its TP 2 cross-check beside it) and ...-h200-drafter.json."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify.experiments.preflight import hostcheck as pf_host
from fastverify.experiments.rehearse import grid, modelconfig

REPO = Path(__file__).resolve().parents[3]
CONFIGS = REPO / "examples" / "model-configs"
RESULTS = REPO / "benchmarks" / "results"
SCHEMA = [
    "kind", "model", "shard_of_tp", "ranks_run", "gpu", "batch_sizes", "tokens_per_seq",
    "forward_ms", "verify_decode_ratio", "drafter", "allreduce", "sources", "command",
]  # fmt: skip
needs_torch = pytest.mark.skipif(
    not pf_host.torch_available(),
    reason="TORCH IS NOT INSTALLED: the grid's rank processes need it; these tests did NOT run",
)


def ctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "rehearse", *args],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False, env=dict(os.environ),
    )  # fmt: skip


# ------------------------------------------------------------------ shapes only


def expected_cycle_ms(doc: dict, b: str, k: int) -> float:
    """spec plan's cycle from a grid, written out: target(k+1) + (k-1) draft steps + the
    extend over k+1 tokens, each with its all-reduces (the drafter's at its own count); at
    k = 0 SGLang's steps-0 pass: target(1) + the extend over 1 token."""
    fwd, arb, d = doc["forward_ms"][b], doc["allreduce"]["per_forward_ms"][b], doc["drafter"]
    t = str(k + 1)
    share = d["count_per_forward"] / doc["allreduce"]["count_per_forward"]
    step = d["step_ms"][b] + share * arb["1"]
    return fwd[t] + arb[t] + max(0, k - 1) * step + d["extend_ms"][b][t] + share * arb[t]


def test_shard_of_tp8_is_one_rank_of_kimi_k25_at_tp8() -> None:
    spec = modelconfig.load_spec(CONFIGS / "kimi-k2.5.json")
    drafter = modelconfig.load_spec(CONFIGS / "kimi-k2.5-eagle3.json")
    cfg = grid.GridConfig(str(CONFIGS / "kimi-k2.5.json"), shard_of_tp=8)
    job = grid.build_job(cfg, spec, 8, drafter)
    assert job["drafter"]["tp"] == 8 and job["drafter"]["hidden"] == drafter.hidden_size
    plan = job["target"]
    assert plan["tp"] == 8 and plan["heads_per_rank"] == spec.num_heads // 8
    assert plan["vocab_per_rank"] == -(-spec.vocab_size // 8)
    assert plan["moe"]["gate_up"] == [spec.hidden_size, 2 * spec.moe_intermediate_size // 8]
    assert plan["attention"]["o_proj"] == [(spec.num_heads // 8) * spec.v_head_dim, 7168]
    assert modelconfig.allreduces_per_forward(spec, 8) == 2 * spec.num_layers + 1 == 123
    # the memory estimate sees the largest batch and the widest routing window
    assert job["batch"] == 64 and job["draft_tokens"] == 7
    assert job["grid"] == {"batch_sizes": [1, 2, 4, 8, 16, 32, 64],
                           "tokens_per_seq": [1, 2, 3, 4, 5, 6, 7, 8]}  # fmt: skip


def test_refuses_a_grid_without_the_decode_column() -> None:
    with pytest.raises(grid.GridError, match="include 1"):
        grid.check(grid.GridConfig("x", tokens=(2, 4)))
    with pytest.raises(grid.GridError, match="allreduce-backend"):
        grid.check(grid.GridConfig("x", allreduce_backend="mpi"))
    res = ctl("--model-config", str(CONFIGS / "tiny-moe.json"), "--backend", "gloo",
              "--tokens", "2,4")  # fmt: skip
    assert res.returncode == 2 and "include 1" in res.stderr, res.stderr
    res = ctl("--model-config", str(CONFIGS / "tiny-moe.json"), "--backend", "gloo",
              "--shard-of-tp", "2", "ring-ll")  # fmt: skip
    assert res.returncode == 2 and "runs no NCCL profile; drop ring-ll" in res.stderr


# ------------------------------------------------------------------ all-reduce sources


def test_loglog_interpolation() -> None:
    pts = [(1000.0, 10.0), (100000.0, 1000.0)]
    assert grid.loglog(pts, 1000) == 10.0 and grid.loglog(pts, 100000) == 1000.0
    assert math.isclose(grid.loglog(pts, 10000), 100.0)  # halfway in log-log
    assert grid.loglog(pts, 10) == 10.0  # latency-bound below the first point
    assert math.isclose(grid.loglog(pts, 200000), 2000.0)  # linear in bytes above the last


def test_published_table_scaled_by_hops_and_labelled() -> None:
    pts8, label8 = grid.published_points("nccl", 8)
    assert pts8[0] == (12 * 1024, 205.1) and "scaled" not in label8
    assert label8.startswith("published:") and "pcie_ipc_ar.py" in label8
    pts2, label2 = grid.published_points("pcie_ipc", 2)
    assert math.isclose(pts2[0][1], 5.3 * 2 / 14) and "scaled x0.143 to TP 2" in label2


def test_allreduce_from_the_hosts_preflight() -> None:
    report = json.loads((RESULTS / "preflight-h200x2-2gpu-nvlink.json").read_text())
    cfg = grid.GridConfig(
        str(CONFIGS / "kimi-k2.5.json"), batch_sizes=(1, 64), tokens=(1, 4),
        allreduce_from=str(RESULTS / "preflight-h200x2-2gpu-nvlink.json"),
    )  # fmt: skip
    table = grid.allreduce_table(cfg, 2, 7168, 123)
    first = next(p for p in report["profiles"] if p["status"] == "ok")
    row = next(s for s in first["sizes"] if s["bytes"] == 7168 * 2)
    assert table["source"] == "preflight:preflight-h200x2-2gpu-nvlink.json"
    assert first["profile"] in table["detail"] and "by_backend" not in table
    want = 123 * row["graph"]["batch"]["per_op_p50_us"] / 1e3
    assert math.isclose(table["per_forward_ms"]["1"]["1"], want)
    # 4 tokens at batch 1 is a measured size too (57344 bytes)
    row4 = next(s for s in first["sizes"] if s["bytes"] == 7168 * 2 * 4)
    assert math.isclose(
        table["per_forward_ms"]["1"]["4"], 123 * row4["graph"]["batch"]["per_op_p50_us"] / 1e3
    )
    with pytest.raises(grid.GridError, match="preflight --nproc 8"):
        grid.allreduce_table(cfg, 8, 7168, 123)  # a 2-GPU report cannot price TP 8
    with pytest.raises(grid.GridError, match="no profile 'nope'"):
        grid.allreduce_table(grid.GridConfig(**{**cfg.__dict__, "allreduce_profile": "nope"}),
                             2, 7168, 123)  # fmt: skip


def test_same_gpu_preflight_is_refused_as_a_host_measurement() -> None:
    path = RESULTS / "preflight-pcie-ipc-same-gpu-ranks-not-pcie-h200.json"
    cfg = grid.GridConfig(str(CONFIGS / "kimi-k2.5.json"), allreduce_from=str(path))
    with pytest.raises(grid.GridError, match="not a PCIe measurement"):
        grid.allreduce_table(cfg, 2, 7168, 123)


# ------------------------------------------------------------------ real gloo ranks


@needs_torch
def test_shard_of_tp_runs_one_rank_and_writes_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "grid.json"
    res = ctl("--model-config", str(CONFIGS / "tiny-moe.json"), "--backend", "gloo",
              "--shard-of-tp", "2", "--batch-sizes", "1,2,4", "--tokens", "1,2,3",
              "--steps", "2", "--pool-gb", "0.01", "-o", str(out), "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert list(doc) == SCHEMA and json.loads(out.read_text()) == doc
    assert doc["kind"] == "rehearse-grid" and doc["shard_of_tp"] == 2 and doc["ranks_run"] == 1
    assert doc["batch_sizes"] == [1, 2, 4] and doc["tokens_per_seq"] == [1, 2, 3]
    spec = modelconfig.load_spec(CONFIGS / "tiny-moe.json")
    for b in ("1", "2", "4"):
        assert set(doc["forward_ms"][b]) == {"1", "2", "3"}
        assert all(v > 0 for v in doc["forward_ms"][b].values())
        assert doc["verify_decode_ratio"][b]["1"] == 1.0
        for t in ("2", "3"):
            ratio = doc["forward_ms"][b][t] / doc["forward_ms"][b]["1"]
            assert math.isclose(doc["verify_decode_ratio"][b][t], ratio)
    ar = doc["allreduce"]
    assert ar["count_per_forward"] == modelconfig.allreduces_per_forward(spec, 2) == 7
    assert ar["source"].startswith("published:") and "nccl column" in ar["source"]
    pts, _ = grid.published_points("nccl", 2)
    bytes_4x3 = 4 * 3 * spec.hidden_size * 2
    assert math.isclose(ar["per_forward_ms"]["4"]["3"], 7 * grid.loglog(pts, bytes_4x3) / 1e3)
    assert set(ar["by_backend"]) == {"nccl", "pcie_ipc"}
    assert doc["command"].startswith("fastverifyctl rehearse ") and "--shard-of-tp 2" in doc[
        "command"]  # fmt: skip
    assert "gloo" in doc["sources"]["forward_ms"]
    # the drafter (estimated from tiny-moe: no --draft-config), timed per cell
    d = doc["drafter"]
    assert d["estimated"] is True and "estimate" in doc["sources"]["drafter"]
    assert d["count_per_forward"] == modelconfig.plan(modelconfig.estimated_drafter(spec), 2)[
        "allreduce_per_forward"]  # fmt: skip
    assert set(d["step_ms"]) == {"1", "2", "4"} and all(v > 0 for v in d["step_ms"].values())
    assert all(set(row) == {"1", "2", "3"} for row in d["extend_ms"].values())
    # spec plan's reader: a cycle at k steps = target(k+1) + (k-1) draft steps + extend(k+1),
    # each with its all-reduces (the drafter's at its own count per forward)
    from fastverify.speculation import costs

    got = costs.from_rehearse_grid(out)
    for b in ("1", "2", "4"):
        for k in (0, 1, 2):
            assert math.isclose(got.table[int(b)][k] * 1e3, expected_cycle_ms(doc, b, k)), (b, k)
    assert "drafter measured" in got.source


@needs_torch
def test_without_shard_the_grid_runs_every_rank_at_its_tp(tmp_path: Path) -> None:
    cfg = grid.GridConfig(
        str(CONFIGS / "tiny-dense.json"), batch_sizes=(1, 2), tokens=(1, 2), nproc=2,
        backend="gloo", steps=2, pool_gb=0.01, logs_dir=str(tmp_path),
    )  # fmt: skip
    doc = grid.run_grid(cfg, "test")
    assert doc["ranks_run"] == 2 and doc["shard_of_tp"] == 2
    job = json.loads((tmp_path / "grid.job.json").read_text())
    assert job["target"]["tp"] == 2
    ranks = [json.loads((tmp_path / f"grid.rank{r}.json").read_text()) for r in (0, 1)]
    for b, t in (("1", "1"), ("2", "2")):  # the slowest rank's p50 per cell
        p50 = max(r["grid"]["cells"][b][t]["p50_ms"] for r in ranks)
        assert doc["forward_ms"][b][t] == p50


def test_the_h200_grid_is_what_spec_plan_reads() -> None:
    """The committed TP 8 shard grid (one H200, the Kimi-K2.5 EAGLE-3 drafter beside it) loads
    in `spec plan --costs`'s reader: the cycle at k steps is SGLang's, from the grid's parts."""
    from fastverify.speculation import costs

    path = RESULTS / "rehearse-grid-kimi-k2.5-shard-of-tp8-h200-drafter.json"
    doc = json.loads(path.read_text())
    assert list(doc) == SCHEMA and doc["shard_of_tp"] == 8 and doc["ranks_run"] == 1
    assert doc["drafter"]["model"] == "kimi-k2.5-eagle3" and not doc["drafter"]["estimated"]
    got = costs.from_rehearse_grid(path)
    for b in doc["batch_sizes"]:
        for t in doc["tokens_per_seq"]:
            want = expected_cycle_ms(doc, str(b), t - 1)
            assert math.isclose(got.table[b][t - 1] * 1e3, want)
        fwd, arb = doc["forward_ms"][str(b)], doc["allreduce"]["per_forward_ms"][str(b)]
        assert math.isclose(got.decode(b) * 1e3, fwd["1"] + arb["1"])  # a baseline server
        # the steps-0 pass's draft extend: +1.4-2.6% per step on this grid
        assert 1.013 < got.cycle(b, 0) / got.decode(b) < 1.027, b
        # without the extend (SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1): the steps-0 pass
        # less the drafter's extend over one token, with its all-reduces
        share = doc["drafter"]["count_per_forward"] / doc["allreduce"]["count_per_forward"]
        ext = doc["drafter"]["extend_ms"][str(b)]["1"] + share * arb["1"]
        assert math.isclose(got.zero_skip[b] * 1e3, expected_cycle_ms(doc, str(b), 0) - ext)
    assert doc["allreduce"]["source"] in got.source and "drafter measured" in got.source


def test_a_grid_recorded_without_the_drafter_still_loads_and_says_so() -> None:
    """The first H200 grid (recorded before the grid timed the drafter): the drafter counts 0."""
    old = RESULTS / "rehearse-grid-kimi-k2.5-shard-of-tp8-h200.json"
    doc = json.loads(old.read_text())
    assert "drafter" not in doc
    from fastverify.speculation import costs

    got = costs.from_rehearse_grid(old)
    fwd, arb = doc["forward_ms"]["8"], doc["allreduce"]["per_forward_ms"]["8"]
    assert math.isclose(got.table[8][3] * 1e3, fwd["4"] + arb["4"])
    assert "drafter not measured" in got.source


def test_a_grid_prices_the_steps0_pass_without_its_extend_as_that_pass_less_the_extend(
    tmp_path: Path,
) -> None:
    """A grid of the shape SGLang 0.5.17 measured on an H100 (8B, TP 1; the steps-0 pass with
    and without SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 in tests/fixtures/sglang-0.5.17-
    h100-spec8b/): its 1-token forward the measured pass without the extend, the drafter's
    1-token extend what the flag saved. The plan's figure is the steps-0 pass less that
    extend, and what the flag saves is the real run's."""
    from fastverify.speculation import costs

    fix = REPO / "tests" / "fixtures" / "sglang-0.5.17-h100-spec8b"
    main = json.loads((fix / "spec-costs-8b.json").read_text())["cycle_ms"]
    skip = json.loads((fix / "spec-costs-steps0-skip.json").read_text())["cycle_ms"]
    sizes = sorted(main, key=int)
    doc = {
        "kind": "rehearse-grid", "model": "llama-3.1-8b", "shard_of_tp": 1, "gpu": "H100",
        "forward_ms": {b: {"1": skip[b]["0"], "2": main[b]["1"]} for b in sizes},
        "allreduce": {"count_per_forward": 0, "per_forward_ms": {}},
        "drafter": {"model": "eagle3", "count_per_forward": 0,
                    "step_ms": {b: 0.3 for b in sizes},
                    "extend_ms": {b: {"1": main[b]["0"] - skip[b]["0"], "2": 0.4}
                                  for b in sizes}},
    }  # fmt: skip
    path = tmp_path / "grid-8b.json"
    path.write_text(json.dumps(doc))
    got = costs.from_rehearse_grid(path)
    for b in sizes:
        ext = doc["drafter"]["extend_ms"][b]["1"]
        assert math.isclose(got.zero_skip[int(b)] * 1e3, got.cycle(int(b), 0) * 1e3 - ext)
        saves = 1 - got.zero_skip[int(b)] / got.cycle(int(b), 0)
        assert math.isclose(saves, 1 - skip[b]["0"] / main[b]["0"], rel_tol=1e-9), b
