"""Trace analysis of verify passes whose TP all-reduces are FlashInfer PCIe-IPC kernels.

Constructed traces (tests/fixtures/tracegen.py: known truth from the construction, kernel
names as kineto demangles FlashInfer 0.7.2's templates, 0.5.23 span names) and traces the
sim writes with PCIe-IPC on. Drafter and non-verify all-reduces stay excluded; PCIe-IPC
all-gather kernels are not all-reduces; each backend's count and time per verify is
reported beside the total.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify import traces
from fastverify.sim import traces as sim_traces
from tests.fixtures import tracegen

VERIFY_US = [10_000.0, 20_000.0, 30_000.0, 40_000.0]


@pytest.mark.parametrize("family", ["pcie_ipc", "pcie_ipc_tp2"])
@pytest.mark.parametrize("pretty", [False, True])
def test_pcie_ipc_verify_all_reduces_are_counted_exactly(
    tmp_path: Path, family: str, pretty: bool
) -> None:
    doc, truth = tracegen.build_rank(
        0,
        verify_us=VERIFY_US,
        ar_per_verify=122,
        ar_dur_us=12.0,
        family=family,
        naming="0.5.23",
        draft_family="dev",  # the drafter's all-reduces on NCCL: outside every verify
        gathers_per_verify=3,
    )
    path = tracegen.write(tmp_path / "w-TP-0.trace.json.gz", doc, pretty=pretty)
    result = traces.analyze_file(path)
    assert result["verify_passes"] == truth.verify_passes == 4
    assert result["allreduce_per_verify"] == pytest.approx(122.0)
    assert result["allreduce_ms_per_verify"] == pytest.approx(122 * 12.0 / 1000.0)
    assert result["allreduce_share"] == pytest.approx(truth.allreduce_share)
    assert result["allreduce_backends"] == {
        "pcie_ipc": {"per_verify": 122.0, "ms_per_verify": pytest.approx(1.464)}
    }
    # 4 x (122 verify + 2 draft + 1 outside) all-reduce kernels on this GPU
    assert result["allreduce_calls"] == truth.allreduce_calls == 500

    def kernels(ex: traces.Extract) -> list[tuple]:  # the fast path keeps no correlation
        return [(k.device, k.ts, k.dur, k.name) for k in ex.kernels]

    assert kernels(traces.exact_events(path)) == kernels(traces.scan_events(path))


def test_mixed_backends_per_verify(tmp_path: Path) -> None:
    """PCIe-IPC in the verify passes, NCCL outside them: only the verify's are counted, and
    the per-backend split says which served."""
    doc, _ = tracegen.build_rank(
        1,
        verify_us=[30_000.0] * 3,
        ar_per_verify=10,
        ar_dur_us=15.0,
        family="pcie_ipc",
        naming="0.5.23",
        outside_family="dev",
        outside_ar=4,
    )
    path = tracegen.write(tmp_path / "m-TP-1.trace.json.gz", doc)
    result = traces.analyze_file(path)
    assert result["allreduce_per_verify"] == pytest.approx(10.0)
    assert set(result["allreduce_backends"]) == {"pcie_ipc"}
    assert result["allreduce_calls"] == 3 * (10 + 2 + 4)


def test_names_of_other_kernels_are_not_all_reduces() -> None:
    assert traces.is_allreduce_kernel(tracegen.KERNEL_NAMES["pcie_ipc"])
    assert not traces.is_allreduce_kernel(tracegen.PCIE_IPC_ALL_GATHER)
    assert traces.allreduce_backend(tracegen.KERNEL_NAMES["custom"]) == "custom"
    assert traces.allreduce_backend(tracegen.KERNEL_NAMES["dev"]) == "nccl"
    assert traces.allreduce_backend(tracegen.KERNEL_NAMES["pcie_ipc_tp2"]) == "pcie_ipc"


def test_sim_traces_with_pcie_ipc_two_ranks(tmp_path: Path) -> None:
    bound = 128 * 7168 * 2  # SGLang's decode-sized workspace for the sim (bs 32 x 4 tokens)
    for rank in (0, 1):
        sim_traces.write_trace(
            tmp_path / f"sim-TP-{rank}.trace.json.gz",
            steps=5,
            mode="eagle3",
            tp_size=8,
            rank=rank,
            pcie_ipc_max_bytes=bound,
        )
    analysis = traces.analyze_path(tmp_path)
    for r in analysis["ranks"]:
        assert r["verify_passes"] == 5
        assert r["allreduce_per_verify"] == pytest.approx(122.0)
        assert set(r["allreduce_backends"]) == {"pcie_ipc"}
    # the CLI prints the same figures (before this, 0.0 per verify for both ranks)
    out = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "trace", "analyze", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    ranks = json.loads(out.stdout)["ranks"]
    assert [r["allreduce_per_verify"] for r in ranks] == [122.0, 122.0]


def test_cli_names_the_backend(tmp_path: Path) -> None:
    doc, _ = tracegen.build_rank(0, verify_us=[30_000.0] * 2, ar_per_verify=122,
                                 ar_dur_us=12.0, family="pcie_ipc", naming="0.5.23")  # fmt: skip
    tracegen.write(tmp_path / "c-TP-0.trace.json.gz", doc)
    out = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "trace", "analyze", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "rank 0: per verify by backend: FlashInfer PCIe-IPC 122.0 (1.46 ms)" in out.stdout
