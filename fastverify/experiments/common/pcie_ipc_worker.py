"""FlashInfer's PCIe-IPC all-reduce for the experiments' rank workers (torch and the
standard library only; loaded by path from rehearse/worker.py and preflight/worker.py).

`PcieIpc` drives `flashinfer.comm.PcieIpcAllReduceWorkspace` (flashinfer-python 0.7.2) the
way SGLang 0.5.23's `PcieIpcCommunicator` (srt/distributed/device_communicators/
pcie_ipc_ar.py) does. Written against that API; it runs only where FlashInfer with
`pcie_ipc_comm` imports and the GPUs are there (the experiments skip the candidate
elsewhere, saying why).
"""

from __future__ import annotations

import os
import time
from typing import Any


class PcieIpc:
    """FlashInfer's PCIe-IPC all-reduce (flashinfer-python 0.7.2), driven as SGLang 0.5.23's
    `PcieIpcCommunicator` drives it: one workspace on the NCCL group sized `max_numel`
    bf16 elements, tuned once on a gloo group for the row counts SGLang tunes (powers of two
    up to the bound, plus the bound) and persisted to FlashInfer's cache, rebound when the
    calling stream changes (capture, then replay); a tensor goes to it only when bf16,
    contiguous, 2-D or more, within the bound and supported by the kernels."""

    ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

    def __init__(self, torch: Any, dist: Any, world: int, max_numel: int, hidden: int):
        self.hidden = hidden
        from flashinfer.comm import PcieIpcAllReduceWorkspace

        try:
            from flashinfer.comm.pcie_ipc_tuning import default_cache_path

            cache: str | None = str(default_cache_path(world))
        except (ImportError, AttributeError):
            cache = None
        rows = max(1, max_numel // hidden)
        batches = [r for r in self.ROWS if r <= rows]
        if rows not in batches:
            batches.append(rows)
        self.torch = torch
        self.max_numel = max_numel
        self.cache = cache
        self.cache_existed = cache is not None and os.path.exists(cache)
        self.ws = PcieIpcAllReduceWorkspace(
            group=dist.group.WORLD,
            max_numel=max_numel,
            dtype=torch.bfloat16,
            tune_batches=tuple(batches),
            tune_cache=cache,
        )
        self.cache_covers = self._covers(world, max_numel)
        t0 = time.perf_counter()
        self.tuned = self.ws.tune(
            [hidden], dtype=torch.bfloat16, tune_group=dist.new_group(backend="gloo")
        )
        self.tune_s = time.perf_counter() - t0
        self._stream: Any = None
        self.calls = 0

    def _covers(self, world: int, max_numel: int) -> bool | None:
        """Whether the tactics FlashInfer loaded were tuned for THIS workspace (its key:
        world, topology profile, max_blocks, max_numel, memop; `pcie_ipc_tuning.
        cache_covers_workspace`): only then is the cache reused rather than re-tuned. None
        when this FlashInfer cannot say."""
        try:
            from flashinfer.comm.pcie_ipc_tuning import cache_covers_workspace

            ws = self.ws
            return bool(cache_covers_workspace(
                world, ws.profile, ws.max_blocks, max_numel, ws.memop_supported
            ))  # fmt: skip
        except (ImportError, AttributeError, TypeError):
            return None

    def wants(self, t: Any) -> bool:
        return (
            t.dtype is self.torch.bfloat16
            and t.is_contiguous()
            and t.dim() >= 2
            and t.numel() <= self.max_numel
            and bool(self.ws.supports(t))
        )

    def all_reduce(self, t: Any, out: Any = None) -> Any:
        """Out-of-place (into `out` when given, same shape), as SGLang calls it."""
        stream = self.torch.cuda.current_stream()
        if self._stream is None or stream != self._stream:
            self.ws.rebind_stream()
            self._stream = stream
        self.calls += 1
        return self.ws.all_reduce(t, out=out)

    def info(self) -> dict[str, Any]:
        return {
            "backend": "pcie_ipc",
            "max_numel": self.max_numel,
            "tuned_shapes": len(self.tuned or ()),
            "cache": self.cache,
            "cache_file_existed": self.cache_existed,
            "cache_reused": self.cache_covers,  # tactics of this very workspace were loaded
            "tune_s": self.tune_s,
            "calls": self.calls,
        }
