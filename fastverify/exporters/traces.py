"""Kineto (torch.profiler chrome trace) analysis: verify passes and their all-reduces.

What is measured, per rank (one trace file per TP rank, `*-TP-{rank}.trace.json[.gz]`):
- verify spans: GPU-side annotations (`cat: gpu_user_annotation`) whose name contains
  `TARGET_VERIFY` (`span=`); when a trace has no GPU annotation at all, CPU-side
  `user_annotation` ranges are used instead and kernels are attributed to them through the
  launch that enqueued them (kernel `args.correlation` == a `cuda_runtime`/`cuda_driver`
  launch whose start lies inside the CPU range);
- all-reduce kernels: names starting `ncclDevKernel_AllReduce`, `ncclKernel_AllReduce`
  (NCCL) or `cross_device_reduce_` (SGLang's custom all-reduce), after an optional `void `,
  and FlashInfer's PCIe-IPC all-reduce kernels (SGLang 0.5.23 with
  SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1) as kineto demangles them, `void
  flashinfer::comm::pcie_ipc::ipc_*_kernel<...>(...)` (`fastverify.sglang.allreduce`);
  each kernel's backend (nccl | custom | pcie_ipc) is reported per verify too; counted
  for a verify span when they start inside it on the same device (the GPU event's `pid`,
  kineto's device index, which equals `args.device`). Kernels of draft, draft extend or
  plain decode forwards are outside every verify span and are not counted.
- result: verify passes, verify ms p50/p90 (linear interpolation between closest ranks),
  all-reduces per verify, their GPU ms per verify and share of the verify time.

Speed and memory: the fast path never materialises the trace. It inflates `.gz` in
bounded chunks, finds candidate events with `bytes.find` on fixed needles (the annotation
categories and the all-reduce kernel name prefixes), cuts out just those events by brace
matching, and parses each with orjson. Anything it cannot cut unambiguously raises
`_Ambiguous`, and the file is re-read by the straightforward parser (`exact_events`), so
the answer is exact either way; tests compare both paths.
"""

from __future__ import annotations

import bisect
import gzip
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import orjson

from fastverify.exporters import ce_groups
from fastverify.sglang import allreduce

ALLREDUCE_PREFIXES: tuple[str, ...] = (
    "ncclDevKernel_AllReduce",
    "ncclKernel_AllReduce",
    "cross_device_reduce_",
)
_PCIE_IPC_NS = allreduce.KERNEL_NAMESPACE
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
# SGLang: `[{prefix}-]{id}-TP-{r}[-DP-{d}][-PP-{p}][-EP-{e}][-{stage}].trace.json.gz`
_RANK_IN_NAME = re.compile(
    r"-TP-(\d+)((?:-(?:DP|PP|EP)-\d+)*)(?:-([A-Za-z_]+))?(?:\.trace)?\.json(?:\.gz)?$"
)
_DIST_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_BRACE = re.compile(rb"[{}]")
_CHUNK_IN = 1 << 20  # compressed bytes read per step
_CHUNK_OUT = 8 << 20  # inflated bytes processed per step
_TAIL = 4096  # bytes kept across chunks so that no needle or event head is split


class TraceError(ValueError):
    """A trace file that cannot be read (not JSON, truncated gzip, no traceEvents)."""


class _Ambiguous(Exception):
    """The fast scanner met something it cannot cut exactly; use the exact parser."""


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
        or (_PCIE_IPC_NS in name and allreduce.is_pcie_ipc_kernel(name))
        or ce_groups.is_ce(name)
    )


def allreduce_backend(name: str) -> str:
    """`nccl`, `custom` (SGLang's cross_device_reduce_*) or `pcie_ipc` for an all-reduce
    kernel name."""
    if _PCIE_IPC_NS in name:
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


