"""The rank side of the GPU experiments: what the rank scripts (preflight/worker.py,
rehearse/worker.py and derive_tuner/worker.py) share. `RankContext` is the setup every rank
does first (its place in the group from RANK/WORLD_SIZE/LOCAL_RANK, its device and dtype,
its process group with the communicator set up inside `open_group`'s time, its timed calls
`time_ms` and its CUDA graphs captured after a side-stream warm-up `capture_graph`), `report_head`
and `init_failed` the fields every report starts with or fails with; the orchestrator side
is ranks.py.

Standard library only: a rank runs with exactly the profile's environment, without
fastverify on its import path, so each script puts this folder on `sys.path` and imports
this file alone. It loads the project's NCCL binding (`fastverify/nccl/pynccl.py`), its
durable-file module (`fastverify/durable.py`, for the rank's report), its percentile
(`fastverify/percentiles.py`) and FlashInfer's PCIe-IPC driver (`pcie_ipc_worker.py`
beside it) the same way.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def event_ms(
    torch: Any, fn: Callable[[], Any], n: int, before: Callable[[], Any] | None = None
) -> list[float]:
    """`n` back-to-back calls of `fn`, each between two CUDA events on the current stream:
    the milliseconds of each, read after one synchronize (so no host round trip falls
    between the calls). `before`: enqueued ahead of each call, outside its events (an input
    reset). `torch`: the rank's imported torch module."""
    pairs = []
    for _ in range(n):
        if before is not None:
            before()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def replay_ms(
    torch: Any, graph: Any, replays: int, before: Callable[[], Any] | None = None
) -> list[float]:
    """`replays` back-to-back replays of a captured CUDA graph, timed as `event_ms`."""
    return event_ms(torch, graph.replay, replays, before)


def wall_ms(fn: Callable[[], Any], n: int, before: Callable[[], Any] | None = None) -> list[float]:
    """`n` calls of `fn` timed by the host clock (CPU ranks), in milliseconds; `before` runs
    ahead of each call, outside its time."""
    samples = []
    for _ in range(n):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


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


def load_percentiles() -> Any:
    """fastverify/percentiles.py: the project's one percentile (standard library only)."""
    return sys.modules.get("fastverify_percentiles") or _load(
        "fastverify_percentiles", HERE.parents[1] / "percentiles.py"
    )


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), None for no values: fastverify.percentiles', by path."""
    return load_percentiles().percentile(values, q)


def write_report(path: str, doc: dict[str, Any]) -> None:
    """The rank's JSON report, written atomically: the orchestrator never reads half of one."""
    load_durable().atomic_write_json(path, doc, indent=1, sort_keys=False)


class RankContext:
    """One rank's setup for `backend` ("nccl": its GPU, bf16; "gloo": CPU, float32, torch
    threads limited to `cpu_threads` when given). Each worker's rank class extends it."""

    def __init__(self, backend: str, cpu_threads: int | None = None):
        import torch
        import torch.distributed as dist

        self.torch = torch
        self.dist = dist
        self.backend = backend
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.cuda = backend == "nccl"
        self.group: Any = None  # a pynccl.RankGroup once open_group() ran
        if self.cuda:
            if not torch.cuda.is_available():
                raise RuntimeError("the nccl backend needs CUDA, and torch sees no GPU")
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
            self.dtype = torch.bfloat16
        else:
            self.device = torch.device("cpu")
            self.dtype = torch.float32
            if cpu_threads:
                torch.set_num_threads(cpu_threads)

    def open_group(self, call: str, nccl: bool = True, warm: bool = True) -> float:
        """Make the rank's process group (pynccl.RankGroup: NCCL on the `call` path, or
        gloo; `nccl=False`: no NCCL communicator) and, with `warm`, one tiny all-reduce so
        that the lazy communicator setup falls inside; the seconds it took."""
        t0 = time.perf_counter()
        self.group = load_pynccl().RankGroup(
            self.dist, self.torch, backend=self.backend, call=call, rank=self.rank,
            world=self.world, device=self.device, nccl=nccl,
        )  # fmt: skip
        if warm:
            self.group.all_reduce(self.torch.ones(1, device=self.device, dtype=self.dtype))
        self.sync()
        return time.perf_counter() - t0

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def time_ms(
        self, fn: Callable[[], Any], n: int, before: Callable[[], Any] | None = None
    ) -> list[float]:
        """The milliseconds of each of `n` calls of `fn`: between CUDA events on the GPU
        (`event_ms`), by the host clock on CPU ranks (`wall_ms`)."""
        if self.cuda:
            return event_ms(self.torch, fn, n, before)
        return wall_ms(fn, n, before)

    def capture_graph(
        self, body: Callable[[], Any], warm: Callable[[], Any] | None = None
    ) -> tuple[Any, float]:
        """`warm` (default: `body`) on a side stream first, so that lazy set-up (NCCL's
        communicator, workspaces, kernels' first calls) stays out of the capture, then
        `body` captured in one CUDA graph: (the graph, the capture's milliseconds)."""
        torch = self.torch
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            (warm or body)()
        torch.cuda.current_stream().wait_stream(stream)
        self.sync()
        graph = torch.cuda.CUDAGraph()
        t0 = time.perf_counter()
        with torch.cuda.graph(graph):
            body()
        self.sync()
        return graph, (time.perf_counter() - t0) * 1e3

    def describe(self) -> dict[str, Any]:
        """torch's version, the GPU and NCCL's version (nccl backend), the dtype."""
        torch = self.torch
        out: dict[str, Any] = {"torch": torch.__version__}
        if self.cuda:
            out["gpu"] = torch.cuda.get_device_name(self.device)
            out["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        out["dtype"] = str(self.dtype).removeprefix("torch.")
        return out


def report_head(backend: str, call: str) -> dict[str, Any]:
    """The fields every rank report starts with: who the rank is, where, on which path."""
    return {
        "rank": int(os.environ.get("RANK", "0")),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "backend": backend,
        "call": call if backend == "nccl" else "torch",
    }


def nccl_env() -> dict[str, str]:
    """The NCCL variables this process really received (to prove the profile arrived)."""
    return {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}


def init_failed(doc: dict[str, Any], exc: BaseException, t_start: float | None = None) -> None:
    """A rank whose setup failed: the error, the traceback's end and (from `t_start`) its
    wall time, in `doc`."""
    torch = sys.modules.get("torch")
    if torch is not None:
        doc.setdefault("torch", getattr(torch, "__version__", None))
    doc["error"] = f"process group init failed: {err(exc)}"
    doc["traceback"] = traceback.format_exc()[-2000:]
    if t_start is not None:
        doc["wall_s"] = time.perf_counter() - t_start
