"""The all-reduce log lines of SGLang 0.5.23 (`pcie_ipc_ar.py`, `parallel_state.py`): their
texts and formats, and `parse_line`, which reads one into a record of kind `allreduce`."""

from __future__ import annotations

import re
from typing import Any

from fastverify.sglang.allreduce.constants import BF16_BYTES, PCIE_IPC

ENABLED_TEXT = "FlashInfer PCIe-IPC all-reduce enabled (world="
BUILT_TEXT = "FlashInfer PCIe-IPC workspace built (world="
NO_COMM_TEXT = "this FlashInfer build has no pcie_ipc_comm; falling back to NCCL all-reduce."
BUILD_FAILED_TEXT = "FlashInfer PCIe-IPC workspace (max_numel="
BUILD_FAILED_TAIL = "reductions stay on NCCL"
DETERMINISTIC_TEXT = "Deterministic inference is on; leaving PCIe-IPC all-reduce off."
DTYPE_TEXT = "FlashInfer PCIe-IPC all-reduce serves bf16 only;"
SETUP_FAILED_TEXT = "Setup FlashInfer PCIe-IPC allreduce failed with"  # parallel_state.py
FIXED_WIDTH_TEXT = "FlashInfer PCIe-IPC is sizing its workspace from the fixed fallback width"
AUTOTUNED_TEXT = "FlashInfer PCIe-IPC all-reduce autotuned"
AUTOTUNE_FAILED_TEXT = "FlashInfer PCIe-IPC autotune failed"
AUTOTUNE_OFF_TEXT = "--disable-flashinfer-autotune is set; keeping FlashInfer's seed policy."
CUSTOM_PCIE_TEXT = "is disabled because it's not supported on more than two PCIe-only GPUs."
# the exact formats (for the sim; tests/contract/ compares them with the source)
ENABLED_FORMAT = (
    "FlashInfer PCIe-IPC all-reduce enabled (world={world}, workspace sized on first reduction)"
)
BUILT_FORMAT = (
    "FlashInfer PCIe-IPC workspace built (world={world}, max_numel={max_numel}, hidden={hidden})"
)
NO_COMM_FORMAT = f"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is set but {NO_COMM_TEXT}"
BUILD_FAILED_FORMAT = (
    "FlashInfer PCIe-IPC workspace (max_numel={max_numel}) failed: {error}; reductions stay on NCCL"
)
DETERMINISTIC_FORMAT = (
    f"{DETERMINISTIC_TEXT} Its kernels pick a tactic per shape, so the reduction order "
    "would follow the batch shape."
)
DTYPE_FORMAT = f"{DTYPE_TEXT} {{dtype}} reductions stay on NCCL."
AUTOTUNED_FORMAT = f"{AUTOTUNED_TEXT} {{n}} shape(s) (hidden={{hidden}}, rows={{rows}})"


_ENABLED_RE = re.compile(r"FlashInfer PCIe-IPC all-reduce enabled \(world=(\d+)")
_BUILT_RE = re.compile(
    r"FlashInfer PCIe-IPC workspace built \(world=(\d+), max_numel=(\d+), hidden=(\d+)\)"
)
_FAILED_RE = re.compile(r"FlashInfer PCIe-IPC workspace \(max_numel=(\d+)\) failed: (.*?); red")
_AUTOTUNED_RE = re.compile(r"FlashInfer PCIe-IPC all-reduce autotuned (\d+) shape")


def parse_line(line: str) -> dict[str, Any] | None:
    """An all-reduce backend line of SGLang 0.5.23 -> `{"kind": "allreduce", "event": ...}`
    (events: enabled, built, autotuned, fallback); None for any other line. `tp_rank` is
    added by the caller's prefix parser."""
    if "PCIe-IPC" not in line and "pcie_ipc" not in line:
        return None
    rec: dict[str, Any] = {"kind": "allreduce", "backend": PCIE_IPC}
    m = _BUILT_RE.search(line)
    if m:
        world, numel, hidden = (int(g) for g in m.groups())
        rec.update(event="built", world=world, max_numel=numel, hidden=hidden)
        rec["max_bytes"] = numel * BF16_BYTES
        return rec
    m = _ENABLED_RE.search(line)
    if m:
        rec.update(event="enabled", world=int(m.group(1)))
        return rec
    m = _AUTOTUNED_RE.search(line)
    if m:
        rec.update(event="autotuned", shapes=int(m.group(1)))
        return rec
    for text, why in (
        (NO_COMM_TEXT, "no_pcie_ipc_comm"),
        (DETERMINISTIC_TEXT, "deterministic"),
        (DTYPE_TEXT, "dtype"),
        (SETUP_FAILED_TEXT, "setup_failed"),
    ):
        if text in line:
            rec.update(event="fallback", why=why, message=_message(line, text))
            return rec
    m = _FAILED_RE.search(line)
    if m:
        rec.update(event="fallback", why="workspace_failed", message=_message(line, m.group(0)))
        rec["max_numel"] = int(m.group(1))
        return rec
    if (
        AUTOTUNE_FAILED_TEXT in line
        or "keeps the seed policy" in line
        or ("keeping the seed policy" in line or "seed policy instead" in line)
    ):
        rec.update(event="seed_policy", message=_message(line, "FlashInfer PCIe-IPC"))
        return rec
    return None


def _message(line: str, anchor: str) -> str:
    """The message part of a log line (from the first known word on)."""
    for start in ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "Deterministic", "Setup", "FlashInfer"):
        i = line.find(start)
        if i >= 0:
            return line[i:].strip()
    i = line.find(anchor)
    return line[i if i >= 0 else 0 :].strip()
