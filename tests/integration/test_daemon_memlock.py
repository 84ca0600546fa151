"""The daemon's start-up check of memory pinning, where NCCL will use IB (several nodes,
or ibverbs devices): the real fastverifyd started as a container runtime starts a non-root
RDMA pod, with a 64 KiB memlock limit and no effective CAP_IPC_LOCK, says through
`fastverifyctl status` what NCCL's IB transport will hit, before any load.

The sim plays no multi-node server (its parser refuses --nnodes, so its start fails): the
check runs before the engine starts, whatever the engine does.
"""

from __future__ import annotations

import ctypes
import os
import resource
from pathlib import Path

from fastverify.daemon.memlock import CAP_IPC_LOCK
from tests.support.harness import DaemonHarness

PR_CAPBSET_DROP = 24  # linux/prctl.h
MULTI_NODE = {
    "server": {"nnodes": 2, "node_rank": 0, "dist_init_addr": "127.0.0.1:29999", "tp_size": 4},
    "daemon": {"recover_retries": 0},
}


def as_a_non_root_pod_starts() -> None:
    """In the daemon's process before exec: the runtime's memlock limit, and IPC_LOCK out
    of the bounding set, so that even root has no effective CAP_IPC_LOCK after exec (what
    a non-root uid gets from `capabilities.add` under containerd: CapEff 0)."""
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 * 1024, 64 * 1024))
    if os.geteuid() == 0:  # a non-root test run has no effective capabilities anyway
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK)")


def test_a_pod_that_cannot_pin_memory_is_told_what_nccl_ib_will_hit(tmp_path: Path) -> None:
    d = DaemonHarness(tmp_path, config=MULTI_NODE, metrics=False, start=False,
                      preexec=as_a_non_root_pod_starts)  # fmt: skip
    with d:
        d.start(wait_ready=False)
        text = d.ctl("status").stdout
    note = next((x for x in text.splitlines() if x.startswith("note:       RDMA (")), None)
    assert note is not None, text
    assert "RDMA (server.nnodes = 2: NCCL's all-reduces cross nodes): CAP_IPC_LOCK is not " in note
    assert "effective (CapEff 0x" in note and "memlock limit 64 KiB (ulimit -l)" in note, note
    assert "'NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory'" in note
    assert "Run the container as root with only IPC_LOCK added" in note
    assert "RDMA (server.nnodes = 2" in d.log_text()
