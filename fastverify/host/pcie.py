"""The PCIe path between every pair of GPUs, read before any load: does peer-to-peer
traffic go direct, or does an ACS-redirecting bridge send it up to the root complex (and
through the IOMMU)?

On PCIe hosts (RTX PRO 6000, RTX 5880 and other workstation GPUs, switch-free servers) NCCL's
first P2P all-reduce hangs, or crawls, when ACS P2P Request/Completion Redirect is on at a
bridge above the GPUs: the peer writes leave the switch or root port and go to the root
complex, where the IOMMU translates or drops them. The way out is a profile without P2P
(NCCL_P2P_DISABLE=1: the shipped `p2p-off`) or ACS off. SGLang's custom all-reduce and
FlashInfer's PCIe-IPC all-reduce use the same CUDA IPC peer path.

Sources, each optional (whatever is missing is said, never guessed):
- `lspci -vvv` (pciutils): every device's block. A bridge's `Bus: primary=, secondary=`
  gives the tree, its `ACSCtl:` line the ACS control bits (pciutils' ls-ecaps.c prints
  `ACSCtl:\\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-`),
  `LnkSta:` the link, `NUMA node:` and `IOMMU group:` the rest. Without root lspci prints
  `Capabilities: <access denied>` instead of the extended capabilities: ACS is then
  unknown, and the report says so.
- the IOMMU: `/sys/kernel/iommu_groups/N/{devices,type}` (type `identity` = passthrough,
  `DMA`/`DMA-FQ` = translating) and the kernel command line (`iommu=pt`, `intel_iommu=`,
  `amd_iommu=`, `iommu.passthrough=`).
- `nvidia-smi topo -p2p r` / `w`: the driver's P2P read/write status per pair (`OK`, `CNS`,
  `GNS`, `TNS`, `NS`, `DR`, `U`). `OK` is the driver's capability table, not a test of the
  path: the published ACS hangs report `OK` for the hanging pair.

`parse_lspci`, `parse_p2p_matrix`, `iommu_state` and `analyse` are pure (tests feed them
real captured output); `collect(HostInputs)` runs the commands and reads the files.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

P2P_OFF_PROFILE = "p2p-off"  # the shipped profile with NCCL_P2P_DISABLE=1
REDIRECT_BITS = ("ReqRedir", "CmpltRedir")  # ACS P2P Request / Completion Redirect
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl",
            "DirectTrans")  # fmt: skip
GPU_CLASSES = ("VGA compatible controller", "3D controller")
P2P_STATUS = {
    "OK": "supported",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DR": "disabled by regkey",
    "U": "unknown",
}
ACS_FIX = (
    "turn PCIe ACS off in the BIOS (the ACS / 'ACS Enable' setting of the PCIe root "
    "complex), or until the next reboot, as root, clear each listed bridge's ACS control "
    "register: setpci -s BDF ECAP_ACS+6.w=0000"
)

_HEADER = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\."
    r"(?P<fn>[0-7])\s+(?P<cls>[^:\[]+?)(?:\s*\[[0-9a-fA-F]{4}\])?:\s*(?P<name>.*)$"
)
_BUS = re.compile(r"Bus:\s*primary=([0-9a-fA-F]+),\s*secondary=([0-9a-fA-F]+),\s*"
                  r"subordinate=([0-9a-fA-F]+)")  # fmt: skip
_FLAGS = re.compile(r"([A-Za-z]+)([+-])")
_PORT = re.compile(r"Express \(v\d\) ([A-Za-z ]+?)(?: \(|,|$)")
_LNKSTA = re.compile(r"LnkSta:\s*Speed ([0-9.]+GT/s)[^,]*,\s*Width (x\d+)")
_LNKCAP = re.compile(r"LnkCap:\s*Port #\d+,\s*Speed ([0-9.]+GT/s),\s*Width (x\d+)")


@dataclass
class PciDevice:
    """One device block of `lspci -vvv`."""

    bdf: str  # domain:bus:dev.fn, the domain filled in (0000) when lspci left it out
    kind: str  # lspci's class text: "PCI bridge", "3D controller", ...
    name: str
    secondary: int | None = None  # a bridge's secondary bus
    subordinate: int | None = None
    port: str | None = None  # "Root Port", "Downstream Port", "Upstream Port", "Endpoint"
    acs_ctl: dict[str, bool] | None = None  # None: no ACSCtl line
    has_acs: bool = False  # an "Access Control Services" capability was listed
    caps_denied: bool = False  # "Capabilities: <access denied>" (lspci without root)
    numa_node: int | None = None
    iommu_group: str | None = None
    link: str | None = None  # LnkSta "16GT/s x16"
    link_cap: str | None = None  # LnkCap "32GT/s x16"

    @property
    def domain(self) -> str:
        return self.bdf.rsplit(":", 2)[0]

    @property
    def bus(self) -> int:
        return int(self.bdf.rsplit(":", 2)[1], 16)

    @property
    def is_gpu(self) -> bool:
        return self.kind in GPU_CLASSES and "NVIDIA" in self.name.upper()

    @property
    def is_bridge(self) -> bool:
        return self.secondary is not None

    @property
    def redirects(self) -> list[str]:
        """The ACS redirect bits that are on ([] without ACS, or when unreadable)."""
        return [b for b in REDIRECT_BITS if (self.acs_ctl or {}).get(b)]

    def acs_text(self) -> str:
        if self.acs_ctl is None:
            return "no ACS" if not self.caps_denied else "ACS unreadable"
        on = [b for b in ACS_BITS if self.acs_ctl.get(b)]
        return "ACSCtl " + (" ".join(f"{b}+" for b in on) if on else "all off")


@dataclass
class LspciText:
    """What `lspci -vvv` said: the device blocks, and ACSCtl lines that came without a
    device header (a published `lspci -vvv | grep ACSCtl`)."""

    devices: dict[str, PciDevice] = field(default_factory=dict)
    loose_acs: list[dict[str, bool]] = field(default_factory=list)


def _flags(text: str) -> dict[str, bool]:
    return {k: v == "+" for k, v in _FLAGS.findall(text)}


def parse_lspci(text: str) -> LspciText:
    """Parse `lspci -vvv` (with or without -D / -nn); never raises."""
    out = LspciText()
    dev: PciDevice | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _HEADER.match(line)
        if m and not raw[:1].isspace():
            bdf = f"{(m['dom'] or '0000').lower()}:{m['bus'].lower()}:{m['dev'].lower()}.{m['fn']}"
            dev = PciDevice(bdf=bdf, kind=m["cls"].strip(), name=m["name"].strip())
            out.devices[bdf] = dev
            continue
        s = line.strip()
        if s.startswith("ACSCtl:"):
            flags = _flags(s[len("ACSCtl:") :])
            if dev is None:
                out.loose_acs.append(flags)
            else:
                dev.acs_ctl = flags
            continue
        if dev is None:
            continue
        if b := _BUS.search(s):
            dev.secondary, dev.subordinate = int(b[2], 16), int(b[3], 16)
        elif s.startswith("Capabilities:"):
            if "<access denied>" in s:
                dev.caps_denied = True
            elif "Access Control Services" in s:
                dev.has_acs = True
            elif p := _PORT.search(s):
                dev.port = p[1].strip()
        elif s.startswith("NUMA node:"):
            val = s.split(":", 1)[1].strip()
            dev.numa_node = int(val) if val.lstrip("-").isdigit() else None
        elif s.startswith("IOMMU group:"):
            dev.iommu_group = s.split(":", 1)[1].strip()
        elif ls := _LNKSTA.search(s):
            dev.link = f"{ls[1]} {ls[2]}"
        elif lc := _LNKCAP.search(s):
            dev.link_cap = f"{lc[1]} {lc[2]}"
    return out


def parse_p2p_matrix(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -p2p r` (or w, n, a, p): (i, j) -> status (OK, CNS, NS, ...)."""
    cells: dict[tuple[int, int], str] = {}
    header: list[int] | None = None
    for raw in text.splitlines():
        toks = raw.split()
        if not toks or toks[0].startswith("Legend"):
            if header is not None and toks and toks[0].startswith("Legend"):
                break
            continue
        if header is None and all(re.fullmatch(r"GPU\d+", t) for t in toks):
            header = [int(t[3:]) for t in toks]
            continue
        if header is None or not re.fullmatch(r"GPU\d+", toks[0]):
            continue
        row = int(toks[0][3:])
        for col, cell in zip(header, toks[1:], strict=False):
            if col != row:
                cells[(row, col)] = cell
    return cells