# ------------------------------------------------------------------ classification
def _classify(ev: dict[str, Any], out: Extract, want_launches: bool) -> None:
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
    if cat == "gpu_user_annotation":
        out.spans.append(
            Span(
                ev.get("pid"),
                float(ev["ts"]),
                float(ev.get("dur", 0.0)),
                name,
                True,
                ev.get("pid"),
                ev.get("tid"),
            )
        )
    elif cat == "user_annotation":
        out.spans.append(
            Span(
                None,
                float(ev["ts"]),
                float(ev.get("dur", 0.0)),
                name,
                False,
                ev.get("pid"),
                ev.get("tid"),
            )
        )
    elif want_launches and cat in _LAUNCH_CATS:
        args = ev.get("args") or {}
        if "correlation" in args:
            out.launches.append(
                Launch(ev.get("pid"), ev.get("tid"), float(ev["ts"]), args["correlation"])
            )


# ------------------------------------------------------------------ exact (reference) path
def _open(path: Path) -> BinaryIO:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def exact_events(path: str | Path, want_launches: bool = True) -> Extract:
    """The straightforward parser: load the whole document, loop over traceEvents."""
    path = Path(path)
    try:
        with _open(path) as fh:
            raw = fh.read()
        doc = orjson.loads(raw)
    except (OSError, EOFError, zlib.error, orjson.JSONDecodeError) as exc:
        raise TraceError(f"{path}: not a readable chrome trace ({exc})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents array (is this a torch.profiler trace?)")
    out = Extract(exact=True, bytes_read=len(raw))
    for ev in events:
        if isinstance(ev, dict):
            _classify(ev, out, want_launches)
    if isinstance(doc, dict):
        dist = doc.get("distributedInfo")
        if isinstance(dist, dict) and isinstance(dist.get("rank"), int):
            out.rank = dist["rank"]
    return out


# ------------------------------------------------------------------ fast path
def _chunks(path: Path) -> Iterator[bytes]:
    """Inflated (or plain) bytes of `path` in pieces of at most ~_CHUNK_OUT."""
    with open(path, "rb") as fh:
        head = fh.read(2)
        fh.seek(0)
        if head != b"\x1f\x8b":
            while True:
                block = fh.read(_CHUNK_OUT)
                if not block:
                    return
                yield block
        d = zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
        while True:
            data = fh.read(_CHUNK_IN)
            if not data:
                tail = d.flush()
                if tail:
                    yield tail
                if not d.eof:
                    raise TraceError(
                        f"{path}: truncated gzip stream (is the file still being written?)"
                    )
                return
            while data:
                out = d.decompress(data, _CHUNK_OUT)
                if out:
                    yield out
                data = d.unconsumed_tail
                if d.eof:
                    if d.unused_data.strip(b"\x00"):
                        # concatenated gzip members: start another inflater
                        data = d.unused_data
                        d = zlib.decompressobj(wbits=47)
                    else:
                        return


def _needles(want_launches: bool) -> tuple[bytes, ...]:
    # `Kernel_AllReduce` covers both NCCL families (ncclDevKernel_/ncclKernel_) in one pass;
    # the parsed name is checked against ALLREDUCE_PREFIXES afterwards.
    base = (
        b'user_annotation"',
        b"Kernel_AllReduce",
        b"cross_device_reduce_",
        _PCIE_IPC_NS.encode(),  # also FlashInfer's copy-engine kernels (ce_*_kernel)
    )
    return (*base, b'"cuda_runtime"', b'"cuda_driver"') if want_launches else base


def _event_end_slow(buf: bytes, start: int) -> int:
    depth = 0
    for m in _BRACE.finditer(buf, start):
        if buf[m.start()] == 0x7B:  # {
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return m.end()
    return -1


def _event_end(buf: bytes, start: int) -> int:
    """Index just past the object that opens at `start`, or -1 when buf ends first.

    Trace events hold at most one nested object (`args`), so three `find`s usually settle
    it; deeper nesting takes the brace-counting path. Braces inside strings can mislead
    both, which the caller's orjson parse of the cut then rejects (-> exact parser)."""
    close = buf.find(b"}", start)
    if close < 0:
        return -1
    opened = buf.find(b"{", start + 1, close)
    if opened < 0:
        return close + 1
    close2 = buf.find(b"}", close + 1)
    if close2 < 0:
        return -1
    if buf.find(b"{", opened + 1, close) < 0 and buf.find(b"{", close + 1, close2) < 0:
        return close2 + 1
    return _event_end_slow(buf, start)


