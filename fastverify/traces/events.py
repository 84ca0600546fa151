"""The events of a kineto (torch.profiler chrome) trace that the verify analysis reads:
verify spans (GPU annotations, or CPU ranges), all-reduce kernels and their launches, and
which all-reduce backend a kernel is (NCCL, SGLang's custom all-reduce, FlashInfer's
PCIe-IPC, including its copy-engine tactics: ce_groups.py); a trace file's rank from its
name. `classify` files one decoded event; both readers (reader.py) use it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from fastverify.sglang import allreduce
from fastverify.traces import ce_groups

ALLREDUCE_PREFIXES: tuple[str, ...] = (
    "ncclDevKernel_AllReduce",
    "ncclKernel_AllReduce",
    "cross_device_reduce_",
)
PCIE_IPC_NAMESPACE = allreduce.KERNEL_NAMESPACE
DEFAULT_SPAN = "VERIFY"  # either naming: step[VERIFY ...] (0.5.23) or step[TARGET_VERIFY ...]


def span_matches(name: str, span: str = DEFAULT_SPAN) -> bool:
    """Whether a range named `name` is a `span` forward. VERIFY or TARGET_VERIFY select the
    target verify forward in both namings (fastverify.sglang.spans); drafter forwards
    (`step[DRAFT ...]`, or any range a draft runner names `draft ...`) never match."""
    from fastverify.sglang import spans

    if name.lstrip().lower().startswith("draft"):
        return False
    step = spans.parse_step_span(name)
    if step is not None:
        if step.is_draft:
            return False
        # a span given as the range's own prefix ("step[VERIFY") names its stage
        stage = span.removeprefix("step[").split(" ")[0].rstrip("]") if span else span
        if stage in spans.VERIFY_STAGES:
            return step.is_verify
        return step.stage == stage
    return span in name


_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
_SPAN_CATS = ("gpu_user_annotation", "user_annotation")
# SGLang: `[{prefix}-]{id}-TP-{r}[-DP-{d}][-PP-{p}][-EP-{e}][-{stage}].trace.json.gz`
_RANK_IN_NAME = re.compile(
    r"-TP-(\d+)((?:-(?:DP|PP|EP)-\d+)*)(?:-([A-Za-z_]+))?(?:\.trace)?\.json(?:\.gz)?$"
)


class TraceError(ValueError):
    """A trace file that cannot be read (not JSON, truncated gzip, no traceEvents)."""


class Span(NamedTuple):
    device: Any
    ts: float
    dur: float
    name: str
    gpu: bool
    pid: Any = None
    tid: Any = None


class Kernel(NamedTuple):
    device: Any
    ts: float
    dur: float
    name: str
    correlation: Any = None
    tid: Any = None  # the stream


class Launch(NamedTuple):
    pid: Any
    tid: Any
    ts: float
    correlation: Any


@dataclass
class Extract:
    """The events of one trace that the analysis needs (everything else is skipped)."""

    spans: list[Span] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)  # all-reduce kernels only
    launches: list[Launch] = field(default_factory=list)  # only when asked for (CPU fallback)
    rank: int | None = None
    bytes_read: int = 0
    exact: bool = False  # True when the straightforward parser produced it


def is_allreduce_kernel(name: str) -> bool:
    """NCCL, SGLang custom all-reduce or FlashInfer PCIe-IPC all-reduce kernel (demangled
    template names start `void `)."""
    return (
        name.startswith(ALLREDUCE_PREFIXES)
        or (name.startswith("void ") and name[5:].startswith(ALLREDUCE_PREFIXES))
        or (PCIE_IPC_NAMESPACE in name and allreduce.is_pcie_ipc_kernel(name))
        or ce_groups.is_ce(name)
    )


def allreduce_backend(name: str) -> str:
    """`nccl`, `custom` (SGLang's cross_device_reduce_*) or `pcie_ipc` for an all-reduce
    kernel name."""
    if PCIE_IPC_NAMESPACE in name:
        return allreduce.PCIE_IPC
    bare = name[5:] if name.startswith("void ") else name
    return allreduce.CUSTOM if bare.startswith("cross_device_reduce_") else allreduce.NCCL


def rank_from_name(path: str | Path) -> int | None:
    """The TP rank in SGLang's trace file name, or None."""
    key = rank_key(path)
    return key[0] if key else None


def rank_key(path: str | Path) -> tuple[int, str, str] | None:
    """(TP rank, other parallel ranks like "DP-1-EP-0" or "", stage like "decode" or "")."""
    m = _RANK_IN_NAME.search(Path(path).name)
    if m is None:
        return None
    return int(m.group(1)), (m.group(2) or "").lstrip("-"), m.group(3) or ""


def classify(ev: dict[str, Any], out: Extract, want_launches: bool) -> None:
    """Add one decoded event to `out` when it matters (shared by both parsers)."""
    cat = ev.get("cat")
    if cat == "kernel":  # the hot case: checked first, with as few lookups as possible
        name = ev.get("name")
        if isinstance(name, str) and is_allreduce_kernel(name) and ev.get("ph") == "X":
            args = ev.get("args")
            corr = args.get("correlation") if isinstance(args, dict) else None
            out.kernels.append(
                Kernel(
                    ev.get("pid"),
                    float(ev["ts"]),
                    float(ev.get("dur", 0.0)),
                    name,
                    corr,
                    ev.get("tid"),
                )
            )
        return
    if ev.get("ph") != "X":
        return
    name = ev.get("name")
    if not isinstance(name, str):
        return
    if cat in _SPAN_CATS:
        gpu = cat == "gpu_user_annotation"  # a GPU range is on its device; a CPU one on none
        pid = ev.get("pid")
        ts, dur = float(ev["ts"]), float(ev.get("dur", 0.0))
        out.spans.append(Span(pid if gpu else None, ts, dur, name, gpu, pid, ev.get("tid")))
    elif want_launches and cat in _LAUNCH_CATS:
        args = ev.get("args") or {}
        if "correlation" in args:
            out.launches.append(
                Launch(ev.get("pid"), ev.get("tid"), float(ev["ts"]), args["correlation"])
            )
