"""GPU topology from `nvidia-smi topo -m`: NVLink vs PCIe, NUMA split, per-pair links.

`parse_topo_matrix(text)` reads nvidia-smi's matrix (GPU rows with X / NV# / PIX /
PXB / PHB / NODE / SYS cells, then CPU Affinity, NUMA Affinity, GPU NUMA ID columns);
`detect(path_env)` runs `nvidia-smi topo -m` found on PATH (a 10 s timeout) and returns
a `GpuTopology`, or None when nvidia-smi is absent or fails. `detect_cached()` gives
the `validate.Topology` used by profile validation, computed once per process.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from fastverify.profiles.validate import Topology

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_DEV = re.compile(r"(GPU|NIC)\d+")
_AFFINITY_HEADERS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass
class GpuTopology:
    """The GPU part of `nvidia-smi topo -m`."""

    gpus: list[str] = field(default_factory=list)
    links: dict[tuple[str, str], str] = field(default_factory=dict)  # (GPUa, GPUb) -> cell
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    nics: list[str] = field(default_factory=list)

    def pair_links(self) -> list[str]:
        return [
            self.links[(a, b)]
            for i, a in enumerate(self.gpus)
            for b in self.gpus[i + 1 :]
            if (a, b) in self.links
        ]

    @property
    def has_nvlink(self) -> bool:
        return any(c.startswith("NV") for c in self.pair_links())

    @property
    def all_nvlink(self) -> bool:
        cells = self.pair_links()
        return bool(cells) and all(c.startswith("NV") for c in cells)

    @property
    def numa_nodes(self) -> list[str]:
        return sorted({v for v in self.numa_affinity.values() if v and v != "N/A"})

    @property
    def crosses_numa(self) -> bool:
        return "SYS" in self.pair_links()

    def link_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self.pair_links():
            counts[c] = counts.get(c, 0) + 1
        return counts

    def summary(self) -> str:
        n = len(self.gpus)
        if n == 0:
            return "no GPUs"
        if self.all_nvlink:
            kind = f"NVLink between all pairs ({', '.join(sorted(set(self.pair_links())))})"
        elif self.has_nvlink:
            kind = "NVLink between some pairs, PCIe between others"
        else:
            kind = (
                "PCIe only (" + ", ".join(f"{k} x{v}" for k, v in self.link_counts().items()) + ")"
            )
        numa = f", {len(self.numa_nodes)} NUMA nodes" if self.numa_nodes else ""
        return f"{n} GPUs, {kind}{numa}"

    def to_topology(self) -> Topology:
        return Topology(has_nvlink=self.has_nvlink, source=f"nvidia-smi topo -m: {self.summary()}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": self.gpus,
            "nics": self.nics,
            "has_nvlink": self.has_nvlink,
            "all_nvlink": self.all_nvlink,
            "numa_nodes": self.numa_nodes,
            "crosses_numa": self.crosses_numa,
            "link_counts": self.link_counts(),
            "links": {f"{a}-{b}": c for (a, b), c in sorted(self.links.items()) if a < b},
            "cpu_affinity": self.cpu_affinity,
            "numa_affinity": self.numa_affinity,
            "summary": self.summary(),
        }


class TopologyParseError(ValueError):
    pass


def _split_header(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t") if c.strip()]
    tokens = line.split()
    out: list[str] = []
    i = 0
    while i < len(tokens):
        for h in _AFFINITY_HEADERS:
            words = h.split()
            if tokens[i : i + len(words)] == words:
                out.append(h)
                i += len(words)
                break
        else:
            out.append(tokens[i])
            i += 1
    return out


def parse_topo_matrix(text: str) -> GpuTopology:
    """Parse `nvidia-smi topo -m` output; raises TopologyParseError when no matrix is found."""
    lines = [_ANSI.sub("", ln).rstrip("\r") for ln in text.splitlines()]
    header: list[str] | None = None
    topo = GpuTopology()
    for line in lines:
        if line.strip().startswith("Legend"):
            break
        cells_raw = line.split("\t") if "\t" in line else line.split()
        first = cells_raw[0].strip() if cells_raw else ""
        if header is None:
            cand = _split_header(line)
            if cand and cand[0] == "GPU0":
                header = cand
                devs = [c for c in header if _DEV.fullmatch(c)]
                topo.gpus = [d for d in devs if d.startswith("GPU")]
                topo.nics = [d for d in devs if d.startswith("NIC")]
            continue
        if not _DEV.fullmatch(first) or not first.startswith("GPU"):
            continue
        cells = [c.strip() for c in cells_raw[1:]]
        ndev = len(topo.gpus) + len(topo.nics)
        # device cells keep their position (even " X "); affinity cells follow
        dev_cells = [c for c in cells if c][:ndev]
        rest = [c for c in cells if c][ndev:]
        if len(dev_cells) < ndev:
            raise TopologyParseError(f"row {first}: {len(dev_cells)} link cells, expected {ndev}")
        devs = topo.gpus + topo.nics
        for dev, cell in zip(devs, dev_cells, strict=True):
            if dev.startswith("GPU") and dev != first:
                topo.links[(first, dev)] = cell
        aff_headers = [h for h in header if h in _AFFINITY_HEADERS]
        for h, v in zip(aff_headers, rest, strict=False):
            if h == "CPU Affinity":
                topo.cpu_affinity[first] = v
            elif h == "NUMA Affinity":
                topo.numa_affinity[first] = v
    if header is None or not topo.gpus:
        raise TopologyParseError("no GPU matrix found (expected a header line starting with GPU0)")
    missing = [g for g in topo.gpus if not any(k[0] == g for k in topo.links)]
    if len(topo.gpus) > 1 and missing:
        raise TopologyParseError(f"no matrix row for {', '.join(missing)}")
    return topo


def run_nvidia_smi(path_env: str | None = None, timeout: float = 10.0) -> str | None:
    """stdout of `nvidia-smi topo -m` (nvidia-smi looked up on `path_env`), or None."""
    exe = shutil.which("nvidia-smi", path=path_env)
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout


def detect(path_env: str | None = None) -> GpuTopology | None:
    """The GPU topology of this host, or None when nvidia-smi is absent or unreadable."""
    out = run_nvidia_smi(path_env)
    if out is None:
        return None
    try:
        return parse_topo_matrix(out)
    except TopologyParseError:
        return None


@functools.lru_cache(maxsize=1)
def detect_cached() -> Topology:
    """What profile validation needs (NVLink or not), detected once per process."""
    topo = detect()
    if topo is None:
        return Topology(has_nvlink=None, source="unknown: nvidia-smi not available")
    return topo.to_topology()


@dataclass(frozen=True)
class Recommendation:
    profile: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"profile": self.profile, "reason": self.reason}


def recommend(topo: GpuTopology | None, available: set[str]) -> list[Recommendation]:
    """Profiles to try first on this topology, best first, like `tuned-adm recommend`.

    Only names in `available` are returned. The reasoning: over NVLink NCCL's own
    choice (NVLS / LL128) is hard to beat; over PCIe with more than two GPUs SGLang's
    custom all-reduce is off, so the all-reduce backend comes first (FlashInfer's PCIe-IPC
    kernels for decode/verify sizes, `pcie-ipc`), then NCCL tuning for what stays on NCCL:
    messages in a verify pass are small, so the latency-bound Ring/LL family, with P2P
    allowed across the CPU interconnect when GPUs span NUMA nodes.
    """
    recs: list[Recommendation] = []

    def add(name: str, reason: str) -> None:
        if name in available and all(r.profile != name for r in recs):
            recs.append(Recommendation(name, reason))

    if topo is None:
        add("nccl-default", "GPU topology unknown (nvidia-smi not available): let NCCL decide")
        return recs
    return recommend_for(
        len(topo.gpus),
        topo.summary(),
        available,
        all_nvlink=topo.all_nvlink,
        has_nvlink=topo.has_nvlink,
        crosses_numa=topo.crosses_numa,
    )


def recommend_for(
    n: int,
    summary: str,
    available: set[str],
    *,
    all_nvlink: bool,
    has_nvlink: bool,
    crosses_numa: bool = False,
) -> list[Recommendation]:
    """`recommend` for a host described by its GPU count and links (e.g. the daemon's
    engine capabilities: the sim's simulated host, which has no `nvidia-smi topo -m`)."""
    recs: list[Recommendation] = []

    def add(name: str, reason: str) -> None:
        if name in available and all(r.profile != name for r in recs):
            recs.append(Recommendation(name, reason))

    if n <= 1:
        add("nccl-default", "one GPU: no all-reduce to tune")
        return recs
    if all_nvlink:
        add("nccl-default", f"{summary}: NCCL picks NVLS/LL128 over NVLink by itself")
        return recs
    numa = ""
    if crosses_numa:
        numa = "; GPUs span NUMA nodes (SYS), so P2P needs NCCL_P2P_LEVEL=SYS"
    if has_nvlink:
        add("nccl-default", f"{summary}: mixed links, NCCL's own choice first")
        add("ring-ll", f"then the latency-bound Ring/LL profile for the PCIe pairs{numa}")
        return recs
    if n in (2, 4, 8):  # SGLang 0.5.23's PCIe-IPC kernels build channels for 2/4/8 ranks
        add(
            "pcie-ipc",
            f"{summary}: first change the all-reduce backend: SGLang 0.5.23's FlashInfer "
            "PCIe-IPC all-reduce serves decode/verify sizes (published on 8 PCIe GPUs: 5.3 us "
            "against NCCL's 205 us at 12 KiB); NCCL keeps the larger ones",
        )
    add(
        "ring-ll",
        f"{summary}: small verify-pass all-reduces are latency-bound; Ring with the "
        f"LL protocol{numa} (for what stays on NCCL)",
    )
    add("ring-ll-8ch", "fewer channels: less per-call overhead for small messages")
    add("nccl-default", "the baseline to compare against")
    if n > 2:
        add("tree-ll-eager", "Tree/LL needs CUDA graphs off (Tree fails during graph capture)")
    return recs
