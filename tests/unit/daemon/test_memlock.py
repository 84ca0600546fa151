"""fastverify.daemon.memlock's verdicts on /proc/self/status texts as a container shows
them: a non-root uid given IPC_LOCK under containerd (CapEff 0), root with only IPC_LOCK,
and an unlimited memlock limit."""

from __future__ import annotations

import resource
from types import SimpleNamespace

from fastverify.daemon import memlock

# /proc/1/status of a uid-1000 container with `capabilities: {drop: [ALL], add: [IPC_LOCK]}`
# under containerd: the capability in the bounding and inheritable sets only
NON_ROOT = "CapInh:\t0000000000004000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
ROOT_IPC_LOCK = "CapPrm:\t0000000000004000\nCapEff:\t0000000000004000\n"


def test_no_effective_ipc_lock_under_a_small_limit_is_a_problem() -> None:
    v = memlock.check(NON_ROOT, 8 * 2**20)
    assert not v.ok and "CapEff 0x0" in v.message and "memlock limit 8 MiB" in v.message


def test_root_with_ipc_lock_or_an_unlimited_limit_pins() -> None:
    assert memlock.check(ROOT_IPC_LOCK, 64 * 1024).ok
    v = memlock.check(NON_ROOT, resource.RLIM_INFINITY)
    assert v.ok and "memlock limit unlimited" in v.message


def test_rdma_is_expected_across_nodes_or_with_ibverbs_devices(tmp_path) -> None:
    one = SimpleNamespace(server=SimpleNamespace(nnodes=1))
    assert memlock.rdma_expected(one, str(tmp_path / "none")) is None
    (tmp_path / "mlx5_0").mkdir()
    assert "mlx5_0" in (memlock.rdma_expected(one, str(tmp_path)) or "")
    two = SimpleNamespace(server=SimpleNamespace(nnodes=2))
    assert "server.nnodes = 2" in (memlock.rdma_expected(two, str(tmp_path / "none")) or "")