def scan_events(path: str | Path, want_launches: bool = False) -> Extract:
    """The fast path (see module docstring). Raises _Ambiguous when it cannot be exact."""
    path = Path(path)
    out = Extract()
    needles = _needles(want_launches)
    buf = b""
    base = 0  # absolute offset of buf[0]
    done = 0  # absolute end of the last event consumed
    first = True
    total = 0
    chunks = _chunks(path)
    final = False
    while not final:
        try:
            piece = next(chunks)
        except StopIteration:
            piece = b""
            final = True
        total += len(piece)
        buf = buf + piece if buf else piece
        if first and buf:
            first = False
            m = _DIST_RANK.search(buf, 0, min(len(buf), 1 << 16))
            if m:
                out.rank = int(m.group(1))
            if buf.lstrip()[:1] not in (b"{", b"["):
                raise TraceError(f"{path}: not a chrome trace (does not start with JSON)")
        limit = len(buf) if final else len(buf) - 64
        hits: list[int] = []
        for needle in needles:
            pos = buf.find(needle, max(0, done - base))
            while 0 <= pos < limit:
                hits.append(pos)
                pos = buf.find(needle, pos + 1)
        hits.sort()
        carry_from = None
        done_rel = max(0, done - base)
        loads, classify = orjson.loads, _classify
        for p in hits:
            if p < done_rel:
                continue  # inside an event already consumed
            s = buf.rfind(b"{", done_rel, p)
            if s < 0:
                raise _Ambiguous(f"no event start before offset {p + base}")
            if not want_launches and buf[p] != 0x75:  # a kernel-name hit (not `user_...`)
                # Kineto writes ph, cat, name, pid, tid, ts, dur before args: parse only that
                # head (args hold nothing we need here). No `}` between name and `"args"`
                # proves both belong to this event; otherwise take the general path.
                a = buf.find(b'"args"', p, p + 8192)
                if a > 0 and buf.find(b"}", p, a) < 0:
                    head = buf[s:a].rstrip()
                    if head.endswith(b","):
                        try:
                            ev = loads(head[:-1] + b"}")
                        except orjson.JSONDecodeError:
                            raise _Ambiguous(f"cannot cut the event at {s + base}") from None
                        if ev.get("cat") == "kernel" and "ts" in ev:
                            classify(ev, out, False)
                            done_rel = a
                            continue
            e = _event_end(buf, s)
            if e < 0:
                if final:
                    raise TraceError(f"{path}: trace ends inside an event (truncated?)")
                carry_from = s
                break
            if e <= p:
                raise _Ambiguous(f"event at {s + base} closes before its own field")
            try:
                ev = loads(buf[s:e])
            except orjson.JSONDecodeError:
                raise _Ambiguous(f"cannot cut the event at offset {s + base}") from None
            if not isinstance(ev, dict) or "ph" not in ev or "cat" not in ev:
                raise _Ambiguous(f"the object at {s + base} is not a whole trace event")
            classify(ev, out, want_launches)
            done_rel = e
        done = base + done_rel
        if final:
            break
        if carry_from is None:
            carry_from = max(done - base, len(buf) - _TAIL, 0)
        base += carry_from
        buf = buf[carry_from:]
    if total == 0:
        raise TraceError(f"{path}: empty file")
    out.bytes_read = total
    return out


