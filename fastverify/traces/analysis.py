"""Per-rank figures of a profile window: verify passes, verify ms p50/p90 (linear
interpolation between closest ranks), all-reduces per verify, their GPU ms per verify and
share of the verify time, per backend too (see fastverify.traces for what is counted)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastverify.percentiles import percentile
from fastverify.traces.events import (
    DEFAULT_SPAN,
    Extract,
    Kernel,
    Launch,
    Span,
    TraceError,
    allreduce_backend,
    rank_from_name,
    rank_key,
    span_matches,
)
from fastverify.traces.reader import extract


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
        thread = by_thread.get((ln.pid, ln.tid))
        if not thread:
            continue
        tss = [spans[i].ts for i in thread]
        j = bisect.bisect_right(tss, ln.ts) - 1
        if j >= 0 and ln.ts < spans[thread[j]].ts + spans[thread[j]].dur:
            span_of_corr[ln.correlation] = thread[j]
    for k in kernels:
        span = span_of_corr.get(k.correlation)
        if span is not None:
            per[span].append(k)
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
        "verify_ms_p50": percentile(verify_ms, 50) if n else 0.0,
        "verify_ms_p90": percentile(verify_ms, 90) if n else 0.0,
        "allreduce_per_verify": ar_count / n if n else 0.0,
        "allreduce_ms_per_verify": ar_us / 1000.0 / n if n else 0.0,
        "allreduce_share": ar_us / verify_us if verify_us > 0 else 0.0,
        # beyond the public shape (public_view: the CLI prints only the keys above)
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


PUBLIC_KEYS = (
    "rank",
    "verify_passes",
    "verify_ms_p50",
    "verify_ms_p90",
    "allreduce_per_verify",
    "allreduce_ms_per_verify",
    "allreduce_share",
)


def public_view(analysis: dict[str, Any]) -> dict[str, Any]:
    """The CLI's JSON shape: `{"ranks": [{rank, verify_passes, ...}]}` and nothing else."""
    return {"ranks": [{k: r[k] for k in PUBLIC_KEYS} for r in analysis.get("ranks", [])]}
