"""The sim's simulated GPUs' memory, shared by the sim's processes on one host, and the KV
pool SGLang sizes from it.

Each process that holds memory on simulated GPU N (a weight-cache rank, a server for its
ranks) keeps a file `sim-gpu{N}.{pid}` holding its GiB in a ledger directory: the one its
weight cache's sockets are in (a server that maps no cache has a GPU to itself). A GPU's
free memory is its size less what live holders hold (a killed process's file no longer
counts), as torch.cuda.mem_get_info sees the other processes' memory.

`pool_budget` is SGLang's rule, written from its source (0.5.17 and 0.5.23
srt/mem_cache/kv_cache_configurator.py `_profile_available_bytes`: the free memory after the
load less the pre-load free memory x (1 - mem_fraction_static); from 0.5.19 the scheduler
first adds the preloaded weights' bytes to the pre-load figure, model_runner
`account_preloaded_weights`); tests/contract/test_kv_pool_contract.py checks it against the
wheel's source.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from fastverify.sim.costtable import GPU_GB, KV_GB, WEIGHTS_GB

# A server process's memory before its weights load (CUDA context, NCCL, torch): what its
# cold start's "Load weight begin. avail mem" leaves out of GPU_GB (78.52 of 80 GB before
# the sim's GPU was an H200's size, its lines' figure since).
BEFORE_LOAD_GB = 1.48
# The sim's --mem-fraction-static when argv has none (SGLang derives its own from the GPU's
# size): the one that gives a cold start that reads its weights from disk the sim's KV_GB
# pool (as does one mapping a 0.5.19+ cache, which adds the weights back).
DEFAULT_MEM_FRACTION = 1 - (GPU_GB - BEFORE_LOAD_GB - WEIGHTS_GB - KV_GB) / (
    GPU_GB - BEFORE_LOAD_GB
)


def pool_budget(*, before: float, after: float, fraction: float, preloaded: float) -> float:
    """SGLang's KV budget (GB): free memory `after` the load less the pre-load free memory
    (`before`, plus the `preloaded` weights' GB where the release adds them) x (1 -
    `fraction`)."""
    return after - (before + preloaded) * (1 - fraction)


class Ledger:
    """One process's holdings on its simulated GPUs (`gpus`), in `where` (None: private)."""

    def __init__(self, where: Path | None, gpus: list[int]) -> None:
        self.where = where
        self.gpus = gpus
        self.held = 0.0

    def _file(self, gpu: int, pid: int) -> Path:
        assert self.where is not None
        return self.where / f"sim-gpu{gpu}.{pid}"

    def hold(self, gib: float) -> None:
        """Hold `gib` on each of its GPUs (replacing what it held)."""
        self.held = gib
        if self.where is None:
            return
        self.where.mkdir(parents=True, exist_ok=True)
        for gpu in self.gpus:
            path = self._file(gpu, os.getpid())
            tmp = path.with_suffix(".tmp")
            tmp.write_text(f"{gib:.4f}\n")
            tmp.replace(path)

    def others(self) -> float:
        """The most any of its GPUs has held by other live processes (GB)."""
        if self.where is None:
            return 0.0
        most = 0.0
        for gpu in self.gpus:
            total = 0.0
            for path in self.where.glob(f"sim-gpu{gpu}.*"):
                pid = path.name.rsplit(".", 1)[1]
                if not pid.isdigit() or int(pid) == os.getpid() or not alive(int(pid)):
                    continue
                with contextlib.suppress(OSError, ValueError):
                    total += float(path.read_text())
            most = max(most, total)
        return most

    def free(self) -> float:
        """torch.cuda.mem_get_info's free figure on its fullest GPU (GB)."""
        return GPU_GB - self.others() - self.held

    def release(self) -> None:
        if self.where is None:
            return
        for gpu in self.gpus:
            with contextlib.suppress(FileNotFoundError):
                self._file(gpu, os.getpid()).unlink()


def alive(pid: int) -> bool:
    """Is process `pid` alive (one of another user's counts too)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
