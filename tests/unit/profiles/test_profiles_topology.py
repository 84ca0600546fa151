"""`nvidia-smi topo -m` parsing (recorded outputs) and profile recommendations."""

from __future__ import annotations

import pytest

from fastverify.profiles.topology import TopologyParseError, parse_topo_matrix, recommend
from tests.support.profiles import DATA

ALL = {"nccl-default", "ring-ll", "ring-ll-8ch", "ring-simple", "tree-ll", "tree-ll-eager"}


def test_pcie_box() -> None:
    t = parse_topo_matrix((DATA / "topo-8gpu-pcie.txt").read_text())
    assert t.gpus == [f"GPU{i}" for i in range(8)] and t.nics == ["NIC0"]
    assert not t.has_nvlink and not t.all_nvlink
    assert t.links[("GPU0", "GPU1")] == "PIX"
    assert t.links[("GPU0", "GPU2")] == "NODE"
    assert t.links[("GPU3", "GPU4")] == "SYS"
    assert t.crosses_numa and t.numa_nodes == ["0", "1"]
    assert t.cpu_affinity["GPU7"] == "32-63,96-127"
    assert t.link_counts() == {"PIX": 4, "NODE": 8, "SYS": 16}
    assert t.to_topology().has_nvlink is False


def test_nvlink_box_with_terminal_escapes() -> None:
    text = (DATA / "topo-8gpu-nv18.txt").read_text()
    assert "\x1b[4m" in text  # captured from a terminal: underlined header
    t = parse_topo_matrix(text)
    assert len(t.gpus) == 8 and len(t.nics) == 4
    assert t.all_nvlink and set(t.pair_links()) == {"NV18"}
    assert t.numa_affinity["GPU4"] == "1"
    assert t.to_topology().has_nvlink is True


def test_space_separated_copy_paste() -> None:
    text = (
        "        GPU0    GPU1    CPU Affinity    NUMA Affinity\n"
        "GPU0     X      NV4     0-31    0\n"
        "GPU1    NV4      X      0-31    0\n"
    )
    t = parse_topo_matrix(text)
    assert t.all_nvlink and t.numa_affinity == {"GPU0": "0", "GPU1": "0"}


@pytest.mark.parametrize("text", ["", "No devices were found\n", "\tGPU0\tGPU1\nGPU0\t X \tSYS\n"])
def test_garbage_refused(text: str) -> None:
    with pytest.raises(TopologyParseError):
        parse_topo_matrix(text)


def test_recommend_pcie() -> None:
    t = parse_topo_matrix((DATA / "topo-8gpu-pcie.txt").read_text())
    recs = recommend(t, ALL)
    assert [r.profile for r in recs][:3] == ["ring-ll", "ring-ll-8ch", "nccl-default"]
    assert "NCCL_P2P_LEVEL=SYS" in recs[0].reason  # GPUs span NUMA nodes


def test_recommend_pcie_puts_the_allreduce_backend_first() -> None:
    t = parse_topo_matrix((DATA / "topo-8gpu-pcie.txt").read_text())
    recs = recommend(t, ALL | {"pcie-ipc"})
    assert [r.profile for r in recs][:2] == ["pcie-ipc", "ring-ll"]
    assert "PCIe-IPC" in recs[0].reason and "for what stays on NCCL" in recs[1].reason


def test_recommend_nvlink() -> None:
    t = parse_topo_matrix((DATA / "topo-8gpu-nv18.txt").read_text())
    assert [r.profile for r in recommend(t, ALL)] == ["nccl-default"]


def test_recommend_only_existing_profiles() -> None:
    t = parse_topo_matrix((DATA / "topo-8gpu-pcie.txt").read_text())
    assert [r.profile for r in recommend(t, {"nccl-default"})] == ["nccl-default"]
    assert [r.profile for r in recommend(None, ALL)] == ["nccl-default"]
