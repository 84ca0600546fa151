"""`doctor` findings about the PCIe path between GPUs (fastverify.host.pcie): an
ACS-redirecting bridge on a GPU pair's peer path (NCCL's P2P transport hangs or crawls
there: use the shipped `p2p-off` profile or turn ACS off), a direct path, or why it could
not be checked (no lspci, no root). The driver's P2P table (`nvidia-smi topo -p2p r/w`)
adds which pairs it refuses P2P for (NCCL then takes shared memory there by itself)."""

from __future__ import annotations

from typing import Any

from fastverify.host import pcie


def check_pcie(report: pcie.PcieReport, gpus: int, finding: Any) -> list[Any]:
    """Findings (built with `finding(severity, what, where, fix, check)`). `gpus`: how many
    GPUs nvidia-smi showed (a host without any says "could not check" as info; with one there
    is no path between GPUs, whatever lspci would say)."""
    where = ", ".join(k for k, v in report.sources.items() if v == "ok") or "lspci"
    if gpus == 1 and report.status != "redirect":
        out = [
            finding(
                "info",
                "one GPU: no PCIe path between GPUs to check (NCCL runs no P2P transport here)",
                "nvidia-smi topo -m",
                "",
                "pcie",
            )
        ]
    elif report.status == "redirect":
        out = [finding("error", report.message(), where, report.fix(), "pcie")]
    elif report.status == "direct":
        out = [finding("info", report.message(), where, "", "pcie")]
    else:
        out = [
            finding(
                "warning" if gpus else "info",
                report.message(),
                where,
                _unknown_fix(report),
                "pcie",
            )
        ]
    refused = [
        (p, p.p2p_read) for p in report.pairs if p.p2p_read and p.p2p_read not in ("OK", "X")
    ]
    if refused:
        text = ", ".join(
            f"GPU {p.a}-{p.b} {s} ({pcie.P2P_STATUS.get(s, s)})" for p, s in refused[:6]
        )
        out.append(
            finding(
                "info",
                f"the driver refuses P2P reads for {text}: NCCL uses shared memory for those "
                "pairs by itself (no hang, less bandwidth)",
                "nvidia-smi topo -p2p r",
                "",
                "pcie",
            )
        )
    if report.iommu is not None:
        what = f"IOMMU {report.iommu.mode}: {report.iommu.evidence}"
        out.append(finding("info", what, "iommu", "", "pcie"))
    return out


def _unknown_fix(report: Any) -> str:
    """What would let doctor read the PCIe path: pciutils only where lspci is missing."""
    root_only = "lspci -vvv reads the ACS control bits only as root"
    if str((report.sources or {}).get("lspci -vvv -D", "")).startswith("lspci not found"):
        return (
            "install pciutils (apt-get install pciutils) and run doctor as root on the GPU"
            f" host ({root_only})"
        )
    if any(p.unreadable for p in report.pairs):
        return f"run doctor as root ({root_only}), or check `sudo lspci -vvv` yourself"
    return "run doctor on the GPU host, as root (where lspci lists the GPUs nvidia-smi shows)"
