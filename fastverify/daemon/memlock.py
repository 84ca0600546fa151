"""Can this process pin memory for RDMA? The daemon's start-up check in the container.

NCCL's IB/RoCE transport registers its buffers with ibverbs (`ibv_reg_mr`), which pins their
pages. The kernel counts pinned pages against RLIMIT_MEMLOCK (`ulimit -l`) unless the process
has CAP_IPC_LOCK in its effective set. A container's memlock limit is its runtime's (often
64 KiB or 8 MiB; Kubernetes has no field to raise it), and a capability added for a
non-root UID is not effective under containerd or CRI-O: the runtime puts it in the bounding
and inheritable sets only, and the UID change clears the permitted and effective ones
(CapEff 0). Past the limit NCCL fails with `NCCL WARN Call to ibv_reg_mr failed with error
Cannot allocate memory` at its first connection, after the model has loaded.

`rdma_expected(cfg)` says why NCCL will use the network here (several nodes, or ibverbs
devices under /sys/class/infiniband), `check()` reads CapEff (/proc/self/status) and the
limit and says what NCCL IB will hit: a problem (a status finding and a warning) or a line
that all is well.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from fastverify.config import Config

CAP_IPC_LOCK = 14  # linux/capability.h
IB_CLASS = "/sys/class/infiniband"
# What NCCL registers on one connection, at least: NCCL_BUFFSIZE (4 MiB by default) per
# channel and protocol; below this no real job gets through its first all-reduce.
NCCL_NEEDS = 64 * 2**20


@dataclass(frozen=True)
class PinCheck:
    ok: bool
    message: str


def rdma_expected(cfg: Config, ib_class: str = IB_CLASS) -> str | None:
    """Why NCCL will reach the network over IB here, None when it will not."""
    if int(getattr(cfg.server, "nnodes", 1) or 1) > 1:
        return f"server.nnodes = {cfg.server.nnodes}: NCCL's all-reduces cross nodes"
    try:
        devices = sorted(os.listdir(ib_class))
    except OSError:
        devices = []
    if devices:
        return f"ibverbs devices {', '.join(devices)} ({ib_class})"
    return None


def _cap_eff(status_text: str) -> int | None:
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return None


def _size(n: int) -> str:
    if n == resource.RLIM_INFINITY:
        return "unlimited"
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n // 1024} KiB"


def check(status_text: str | None = None, memlock: int | None = None) -> PinCheck:
    """What NCCL IB's memory registration will hit in this process (or for the given
    /proc/self/status text and RLIMIT_MEMLOCK soft limit)."""
    if status_text is None:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            status_text = fh.read()
    if memlock is None:
        memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    eff = _cap_eff(status_text) or 0
    limit = f"memlock limit {_size(memlock)} (ulimit -l)"
    if eff & (1 << CAP_IPC_LOCK):
        return PinCheck(True, f"CAP_IPC_LOCK is effective: ibverbs may pin past the {limit}")
    if memlock == resource.RLIM_INFINITY or memlock >= NCCL_NEEDS:
        return PinCheck(True, f"no CAP_IPC_LOCK, but the {limit} lets ibverbs pin NCCL's buffers")
    return PinCheck(
        False,
        f"CAP_IPC_LOCK is not effective (CapEff {eff:#x}, uid {os.getuid()}) and the {limit} "
        "is below what NCCL's IB transport pins: its first connection fails with 'NCCL WARN "
        "Call to ibv_reg_mr failed with error Cannot allocate memory'. Run the container as "
        "root with only IPC_LOCK added (`render kubernetes` does for RDMA pods; a capability "
        "added for a non-root uid is not effective under containerd or CRI-O), or give it an "
        "unlimited memlock limit (the container runtime's, e.g. LimitMEMLOCK=infinity)",
    )