@dataclass
class IommuState:
    mode: str  # "off", "passthrough", "translating", "unknown"
    evidence: str
    groups: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "evidence": self.evidence, "groups": self.groups}


_CMDLINE_OFF = ("iommu=off", "intel_iommu=off", "amd_iommu=off")
_CMDLINE_PT = ("iommu=pt", "iommu.passthrough=1")


def iommu_state(groups: Mapping[str, str | None] | None, cmdline: str | None) -> IommuState:
    """The IOMMU mode from the groups (`{group: type or None}`; None: not listable) and the
    kernel command line."""
    words = (cmdline or "").split()
    said = [w for w in words if w in _CMDLINE_OFF + _CMDLINE_PT or w.startswith(
        ("intel_iommu=", "amd_iommu=", "iommu=", "iommu.passthrough="))]  # fmt: skip
    cmd = f"kernel command line: {' '.join(said) or 'no iommu option'}"
    if groups is None:
        if any(w in _CMDLINE_OFF for w in said):
            return IommuState("off", cmd)
        return IommuState("unknown", f"/sys/kernel/iommu_groups not readable; {cmd}")
    if not groups:
        return IommuState("off", f"no IOMMU groups in /sys/kernel/iommu_groups; {cmd}")
    types = {t for t in groups.values() if t}
    n = len(groups)
    if types and types <= {"identity"}:
        return IommuState("passthrough", f"{n} IOMMU groups, type identity; {cmd}", n)
    if types:
        kinds = ", ".join(sorted(types))
        return IommuState("translating", f"{n} IOMMU groups, type {kinds}; {cmd}", n)
    if any(w in _CMDLINE_PT for w in said):
        return IommuState("passthrough", f"{n} IOMMU groups (types not listed); {cmd}", n)
    return IommuState("translating", f"{n} IOMMU groups, no passthrough option; {cmd}", n)


