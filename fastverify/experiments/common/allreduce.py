"""Which TP all-reduce backend an experiment candidate measures, and whether it can here.

A profile whose environment asks SGLang 0.5.23 for FlashInfer's PCIe-IPC all-reduce
(`fastverify.sglang.allreduce.requested_backend`) is a `pcie_ipc` candidate: its rank
workers (rehearse, preflight) hand the all-reduces within SGLang's bound to
`flashinfer.comm.PcieIpcAllReduceWorkspace`, as SGLang's `PcieIpcCommunicator` does, and
NCCL the rest. `plan(env, world, backend, python, max_numel)` says so, or why the candidate
is skipped: the gloo test backend (no GPU), a world size the kernels do not build
(2/4/8 only), or FlashInfer with `pcie_ipc_comm` not importable by the ranks' interpreter
(checked in that interpreter, once). A skipped candidate is reported with its reason and
never measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastverify.host.flashinfer import flashinfer_pcie_ipc
from fastverify.sglang import allreduce


@dataclass(frozen=True)
class Candidate:
    backend: str  # "pcie_ipc" | "nccl"
    skip: str | None = None  # why it is not measured here
    job: Mapping[str, Any] | None = None  # what the workers need (None: plain NCCL)


def plan(
    env: Mapping[str, str],
    world: int,
    backend: str,
    python: str = "",
    *,
    max_numel: int,
) -> Candidate:
    """The candidate's all-reduce backend (see the module docstring). `max_numel`: SGLang's
    workspace bound for this run (decode rows x hidden, or SGLANG_PCIE_IPC_MAX_NUMEL)."""
    if allreduce.requested_backend(env) != allreduce.PCIE_IPC:
        return Candidate(allreduce.NCCL)
    if backend != "nccl":
        return Candidate(allreduce.PCIE_IPC, skip="the gloo test backend runs no GPU kernels")
    if world not in allreduce.PCIE_IPC_WORLD_SIZES:
        return Candidate(
            allreduce.PCIE_IPC,
            skip=f"world size {world}: FlashInfer's PCIe-IPC kernels build 2, 4 or 8 ranks",
        )
    ok, message = flashinfer_pcie_ipc(python)
    if not ok:
        return Candidate(allreduce.PCIE_IPC, skip=f"FlashInfer PCIe-IPC unavailable: {message}")
    override = allreduce.env_int(env.get(allreduce.MAX_NUMEL_VAR))
    return Candidate(
        allreduce.PCIE_IPC,
        job={"backend": allreduce.PCIE_IPC, "max_numel": override or max_numel},
    )
