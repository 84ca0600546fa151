"""Trace writer: kineto schema of the real fixture, 122 all-reduces per verify, timings from
the cost model, draft forwards kept outside verify spans, file naming, activities."""

from __future__ import annotations

import gzip
import itertools
import json
from collections import defaultdict
from pathlib import Path

import pytest

from fastverify.sim import costmodel, traces
from tests.support.field import RING_LL

FIXTURE = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "nccl-2.28.9-h200-1rank"
    / "torch-trace-cudagraph-3-verify-passes.json.gz"
)
AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def spans(events: list[dict], name_prefix: str) -> list[dict]:
    return [
        e
        for e in events
        if e.get("cat") == "gpu_user_annotation" and e["name"].startswith(name_prefix)
    ]


def inside(events: list[dict], span: dict) -> list[dict]:
    return [
        e
        for e in events
        if e.get("cat") == "kernel"
        and e["pid"] == span["pid"]
        and e["tid"] == span["tid"]
        and span["ts"] <= e["ts"]
        and e["ts"] + e["dur"] <= span["ts"] + span["dur"] + 1e-3
    ]


@pytest.fixture(scope="module")
def eagle_trace(tmp_path_factory: pytest.TempPathFactory) -> dict:
    path = tmp_path_factory.mktemp("t") / "x-TP-3.trace.json.gz"
    traces.write_trace(path, steps=6, mode="eagle3", tp_size=8, rank=3, env=RING_LL, pid=777)
    return load(path)


def test_schema_matches_real_fixture(eagle_trace: dict) -> None:
    real = load(FIXTURE)
    assert set(real) - {"traceEvents"} <= set(eagle_trace)
    assert eagle_trace["schemaVersion"] == real["schemaVersion"]
    assert eagle_trace["displayTimeUnit"] == "ms"
    assert set(eagle_trace["deviceProperties"][0]) == set(real["deviceProperties"][0])
    assert eagle_trace["distributedInfo"]["rank"] == 3
    assert eagle_trace["distributedInfo"]["world_size"] == 8
    keys_real: dict[tuple, set] = defaultdict(set)
    for e in real["traceEvents"]:
        keys_real[(e.get("ph"), e.get("cat"))] |= set(e)
    keys_ours: dict[tuple, set] = defaultdict(set)
    for e in eagle_trace["traceEvents"]:
        keys_ours[(e.get("ph"), e.get("cat"))] |= set(e)
    for kind in (
        ("X", "kernel"),
        ("X", "gpu_user_annotation"),
        ("X", "user_annotation"),
        ("X", "cuda_runtime"),
        ("s", "ac2g"),
        ("f", "ac2g"),
        ("M", None),
    ):
        assert keys_ours[kind] == keys_real[kind], kind
    real_kernel_args = next(set(e["args"]) for e in real["traceEvents"] if e.get("cat") == "kernel")
    ours_kernel_args = next(
        set(e["args"]) for e in eagle_trace["traceEvents"] if e.get("cat") == "kernel"
    )
    assert ours_kernel_args == real_kernel_args


def test_pid_tid_conventions(eagle_trace: dict) -> None:
    ev = eagle_trace["traceEvents"]
    assert {e["pid"] for e in ev if e.get("cat") in ("user_annotation", "cuda_runtime")} == {777}
    assert {(e["pid"], e["tid"]) for e in ev if e.get("cat") == "kernel"} == {(3, 7)}
    labels = {
        e["pid"]: e["args"]["labels"]
        for e in ev
        if e.get("ph") == "M" and e["name"] == "process_labels"
    }
    assert labels[777] == "CPU" and labels[3] == "GPU 3"


def test_122_allreduces_per_verify_and_drafts_outside(eagle_trace: dict) -> None:
    ev = eagle_trace["traceEvents"]
    verify = spans(ev, "step[VERIFY bs=1]")
    assert len(verify) == 6
    pred = costmodel.predict(RING_LL, "eagle3", 8, 1, True)
    for v in verify:
        ks = inside(ev, v)
        ars = [k for k in ks if k["name"] == AR]
        assert len(ars) == 122
        assert len(ks) == 61 * 8
        # kernels last the backend's own time; the launch gap idles the GPU after each
        own_us = pred.allreduce_count * (
            pred.allreduce_each_seconds * 1e6 - costmodel.LAUNCH_GAP_US
        )
        assert sum(k["dur"] for k in ars) == pytest.approx(own_us, rel=1e-3)
        assert v["dur"] == pytest.approx(
            (pred.verify_seconds - costmodel.GRAPH_LAUNCH_US * 1e-6) * 1e6, rel=1e-3
        )
    drafts = spans(ev, "step[DRAFT ")
    assert len(drafts) == 6 * 3  # per cycle at 3 steps: 2 drafter forwards + the extend
    for d in drafts:
        assert len([k for k in inside(ev, d) if k["name"] == AR]) == 2
        # (ts and dur are rounded to the ns: a draft that starts where a verify ends may
        # compare a float ulp inside it)
        assert not any(v["ts"] <= d["ts"] < v["ts"] + v["dur"] - 1e-6 for v in verify)
    all_ar = [e for e in ev if e.get("name") == AR]
    assert len(all_ar) == 6 * (122 + 3 * 2)
    # CPU ranges have a matching GPU range (same External id)
    cpu_ids = {e["args"]["External id"] for e in ev if e.get("cat") == "user_annotation"}
    gpu_ids = {e["args"]["External id"] for e in ev if e.get("cat") == "gpu_user_annotation"}
    assert cpu_ids == gpu_ids


