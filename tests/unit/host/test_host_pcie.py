"""The PCIe path between GPUs (fastverify.host.pcie) and doctor's verdict on it, on real
output: published `lspci -vvv` / `nvidia-smi topo` samples from NCCL's and the field's issue
threads (tests/fixtures/host-pcie/README.md quotes each source) and the H200 machine's own
capture. The commands are run the way doctor runs them: found on PATH (a script that prints
the captured file), so lookup, exit codes and parsing are all exercised."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastverify.host import pcie
from fastverify.profiles import doctor
from fastverify.profiles.store import ProfileStore

REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests" / "fixtures" / "host-pcie"


def replay(bin_dir: Path, name: str, outputs: dict[str, Path]) -> None:
    """An executable `name` on `bin_dir` that prints a captured file per argument list."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    cases = "".join(f'  "{args}") cat "{path}" ;;\n' for args, path in outputs.items())
    exe = bin_dir / name
    exe.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}  *) exit 9 ;;\nesac\n')
    exe.chmod(0o755)


def doctor_on(tmp_path: Path, bin_dir: Path) -> doctor.DoctorReport:
    home, etc, sysroot = tmp_path / "home", tmp_path / "etc", tmp_path / "root"
    for d in (home, etc, sysroot):
        d.mkdir(exist_ok=True)
    inputs = doctor.DoctorInputs(
        env={"HOME": str(home), "PATH": str(bin_dir)},
        etc_dir=etc,
        systemd_dirs=[],
        site_dirs=[],
        sys_root=sysroot,
    )
    return doctor.run(inputs, ProfileStore([], REPO / "profiles"))


def pcie_findings(report: doctor.DoctorReport) -> list[doctor.Finding]:
    return [f for f in report.findings if f.check == "pcie"]


def test_published_acs_redirect_names_the_problem_and_the_profile(tmp_path: Path) -> None:
    """NVIDIA/nccl#629's `lspci -vvv | grep ACSCtl`: 4 bridges with ReqRedir+ CmpltRedir+."""
    bin_dir = tmp_path / "bin"
    replay(bin_dir, "lspci", {"-vvv -D": FIX / "nccl-629-lspci-acsctl.txt"})
    report = doctor_on(tmp_path, bin_dir)
    first = pcie_findings(report)[0]
    assert first.severity == "error"
    assert "ACS-redirecting bridge" in first.what and "hang or crawl" in first.what
    assert "4 of 15 bridges" in first.what
    assert "NCCL_P2P_DISABLE=1 (shipped: p2p-off" in first.fix
    assert "setpci -s BDF ECAP_ACS+6.w=0000" in first.fix
    assert report.recommendations[0].profile == "p2p-off"
    assert report.to_dict()["pcie"]["status"] == "redirect"


@pytest.mark.parametrize(
    "fixture",
    ["nccl-1405-lspci-acsctl-off.txt", "nccl-606-lspci-acsctl-srcvalid.txt"],
)
def test_published_acs_off_or_source_validation_only_is_direct(
    tmp_path: Path, fixture: str
) -> None:
    """#1405: every ACSCtl bit off; #606: SrcValid+ alone (source validation, no redirect)."""
    bin_dir = tmp_path / "bin"
    replay(bin_dir, "lspci", {"-vvv -D": FIX / fixture})
    first = pcie_findings(doctor_on(tmp_path, bin_dir))[0]
    assert first.severity == "info"
    assert first.what.startswith("P2P between the GPUs is direct")


