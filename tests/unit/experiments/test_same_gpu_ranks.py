"""Ranks sharing one GPU (`--share-gpu`): what preflight and rehearse do with them.

NCCL refuses a communicator whose ranks share a device (seen on one H200, NCCL 2.28.9:
`NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60`,
ncclCommInitRank -> invalid usage, benchmarks/results/gpu-run-2026-12-01/), so NCCL
candidates are skipped with that reason and a PCIe-IPC candidate runs without an NCCL
communicator, only at the sizes FlashInfer's kernels take. The GPU runs are
benchmarks/results/*same-gpu-ranks-not-pcie*.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastverify.experiments.common import allreduce as candidate
from fastverify.experiments.common.ranks import device_of, rank_env
from fastverify.experiments.preflight import hostcheck as pf_host
from fastverify.experiments.preflight import run as pf
from fastverify.nccl.pynccl import SAME_GPU_NCCL

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


def test_ranks_are_placed_round_robin_only_when_sharing() -> None:
    assert [device_of(r, 2, 1) for r in (0, 1)] == [0, 0]
    assert [device_of(r, 4, 2) for r in range(4)] == [0, 1, 0, 1]
    assert [device_of(r, 2, 2) for r in (0, 1)] == [0, 1]  # one GPU per rank
    assert [device_of(r, 2, 0) for r in (0, 1)] == [0, 1]  # gloo: no GPUs counted
    env = rank_env({"A": "1"}, 1, 2, 1234, Path("/tmp/x.log"), gpus=1)
    assert env["LOCAL_RANK"] == "0" and env["RANK"] == "1" and env["A"] == "1"


def test_more_ranks_than_gpus_needs_share_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pf_host, "torch_available", lambda python="": True)
    monkeypatch.setattr(pf_host, "visible_gpus", lambda: 1)
    with pytest.raises(pf_host.TooFewGpus, match="--share-gpu") as err:  # usage: exit 2
        pf_host.rank_count("preflight", "nccl", 2)
    assert "not a PCIe measurement" in str(err.value)
    assert pf_host.rank_count("preflight", "nccl", 2, share_gpu=True) == 2
    assert pf_host.shared_gpus("nccl", 2) == 1 and pf_host.shared_gpus("nccl", 1) == 0
    assert pf_host.shared_gpus("gloo", 2) == 0


def test_nccl_candidates_are_skipped_with_ncclss_reason_pcie_ipc_runs() -> None:
    nccl = candidate.Candidate("nccl")
    pcie = candidate.Candidate("pcie_ipc", job={"backend": "pcie_ipc", "max_numel": 7168})
    assert pf_host.same_gpu_plan(nccl, 1).skip == SAME_GPU_NCCL
    assert "Duplicate GPU detected" in SAME_GPU_NCCL
    assert pf_host.same_gpu_plan(pcie, 1) is pcie
    assert pf_host.same_gpu_plan(nccl, 0) is nccl  # one GPU per rank: untouched


def test_only_the_sizes_flashinfer_takes_run_on_shared_gpus() -> None:
    cfg = pf.PreflightConfig(tokens=(1, 4, 64, 128, 8192), hidden_size=7168)
    run_cfg, not_run = pf.same_gpu_sizes(cfg, 64 * 7168)
    assert run_cfg.tokens == (1, 4, 64) and not_run["tokens"] == [128, 8192]
    assert SAME_GPU_NCCL in not_run["reason"] and str(64 * 7168) in not_run["reason"]
    cfg = pf.PreflightConfig(sizes_bytes=(1024, 10_000_000))
    run_cfg, not_run = pf.same_gpu_sizes(cfg, 64 * 7168)
    assert run_cfg.sizes_bytes == (1024,) and run_cfg.tokens == ()
    assert not_run["sizes_bytes"] == [10_000_000]


def test_the_committed_runs_say_what_they_are() -> None:
    """The H200 runs are labelled in the JSON and the file name, NCCL was skipped with its
    reason, and the PCIe-IPC candidate ran FlashInfer's kernels with exact sums."""
    pre = json.loads((RESULTS / "preflight-pcie-ipc-same-gpu-ranks-not-pcie-h200.json").read_text())
    assert pre["label"] == pf_host.SAME_GPU_LABEL and pre["same_gpu_ranks"] is True
    by_name = {p["profile"]: p for p in pre["profiles"]}
    assert by_name["nccl-default"]["status"] == "skipped"
    assert "Duplicate GPU detected" in by_name["nccl-default"]["reason"]
    ipc = by_name["pcie-ipc"]
    assert ipc["status"] == "ok" and ipc["allreduce_backend"] == "pcie_ipc"
    assert all(s["backend"] == "pcie_ipc" and s["correct"] for s in ipc["sizes"])
    assert ipc["sizes_not_run"]["tokens"] == [128, 512, 2048, 8192]
    reh = json.loads((RESULTS / "rehearse-pcie-ipc-same-gpu-ranks-not-pcie-h200.json").read_text())
    assert reh["label"] == pf_host.SAME_GPU_LABEL
    row = next(p for p in reh["profiles"] if p["profile"] == "pcie-ipc")
    assert row["status"] == "ok" and row["allreduce_check"] is True
    assert row["trace"]["allreduce_per_verify"] == [123.0, 123.0]
