"""GPU-memory release wait against real NVML (GPU hosts only: needs pynvml and torch+CUDA)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from fastverify.daemon import procs

pynvml = pytest.importorskip("pynvml")
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - CPU hosts
    pytest.skip("no CUDA device", allow_module_level=True)

pytestmark = pytest.mark.gpu

HOLDER = (
    "import torch, time\n"
    "x = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device='cuda:0')\n"
    "torch.cuda.synchronize()\n"
    "print('holding', flush=True)\n"
    "time.sleep(120)\n"
)


def _holds_gpu(pid: int) -> bool:
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return any(p.pid == pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))
    finally:
        pynvml.nvmlShutdown()


def test_wait_gpu_release_sees_our_pid_then_its_release(tmp_path: Path) -> None:
    log = tmp_path / "holder.log"
    p = procs.spawn([sys.executable, "-c", HOLDER], dict(os.environ), log)
    try:
        deadline = time.monotonic() + 90
        while "holding" not in log.read_text() and time.monotonic() < deadline:
            assert p.poll() is None, log.read_text()
            time.sleep(0.1)
        assert _holds_gpu(p.pid)
        released, how = procs.wait_gpu_release([p.pid], timeout_s=0.5)
        assert not released and str(p.pid) in how  # bounded: gives up and says who holds it
        res = procs.stop_group(p.pid, grace_s=10, proc=p)
        assert res.leftover == []
        t0 = time.monotonic()
        released, how = procs.wait_gpu_release([p.pid], timeout_s=30)
        assert released, how
        print(f"GPU memory released {time.monotonic() - t0:.3f} s after the group was gone")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