def test_no_lspci_says_it_could_not_check(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    report = doctor_on(tmp_path, bin_dir)
    first = pcie_findings(report)[0]
    assert first.what.startswith("could not check the PCIe path between GPUs: lspci not found")
    assert first.severity == "info"  # and no GPU either (no nvidia-smi): nothing at stake
    assert report.pcie.status == "unknown"


def test_gpus_without_lspci_is_a_warning_not_a_guess(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    replay(bin_dir, "nvidia-smi", {"topo -m": FIX / "rtx6kpro-15-topo-m.txt"})
    report = doctor_on(tmp_path, bin_dir)
    first = pcie_findings(report)[0]
    assert first.severity == "warning"
    assert "could not check" in first.what and "lspci not found" in first.what
    assert report.topology is not None and report.topology.links[("GPU0", "GPU1")] == "PHB"
    assert all(r.profile != "p2p-off" for r in report.recommendations)


def test_doctor_asks_for_pciutils_only_where_lspci_is_missing(tmp_path: Path) -> None:
    """lspci is installed but fails (a container without /proc/bus/pci): the PCIe path is
    unknown and doctor says so, without asking to install what is installed."""
    bin_dir = tmp_path / "bin"
    replay(bin_dir, "lspci", {})  # installed; every run fails
    replay(bin_dir, "nvidia-smi", {"topo -m": FIX / "rtx6kpro-15-topo-m.txt"})
    report = doctor_on(tmp_path, bin_dir)
    first = pcie_findings(report)[0]
    assert report.pcie.status == "unknown" and first.severity == "warning", first
    assert "pciutils" not in first.fix and "as root" in first.fix, first.fix
    missing = tmp_path / "no-lspci"
    replay(missing, "nvidia-smi", {"topo -m": FIX / "rtx6kpro-15-topo-m.txt"})
    assert "install pciutils" in pcie_findings(doctor_on(tmp_path, missing))[0].fix


def test_driver_p2p_table_refusals_are_reported() -> None:
    """A published `nvidia-smi topo -p2p` matrix (club-3090#1124, 2 x RTX 5090: GNS)."""
    cells = pcie.parse_p2p_matrix((FIX / "club-3090-1124-topo-p2p.txt").read_text())
    assert cells == {(0, 1): "GNS", (1, 0): "GNS"}


def test_iommu_state_from_sysfs_and_cmdline(tmp_path: Path) -> None:
    assert pcie.iommu_state(None, "ro quiet").mode == "unknown"
    assert pcie.iommu_state({}, "quiet").mode == "off"
    groups = tmp_path / "sys" / "kernel" / "iommu_groups"
    for n, kind in (("0", "identity"), ("1", "identity")):
        (groups / n / "devices").mkdir(parents=True)
        (groups / n / "type").write_text(f"{kind}\n")
    state = pcie.iommu_state(pcie.read_iommu_groups(tmp_path), "iommu=pt quiet")
    assert (state.mode, state.groups) == ("passthrough", 2)
    assert "iommu=pt" in state.evidence
    (groups / "1" / "type").write_text("DMA-FQ\n")
    assert pcie.iommu_state(pcie.read_iommu_groups(tmp_path), "").mode == "translating"


def test_profiles_that_use_p2p() -> None:
    store = ProfileStore([], REPO / "profiles")
    loaded = {name: store.load(name, force=True) for name in ("p2p-off", "ring-ll", "pcie-ipc")}
    users = {name: pcie.p2p_users(p.env, p.requires) for name, p in loaded.items()}
    assert users["p2p-off"] == []
    assert any("NCCL's P2P transport" in u for u in users["ring-ll"])
    assert any("PCIe-IPC" in u for u in users["pcie-ipc"])


class _Engine:
    """The engine's side the switch check asks: the PCIe report of its host."""

    def __init__(self, report: pcie.PcieReport | None) -> None:
        self.report = report

    def pcie_report(self) -> pcie.PcieReport | None:
        return self.report


def test_profile_set_refuses_p2p_profiles_on_a_redirecting_host_before_anything_stops() -> None:
    from fastverify.daemon.resolve import RequestError, Resolver

    text = (FIX / "nccl-629-lspci-acsctl.txt").read_text()
    store = ProfileStore([], REPO / "profiles")
    resolver = Resolver(None, _Engine(pcie.analyse(pcie.parse_lspci(text))), store)
    with pytest.raises(RequestError) as exc:
        resolver.require_direct_p2p(store.load("ring-ll", force=True))
    assert exc.value.status == 422 and exc.value.reason == "p2p_redirected"
    assert "nothing was stopped" in str(exc.value) and "p2p-off" in str(exc.value)
    resolver.require_direct_p2p(store.load("p2p-off", force=True))  # no P2P: accepted
    for report in (None, pcie.analyse(None, why_no_lspci="lspci not found")):
        Resolver(None, _Engine(report), store).require_direct_p2p(store.load("ring-ll"))


def test_a_real_lspci_tree_puts_the_root_port_above_the_gpu(tmp_path: Path) -> None:
    """Real `lspci -vvv -D` output (pciutils 3.9.0 rendering the ASUS P6T6 config dump
    pciutils ships as a test): the GPU's chain is its root port, ACS readable and off."""
    bin_dir = tmp_path / "bin"
    replay(bin_dir, "lspci", {"-vvv -D": FIX / "pciutils-tree-asus-p6t6-lspci-vvv.txt"})
    report = doctor_on(tmp_path, bin_dir).pcie
    assert report.status == "direct" and report.why == "one GPU: no peer traffic"
    (gpu,) = report.gpus
    assert gpu["bdf"] == "0000:06:00.0" and "GT218" in gpu["name"]
    assert gpu["link"] == "2.5GT/s x16"
    assert gpu["bridges"] == [{"bdf": "0000:00:07.0", "port": "Root Port", "acs": "ACSCtl all off"}]


def test_the_h200_machine_one_gpu_no_lspci(tmp_path: Path) -> None:
    """This project's lent H200 machine (a Firecracker VM: one GPU, no lspci, no IOMMU
    groups): nothing to check between GPUs, and no warning for the missing lspci."""
    bin_dir = tmp_path / "bin"
    replay(bin_dir, "nvidia-smi", {
        "topo -m": FIX / "h200-nvidia-smi-topo-m.txt",
        "topo -p2p r": FIX / "h200-nvidia-smi-topo-p2p-r.txt",
        "topo -p2p w": FIX / "h200-nvidia-smi-topo-p2p-w.txt",
    })  # fmt: skip
    report = doctor_on(tmp_path, bin_dir)
    assert report.topology is not None and report.topology.gpus == ["GPU0"]
    found = pcie_findings(report)
    assert found[0].severity == "info" and found[0].what.startswith("one GPU: no PCIe path")
    assert all(f.severity == "info" for f in found), [(f.severity, f.what) for f in found]
    assert pcie.parse_p2p_matrix((FIX / "h200-nvidia-smi-topo-p2p-r.txt").read_text()) == {}