def test_cycles_are_spaced_by_the_model(eagle_trace: dict) -> None:
    verify = spans(eagle_trace["traceEvents"], "step[VERIFY")
    pred = costmodel.predict(RING_LL, "eagle3", 8, 1, True)
    gaps = [b["ts"] - a["ts"] for a, b in itertools.pairwise(verify)]
    assert all(g == pytest.approx(pred.cycle_seconds * 1e6, rel=1e-3) for g in gaps)


def test_baseline_eager_and_tree(tmp_path: Path) -> None:
    env = dict(RING_LL, NCCL_ALGO="Tree")
    path = traces.write_trace(
        tmp_path / "b.trace.json.gz",
        steps=3,
        mode="baseline",
        tp_size=4,
        batch_size=2,
        env=env,
        cuda_graph=False,
    )
    ev = load(path)["traceEvents"]
    assert [s["name"] for s in spans(ev, "")] == ["step[DECODE bs=2]"] * 3
    assert not spans(ev, "draft")
    launches = [e for e in ev if e.get("name") == "cudaLaunchKernel"]
    assert len(launches) == 3 * 61 * 8  # eager: one launch per kernel
    tree_ar = [
        e for e in ev if e.get("name", "").startswith("ncclDevKernel_AllReduce_Sum_bf16_TREE")
    ]
    assert len(tree_ar) == 3 * 122


def test_cpu_only_activity_and_plain_json(tmp_path: Path) -> None:
    cycles = [traces.Cycle(1_790_000_000_000_000_000 + i * 40_000_000, 1) for i in range(2)]
    path = traces.write_rank_trace(
        tmp_path / "c.trace.json",
        rank=0,
        tp_size=2,
        cycles=cycles,
        env=RING_LL,
        mode="eagle3",
        cuda_graph=True,
        activities=("CPU",),
    )
    data = json.loads(path.read_text())
    cats = {e.get("cat") for e in data["traceEvents"]}
    assert "kernel" not in cats and "gpu_user_annotation" not in cats
    assert "user_annotation" in cats


def test_file_names_like_sglang() -> None:
    assert traces.trace_filename("1790000000.123", 2) == "1790000000.123-TP-2.trace.json.gz"
    assert traces.trace_filename("17.5", 0, "fv") == "fv-17.5-TP-0.trace.json.gz"


def test_large_trace_streams_quickly(tmp_path: Path) -> None:
    path = traces.write_trace(tmp_path / "big.trace.json.gz", steps=50)
    assert len(spans(load(path)["traceEvents"], "step[VERIFY")) == 50


@pytest.mark.parametrize(
    ("version", "verify", "drafts"),
    [("0.5.23", "step[VERIFY bs=1]", {"step[DRAFT bs=1]"}),
     ("0.5.20", "step[VERIFY bs=1]", {"step[DRAFT bs=1]"}),
     # 0.5.14 .. 0.5.19: the drafter's stages as spec_stage_span ranges (as the real
     # 0.5.17 trace on the H200), 0.5.11 .. 0.5.13 its forwards by forward-mode name
     ("0.5.15", "step[TARGET_VERIFY bs=1]", {"draft", "draft_extend"}),
     ("0.5.12", "step[TARGET_VERIFY bs=1]", {"step[DECODE bs=1]", "step[DRAFT_EXTEND_V2 bs=1]"}),
     ("0.5.10", None, set())],
)  # fmt: skip
def test_step_spans_are_named_as_the_played_release_names_them(
    tmp_path: Path, version: str, verify: str | None, drafts: set[str]
) -> None:
    from fastverify import traces as analysis

    path = tmp_path / f"{version}-TP-0.trace.json.gz"
    traces.write_trace(path, steps=4, mode="eagle3", tp_size=8, env=RING_LL,
                       sglang_version=version)  # fmt: skip
    events = load(path)["traceEvents"]
    names = {e["name"] for e in events if e.get("cat") == "gpu_user_annotation"}
    assert names == ({verify} | drafts if verify else set())
    # the analyzer finds the verify passes in either naming, and none without spans
    result = analysis.analyze_extract(analysis.extract(path), 0)
    assert result["verify_passes"] == (4 if verify else 0)