def extract(path: str | Path, want_launches: bool = False) -> Extract:
    """Fast path, falling back to the exact parser when the fast path cannot be sure.
    FlashInfer's copy-engine kernels come back folded into one entry per all-reduce."""
    try:
        ex = scan_events(path, want_launches)
    except _Ambiguous:
        ex = exact_events(path, want_launches)
    if any(ce_groups.is_ce(k.name) for k in ex.kernels):
        # a copy-engine all-reduce always has namespaced kernels (its closing handshake), so
        # the needles find it; the whole file is then read for the rest of its picture
        ce, starts, copies = _copy_engine_context(Path(path))
        kept = [k for k in ex.kernels if not ce_groups.is_ce(k.name)]
        ex.kernels = ce_groups.fold(kept + ce, starts, _refold, copies)
    return ex


def _refold(first: Kernel, ts: float, dur: float, name: str) -> Kernel:
    return first._replace(ts=ts, dur=dur, name=name)


def _copy_engine_context(
    path: Path,
) -> tuple[list[Kernel], dict[Any, list[tuple[float, Any]]], dict[Any, list[tuple[float, float]]]]:
    """Read in full (only traces with copy-engine kernels pay for it): every copy-engine
    kernel (the memop variant's extern "C" wait kernel has no needle), and per device,
    sorted, (start, stream) of every other kernel (the boundaries between copy-engine
    all-reduces) and (start, duration) of every device-to-device memcpy."""
    try:
        with _open(path) as fh:
            doc = orjson.loads(fh.read())
    except (OSError, EOFError, zlib.error, orjson.JSONDecodeError) as exc:
        raise TraceError(f"{path}: not a readable chrome trace ({exc})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    ce: list[Kernel] = []
    starts: dict[Any, list[tuple[float, Any]]] = {}
    copies: dict[Any, list[tuple[float, float]]] = {}
    for ev in events if isinstance(events, list) else ():
        if not isinstance(ev, dict) or ev.get("ph") != "X" or "ts" not in ev:
            continue
        cat, name = ev.get("cat"), str(ev.get("name", ""))
        if cat == "kernel":
            if ce_groups.is_ce(name):
                args = ev.get("args")
                corr = args.get("correlation") if isinstance(args, dict) else None
                ts, dur = float(ev["ts"]), float(ev.get("dur", 0.0))
                ce.append(Kernel(ev.get("pid"), ts, dur, name, corr, ev.get("tid")))
            else:
                starts.setdefault(ev.get("pid"), []).append((float(ev["ts"]), ev.get("tid")))
        elif cat == "gpu_memcpy" and "DtoD" in name:
            row = (float(ev["ts"]), float(ev.get("dur", 0.0)))
            copies.setdefault(ev.get("pid"), []).append(row)
    for rows in (*starts.values(), *copies.values()):
        rows.sort(key=lambda row: row[0])
    return ce, starts, copies


# ------------------------------------------------------------------ analysis
def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); q in [0, 1]."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _assign_by_time(spans: list[Span], kernels: list[Kernel]) -> list[list[Kernel]]:
    """Kernels starting inside each span on the same device. If spans of a device nest, a
    kernel goes to the span that started last before it and still contains it."""
    per: list[list[Kernel]] = [[] for _ in spans]
    index: dict[Any, tuple[list[int], list[float], list[float]]] = {}
    for i, sp in enumerate(spans):
        index.setdefault(sp.device, ([], [], []))[0].append(i)
    for idx, starts, maxend in index.values():
        idx.sort(key=lambda i: spans[i].ts)
        reach = float("-inf")
        for i in idx:
            starts.append(spans[i].ts)
            reach = max(reach, spans[i].ts + spans[i].dur)
            maxend.append(reach)  # the furthest end of any span up to here
    for k in kernels:
        entry = index.get(k.device)
        if entry is None:
            continue
        idx, starts, maxend = entry
        j = bisect.bisect_right(starts, k.ts) - 1
        while j >= 0 and maxend[j] > k.ts:
            sp = spans[idx[j]]
            if k.ts < sp.ts + sp.dur:
                per[idx[j]].append(k)
                break
            j -= 1
    return per