@dataclass
class PairPath:
    a: int
    b: int
    via: str  # "switch BDF" or "root complex"
    bridges: list[str]  # the bridges on the peer path (below the common switch)
    redirecting: list[str]  # those with ACS redirect on
    unreadable: list[str]  # those whose ACS could not be read
    p2p_read: str | None = None
    p2p_write: str | None = None

    @property
    def redirected(self) -> bool:
        return bool(self.redirecting)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": [self.a, self.b],
            "via": self.via,
            "bridges": self.bridges,
            "redirecting": self.redirecting,
            "unreadable": self.unreadable,
            "p2p_read": self.p2p_read,
            "p2p_write": self.p2p_write,
        }


@dataclass
class PcieReport:
    """The verdict: `status` is "redirect" (an ACS redirect on some GPU pair's path),
    "direct" (every pair checked, none redirected), "unknown" (could not check: `why`)."""

    status: str
    why: str
    gpus: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[PairPath] = field(default_factory=list)
    iommu: IommuState | None = None
    redirecting_bridges: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # what was read, or why not

    @property
    def redirected_pairs(self) -> list[PairPath]:
        return [p for p in self.pairs if p.redirected]

    def message(self) -> str:
        """The sentence doctor, tune and `profile set` print."""
        if self.status == "redirect":
            pairs = self.redirected_pairs
            iommu = f"; IOMMU {self.iommu.mode}" if self.iommu else ""
            tail = (
                "NCCL's P2P transport will hang or crawl, and so will SGLang's custom and "
                "PCIe-IPC all-reduces"
            )
            if not pairs:  # ACSCtl lines without device blocks
                return (
                    f"P2P between GPUs may go through an ACS-redirecting bridge ({self.why}; "
                    f"the output names no device, so which GPUs sit below them is unknown"
                    f"{iommu}): {tail}"
                )
            which = ", ".join(f"GPU {p.a} and {p.b}" for p in pairs[:6]) + (
                f" (+{len(pairs) - 6} more pairs)" if len(pairs) > 6 else ""
            )
            bridges = ", ".join(self.redirecting_bridges[:8])
            return (
                f"P2P between {which} goes through an ACS-redirecting bridge ({bridges}: "
                f"ACS P2P request/completion redirect on{iommu}): {tail}"
            )
        if self.status == "direct":
            return f"P2P between the GPUs is direct: {self.why}"
        return f"could not check the PCIe path between GPUs: {self.why}"

    def fix(self) -> str:
        if self.status != "redirect":
            return ""
        return (
            f"use a profile with NCCL_P2P_DISABLE=1 (shipped: {P2P_OFF_PROFILE}, which also "
            f"turns SGLang's custom all-reduce off: fastverifyctl profile set "
            f"{P2P_OFF_PROFILE}), or {ACS_FIX}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "why": self.why,
            "message": self.message(),
            "fix": self.fix(),
            "gpus": self.gpus,
            "pairs": [p.to_dict() for p in self.pairs],
            "iommu": self.iommu.to_dict() if self.iommu else None,
            "redirecting_bridges": self.redirecting_bridges,
            "sources": self.sources,
        }


