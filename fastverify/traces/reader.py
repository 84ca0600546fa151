"""Reading the events that matter out of a trace file, plain or gzipped.

`scan_events` (the fast path) never materialises the trace: it inflates `.gz` in bounded
chunks, finds candidate events with `bytes.find` on fixed needles (the annotation
categories and the all-reduce kernel name prefixes), cuts out just those events by brace
matching, and parses each with orjson. Anything it cannot cut unambiguously raises
`Ambiguous`, and `extract` re-reads the file with the straightforward parser
(`exact_events`), so the answer is exact either way; tests compare both paths.
FlashInfer's copy-engine all-reduces come back folded into one kernel each (ce_groups.py).
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from fastverify.traces import ce_groups
from fastverify.traces.events import (
    PCIE_IPC_NAMESPACE,
    Extract,
    Kernel,
    TraceError,
    classify,
)

_DIST_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_BRACE = re.compile(rb"[{}]")
_CHUNK_IN = 1 << 20  # compressed bytes read per step
_CHUNK_OUT = 8 << 20  # inflated bytes processed per step
_TAIL = 4096  # bytes kept across chunks so that no needle or event head is split


class Ambiguous(Exception):
    """The fast scanner met something it cannot cut exactly; use the exact parser."""


def _open(path: Path) -> gzip.GzipFile | io.BufferedReader:
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
            classify(ev, out, want_launches)
    if isinstance(doc, dict):
        dist = doc.get("distributedInfo")
        if isinstance(dist, dict) and isinstance(dist.get("rank"), int):
            out.rank = dist["rank"]
    return out


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
        PCIE_IPC_NAMESPACE.encode(),  # also FlashInfer's copy-engine kernels (ce_*_kernel)
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
    """The fast path (see module docstring). Raises Ambiguous when it cannot be exact."""
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
        loads = orjson.loads
        for p in hits:
            if p < done_rel:
                continue  # inside an event already consumed
            s = buf.rfind(b"{", done_rel, p)
            if s < 0:
                raise Ambiguous(f"no event start before offset {p + base}")
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
                            raise Ambiguous(f"cannot cut the event at {s + base}") from None
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
                raise Ambiguous(f"event at {s + base} closes before its own field")
            try:
                ev = loads(buf[s:e])
            except orjson.JSONDecodeError:
                raise Ambiguous(f"cannot cut the event at offset {s + base}") from None
            if not isinstance(ev, dict) or "ph" not in ev or "cat" not in ev:
                raise Ambiguous(f"the object at {s + base} is not a whole trace event")
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
    except Ambiguous:
        ex = exact_events(path, want_launches)
    if any(ce_groups.is_ce(k.name) for k in ex.kernels):
        # a copy-engine all-reduce always has namespaced kernels (its closing handshake), so
        # the needles find it; the whole file is then read for the rest of its picture
        ce, starts, copies = copy_engine_context(Path(path))
        kept = [k for k in ex.kernels if not ce_groups.is_ce(k.name)]
        ex.kernels = ce_groups.fold(kept + ce, starts, _refold, copies)
    return ex


def _refold(first: Kernel, ts: float, dur: float, name: str) -> Kernel:
    return first._replace(ts=ts, dur=dur, name=name)


def copy_engine_context(
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