def _assign_by_launch(
    spans: list[Span], kernels: list[Kernel], launches: list[Launch]
) -> list[list[Kernel]]:
    """CPU-range fallback: kernel -> its launch (correlation) -> the CPU span holding it."""
    per: list[list[Kernel]] = [[] for _ in spans]
    by_thread: dict[tuple[Any, Any], list[int]] = {}
    for i, sp in enumerate(spans):
        by_thread.setdefault((sp.pid, sp.tid), []).append(i)
    for idx in by_thread.values():
        idx.sort(key=lambda i: spans[i].ts)
    span_of_corr: dict[Any, int] = {}
    for ln in launches:
        idx = by_thread.get((ln.pid, ln.tid))
        if not idx:
            continue
        tss = [spans[i].ts for i in idx]
        j = bisect.bisect_right(tss, ln.ts) - 1
        if j >= 0 and ln.ts < spans[idx[j]].ts + spans[idx[j]].dur:
            span_of_corr[ln.correlation] = idx[j]
    for k in kernels:
        i = span_of_corr.get(k.correlation)
        if i is not None:
            per[i].append(k)
    return per


def _calls_on_devices(ex: Extract, gpu_spans: list[Span]) -> dict[str, int]:
    """All-reduces per backend on this rank's GPU(s): the devices its GPU ranges ran on
    (every device when it has none), in or out of any pass."""
    devices = {s.device for s in gpu_spans}
    counts: dict[str, int] = {}
    for k in ex.kernels:
        if not devices or k.device in devices:
            backend = allreduce_backend(k.name)
            counts[backend] = counts.get(backend, 0) + 1
    return dict(sorted(counts.items()))


def analyze_extract(ex: Extract, rank: int, span: str = DEFAULT_SPAN) -> dict[str, Any]:
    """Per-rank figures from extracted events (see module docstring)."""
    gpu_spans = [s for s in ex.spans if s.gpu]
    source = "gpu" if gpu_spans else "cpu"
    if gpu_spans:
        verify = [s for s in gpu_spans if span_matches(s.name, span)]
        per = _assign_by_time(verify, ex.kernels)
    else:
        verify = [s for s in ex.spans if span_matches(s.name, span)]
        per = _assign_by_launch(verify, ex.kernels, ex.launches)
    n = len(verify)
    calls = _calls_on_devices(ex, gpu_spans)
    verify_ms = [s.dur / 1000.0 for s in verify]
    ar_count = sum(len(k) for k in per)
    ar_us = sum(k.dur for ks in per for k in ks)
    verify_us = sum(s.dur for s in verify)
    backends: dict[str, dict[str, float]] = {}
    for ks in per:
        for k in ks:
            b = backends.setdefault(allreduce_backend(k.name), {"count": 0, "us": 0.0})
            b["count"] += 1
            b["us"] += k.dur
    by_backend = {
        name: {
            "per_verify": b["count"] / n if n else 0.0,
            "ms_per_verify": b["us"] / 1000.0 / n if n else 0.0,
        }
        for name, b in sorted(backends.items())
    }
    return {
        "rank": rank,
        "verify_passes": n,
        "verify_ms_p50": percentile(verify_ms, 0.5),
        "verify_ms_p90": percentile(verify_ms, 0.9),
        "allreduce_per_verify": ar_count / n if n else 0.0,
        "allreduce_ms_per_verify": ar_us / 1000.0 / n if n else 0.0,
        "allreduce_share": ar_us / verify_us if verify_us > 0 else 0.0,
        # beyond the issue's JSON shape (the CLI prints only the keys above)
        "verify_ms_samples": verify_ms,
        "allreduce_calls": sum(calls.values()),
        "allreduce_calls_by_backend": calls,  # backend -> all-reduces in the whole window
        "allreduce_calls_in_verify": ar_count,
        "allreduce_backends": by_backend,  # backend -> per_verify, ms_per_verify
        "span_source": source,
        "exact_parser": ex.exact,
        "bytes": ex.bytes_read,
    }