def _chain(dev: PciDevice, devices: Mapping[str, PciDevice]) -> list[PciDevice]:
    """The bridges above `dev`, nearest first, up to the root port."""
    bridges = [d for d in devices.values() if d.is_bridge]
    out: list[PciDevice] = []
    cur = dev
    while len(out) < 32:
        parent = next(
            (b for b in bridges if b.domain == cur.domain and b.secondary == cur.bus
             and b.bdf != cur.bdf),
            None,
        )  # fmt: skip
        if parent is None:
            break
        out.append(parent)
        cur = parent
    return out


def analyse(
    lspci: LspciText | None,
    *,
    why_no_lspci: str = "",
    p2p_read: Mapping[tuple[int, int], str] | None = None,
    p2p_write: Mapping[tuple[int, int], str] | None = None,
    iommu: IommuState | None = None,
    gpu_bdfs: Sequence[str] | None = None,
    sources: Mapping[str, str] | None = None,
) -> PcieReport:
    """The verdict from what could be read. `gpu_bdfs`: nvidia-smi's GPU order (index i is
    `gpu_bdfs[i]`); without it the NVIDIA GPUs in PCI order (nvidia-smi's default)."""
    src = dict(sources or {})
    if lspci is None:
        return PcieReport("unknown", why_no_lspci or "no lspci output", iommu=iommu, sources=src)
    devs = lspci.devices
    if not devs and lspci.loose_acs:
        n = sum(1 for f in lspci.loose_acs if any(f.get(b) for b in REDIRECT_BITS))
        if n:
            return PcieReport(
                "redirect",
                f"{n} of {len(lspci.loose_acs)} bridges' ACSCtl lines have a redirect bit on",
                iommu=iommu,
                sources=src,
            )
        return PcieReport(
            "direct",
            f"none of {len(lspci.loose_acs)} ACSCtl lines has a redirect bit on "
            "(lines without device names: which bridge is above which GPU is not known)",
            iommu=iommu,
            sources=src,
        )
    gpus = [d for d in devs.values() if d.is_gpu]
    if gpu_bdfs:
        by = {d.bdf: d for d in gpus}
        norm = [_norm_bdf(b) for b in gpu_bdfs]
        missing = [b for b in norm if b not in by]
        if missing:
            return PcieReport(
                "unknown",
                f"lspci lists no NVIDIA GPU at {', '.join(missing)} (nvidia-smi's GPUs)",
                iommu=iommu,
                sources=src,
            )
        gpus = [by[b] for b in norm]
    else:
        gpus.sort(key=lambda d: d.bdf)
    if not gpus:
        return PcieReport("unknown", "lspci lists no NVIDIA GPU", iommu=iommu, sources=src)
    chains = [_chain(g, devs) for g in gpus]
    gpu_rows = [
        {
            "index": i,
            "bdf": g.bdf,
            "name": g.name,
            "numa_node": g.numa_node,
            "iommu_group": g.iommu_group,
            "link": g.link,
            "link_cap": g.link_cap,
            "bridges": [{"bdf": b.bdf, "port": b.port, "acs": b.acs_text()} for b in ch],
        }
        for i, (g, ch) in enumerate(zip(gpus, chains, strict=True))
    ]
    pairs: list[PairPath] = []
    for i in range(len(gpus)):
        for j in range(i + 1, len(gpus)):
            ids_i = [b.bdf for b in chains[i]]
            common = next((b for b in chains[j] if b.bdf in ids_i), None)
            if common is not None:
                path = (
                    chains[i][: ids_i.index(common.bdf)]
                    + chains[j][: [b.bdf for b in chains[j]].index(common.bdf)]
                )
                via = f"switch {common.bdf}"
            else:
                path = chains[i] + chains[j]
                via = "root complex"
            pairs.append(
                PairPath(
                    i,
                    j,
                    via,
                    [b.bdf for b in path],
                    [b.bdf for b in path if b.redirects],
                    [b.bdf for b in path if b.acs_ctl is None and b.caps_denied],
                    (p2p_read or {}).get((i, j)),
                    (p2p_write or {}).get((i, j)),
                )
            )
    redirecting = sorted({b for p in pairs for b in p.redirecting})
    unreadable = sorted({b for p in pairs for b in p.unreadable})
    report = PcieReport("direct", "", gpu_rows, pairs, iommu, redirecting, src)
    if redirecting:
        report.status = "redirect"
        report.why = f"ACS redirect on {', '.join(redirecting)}"
    elif len(gpus) < 2:
        report.why = "one GPU: no peer traffic"
    elif unreadable:
        report.status = "unknown"
        report.why = (
            f"lspci could not read the ACS capability of {', '.join(unreadable)} (without "
            "root it prints `Capabilities: <access denied>`): run doctor as root, or check "
            "`sudo lspci -vvv` yourself"
        )
    else:
        n = len({b for p in pairs for b in p.bridges})
        vias = sorted({p.via for p in pairs})
        report.why = (
            f"no ACS redirect on the {n} bridge(s) between {len(gpus)} GPUs "
            f"(peer path via {', '.join(vias)})"
        )
    return report


