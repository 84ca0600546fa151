"""What the GPU rank scripts (preflight/worker.py, rehearse/worker.py, and
derive_tuner/worker.py) share.

Standard library only: a rank runs with exactly the profile's environment, without
fastverify on its import path, so each script puts this folder on `sys.path` and imports
this file alone. It loads the project's NCCL binding (`fastverify/nccl/pynccl.py`), its
durable-file module (`fastverify/durable.py`, for the rank's report) and FlashInfer's
PCIe-IPC driver (`pcie_ipc_worker.py` beside it) the same way.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    if not values:
        return None
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def replay_ms(
    torch: Any, graph: Any, replays: int, before: Callable[[], Any] | None = None
) -> list[float]:
    """`replays` back-to-back replays of a captured CUDA graph, each between two CUDA events
    on the current stream: the milliseconds of each, read after one synchronize (so no host
    round trip falls between the replays). `before`: enqueued ahead of each replay, outside
    its events (an input reset). `torch`: the rank's imported torch module."""
    pairs = []
    for _ in range(replays):
        if before is not None:
            before()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def err(exc: BaseException) -> str:
    """One line for a report: the exception's type and first line, at most 500 characters."""
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_pynccl() -> Any:
    """fastverify/nccl/pynccl.py: ncclAllReduce on the current stream, as SGLang calls it."""
    return sys.modules.get("fastverify_pynccl") or _load(
        "fastverify_pynccl", HERE.parents[1] / "nccl" / "pynccl.py"
    )


def load_pcie_ipc() -> Any:
    """pcie_ipc_worker.py: FlashInfer's PCIe-IPC workspace driven as SGLang drives it."""
    return sys.modules.get("fastverify_pcie_ipc_worker") or _load(
        "fastverify_pcie_ipc_worker", HERE / "pcie_ipc_worker.py"
    )


def load_durable() -> Any:
    """fastverify/durable.py: atomic writes and JSON-lines appends (standard library only)."""
    return sys.modules.get("fastverify_durable") or _load(
        "fastverify_durable", HERE.parents[1] / "durable.py"
    )


def write_report(path: str, doc: dict[str, Any]) -> None:
    """The rank's JSON report, written atomically: the orchestrator never reads half of one."""
    load_durable().atomic_write_json(path, doc, indent=1, sort_keys=False)