def extract_for_analysis(path: str | Path, span: str = DEFAULT_SPAN) -> Extract:
    """The events of one file, with launches too when only CPU ranges can mark verify."""
    ex = extract(path)
    if not any(s.gpu for s in ex.spans) and any(span_matches(s.name, span) for s in ex.spans):
        ex = extract(path, want_launches=True)  # CPU fallback needs the launches
    return ex


def analyze_file(
    path: str | Path, span: str = DEFAULT_SPAN, rank: int | None = None
) -> dict[str, Any]:
    """Analyze one trace file (plain or gzipped JSON)."""
    path = Path(path)
    ex = extract_for_analysis(path, span)
    if rank is None:
        rank = rank_from_name(path)
    if rank is None:
        rank = ex.rank if ex.rank is not None else 0
    result = analyze_extract(ex, rank, span)
    result["file"] = str(path)
    return result


def _merged(extracts: list[Extract]) -> Extract:
    out = Extract(exact=any(e.exact for e in extracts))
    for e in extracts:
        out.spans += e.spans
        out.kernels += e.kernels
        out.launches += e.launches
        out.bytes_read += e.bytes_read
        out.rank = e.rank if out.rank is None else out.rank
    return out


def trace_files(path: str | Path) -> list[Path]:
    """The trace files of a directory: its `*-TP-{rank}.trace.json[.gz]` files when it has
    any, else every `*.json` / `*.json.gz`; a file is returned as is."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise TraceError(f"{path}: no such file or directory")
    files = sorted(
        p
        for p in path.iterdir()
        if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz"))
    )
    ranked = [p for p in files if rank_from_name(p) is not None]
    return ranked or files


def analyze_path(
    path: str | Path, span: str = DEFAULT_SPAN, files: Iterable[Path] | None = None
) -> dict[str, Any]:
    """A trace file or a directory of per-rank traces -> `{"ranks": [...]}` sorted by rank.

    Files of one rank that differ only by stage (SGLang's profile_by_stage writes
    `-TP-0-prefill` and `-TP-0-decode`) are analysed together; other parallel ranks
    (`-DP-1`, `-EP-0`, ...) are separate entries with `rank_id` set."""
    chosen = list(files) if files is not None else trace_files(path)
    if not chosen:
        raise TraceError(f"{path}: no trace files (*-TP-<rank>.trace.json.gz) found")
    groups: dict[tuple[int, str], dict[str, Path]] = {}
    unranked: list[Path] = []
    for f in chosen:
        key = rank_key(f)
        if key is None:
            unranked.append(f)
            continue
        tp, extra, stage = key
        stages = groups.setdefault((tp, extra), {})
        if stage in stages:
            raise TraceError(
                f"{path}: two traces for TP rank {tp}{'-' + extra if extra else ''} "
                f"({stages[stage].name}, {f.name}); pass one profile window's files or directory"
            )
        stages[stage] = f
    ranks = []
    for (tp, extra), stages in sorted(groups.items()):
        paths = [stages[k] for k in sorted(stages)]
        ex = _merged([extract_for_analysis(p, span) for p in paths])
        result = analyze_extract(ex, tp, span)
        if extra:
            result["rank_id"] = f"TP-{tp}-{extra}"
        result["file"] = str(paths[0]) if len(paths) == 1 else [str(p) for p in paths]
        ranks.append(result)
    for i, f in enumerate(unranked):
        ranks.append(analyze_file(f, span, i if len(chosen) > 1 else None))
    ranks.sort(key=lambda r: (r["rank"], r.get("rank_id", "")))
    return {"ranks": ranks, "span": span, "path": str(path)}


ISSUE_KEYS = (
    "rank",
    "verify_passes",
    "verify_ms_p50",
    "verify_ms_p90",
    "allreduce_per_verify",
    "allreduce_ms_per_verify",
    "allreduce_share",
)


def public_view(analysis: dict[str, Any]) -> dict[str, Any]:
    """The issue's JSON shape: `{"ranks": [{rank, verify_passes, ...}]}` and nothing else."""
    return {"ranks": [{k: r[k] for k in ISSUE_KEYS} for r in analysis.get("ranks", [])]}