def _norm_bdf(bdf: str) -> str:
    """nvidia-smi's `00000000:41:00.0` -> `0000:41:00.0`."""
    parts = bdf.strip().lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0000")
    dom = parts[0][-4:].rjust(4, "0")
    return f"{dom}:{parts[1]}:{parts[2]}"


@dataclass
class HostInputs:
    """Where the facts are read; every default is the real host location."""

    path_env: str | None = None  # PATH for lspci and nvidia-smi (None: this process's)
    sys_root: Path = Path("/")  # /sys and /proc are read under it
    timeout_s: float = 20.0


def _run(exe: str | None, args: list[str], timeout: float) -> tuple[str | None, str]:
    if exe is None:
        return None, "not found"
    try:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout,
                              check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"failed: {exc}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        return None, f"exit {proc.returncode}: {last[:200]}"
    return proc.stdout, "ok"


def read_iommu_groups(sys_root: Path) -> dict[str, str | None] | None:
    """`{group: type}` from /sys/kernel/iommu_groups (type None when the file is absent);
    None when the directory cannot be listed."""
    base = sys_root / "sys" / "kernel" / "iommu_groups"
    try:
        names = sorted(p.name for p in base.iterdir())
    except OSError:
        return None
    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = (base / n / "type").read_text().strip()
        except OSError:
            out[n] = None
    return out


def collect(inputs: HostInputs | None = None) -> PcieReport:
    """Run `lspci -vvv -D`, `nvidia-smi topo -p2p r|w` and `nvidia-smi --query-gpu=pci.bus_id`
    and read the IOMMU state; whatever cannot be run is said in `sources`."""
    inp = inputs or HostInputs()
    lspci_exe = shutil.which("lspci", path=inp.path_env)
    smi = shutil.which("nvidia-smi", path=inp.path_env)
    sources: dict[str, str] = {}
    text, how = _run(lspci_exe, ["-vvv", "-D"], inp.timeout_s)
    sources["lspci -vvv -D"] = how if lspci_exe else "lspci not found on PATH (pciutils)"
    p2p: dict[str, dict[tuple[int, int], str]] = {}
    for mode in ("r", "w"):
        out, how = _run(smi, ["topo", "-p2p", mode], inp.timeout_s)
        sources[f"nvidia-smi topo -p2p {mode}"] = how
        if out:
            p2p[mode] = parse_p2p_matrix(out)
    bus_ids: list[str] | None = None
    out, how = _run(smi, ["--query-gpu=pci.bus_id", "--format=csv,noheader"], inp.timeout_s)
    sources["nvidia-smi --query-gpu=pci.bus_id"] = how
    if out and out.strip():
        bus_ids = [ln.strip() for ln in out.splitlines() if ln.strip()]
    try:
        cmdline: str | None = (inp.sys_root / "proc" / "cmdline").read_text()
    except OSError:
        cmdline = None
    iommu = iommu_state(read_iommu_groups(inp.sys_root), cmdline)
    if text is None:
        why = (
            "lspci not found (install pciutils: apt-get install pciutils), so ACS cannot be read"
            if lspci_exe is None
            else f"lspci -vvv {sources['lspci -vvv -D']}"
        )
        return analyse(None, why_no_lspci=why, iommu=iommu, sources=sources)
    return analyse(
        parse_lspci(text),
        p2p_read=p2p.get("r"),
        p2p_write=p2p.get("w"),
        iommu=iommu,
        gpu_bdfs=bus_ids,
        sources=sources,
    )


def p2p_users(env: Mapping[str, str], requires: Mapping[str, str]) -> list[str]:
    """What in a profile would send peer traffic over PCIe P2P ([] for none): NCCL unless
    NCCL_P2P_DISABLE=1, FlashInfer's PCIe-IPC all-reduce when the profile turns it on, and
    SGLang's custom all-reduce unless the profile requires it off (it serves 2 PCIe GPUs)."""
    out = []
    if str(env.get("NCCL_P2P_DISABLE", "")).strip() != "1":
        out.append("NCCL's P2P transport (NCCL_P2P_DISABLE is not 1)")
    if str(env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")).strip().lower() in ("1", "true"):
        out.append("FlashInfer's PCIe-IPC all-reduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1)")
    if requires.get("custom-all-reduce") != "off":
        out.append("SGLang's custom all-reduce (2 PCIe GPUs; not required off)")
    return out
