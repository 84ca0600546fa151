"""One rehearse profile on one transport path: its ranks run (job.py), their reports merged
into the profile's row (decode, verify, verify-compute and drafter ms from the slowest rank,
the break-even accept length, the all-reduces per verify from the profiler window as the
exporter's trace analyzer reads it, checked against the layer arithmetic), and the figures
that rank the rows (tokens/s of the baseline and of EAGLE-3)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastverify.experiments.common.ranks import nccl_digest, report_rows
from fastverify.experiments.rehearse.job import EventFn, killed_from_outside, run_job, traces_dir


def breakeven_accept_length(drafter_ms: float, verify_ms: float, decode_ms: float) -> float:
    """Accept length (tokens per verify, bonus included) at which an EAGLE-3 cycle makes
    tokens as fast as plain decoding: baseline 1 token per decode_ms, speculation A tokens
    per (drafter_ms + verify_ms)."""
    from fastverify.speculation import breakeven

    if decode_ms <= 0:
        raise ValueError(f"decode_ms must be > 0, got {decode_ms}")
    return breakeven.breakeven_accept_length((drafter_ms + verify_ms) / 1000.0, 1000.0 / decode_ms)


def throughputs(
    decode_ms: float, cycle_ms: float, batch: int, accept_length: float | None
) -> dict[str, float | bool | None]:
    """Tokens/s of the baseline and (at `accept_length`) of EAGLE-3, for `batch` sequences."""
    base = batch * 1000.0 / decode_ms
    if accept_length is None:
        return {
            "baseline_tokens_per_s": base,
            "eagle3_tokens_per_s": None,
            "speculation_pays": None,
            "speedup": None,
        }
    spec = batch * accept_length * 1000.0 / cycle_ms
    return {
        "baseline_tokens_per_s": base,
        "eagle3_tokens_per_s": spec,
        "speculation_pays": spec > base,
        "speedup": spec / base,
    }


def rank_results(results: list[dict[str, Any]], accept_length: float | None) -> list[dict]:
    """Measured rows first, best first: by the better of baseline and EAGLE-3 tokens/s at the
    given accept length; without one, by the verify cycle (drafter + verify) time."""
    ok = [r for r in results if r.get("status") == "ok"]
    bad = [r for r in results if r.get("status") != "ok"]
    if accept_length is not None:
        ok.sort(key=lambda r: -max(r["baseline_tokens_per_s"], r["eagle3_tokens_per_s"] or 0.0))
    else:
        ok.sort(key=lambda r: r["cycle_ms"])
    for i, r in enumerate(ok, 1):
        r["rank"] = i
    return ok + bad


VERIFY_SPAN = "step[VERIFY"  # SGLang 0.5.23's target verify range, `step[VERIFY bs=N]`
DECODE_SPAN = "step[DECODE"


def analyze_window(trace_dir: Path) -> dict[str, Any]:
    """Run the exporter's analyzer on the window's per-rank traces.

    The analyzer's default span is what the live exporter matches; when it finds no verify
    pass (an analyzer that only knows the pre-0.5.2x `TARGET_VERIFY` name), the 0.5.23 name
    is passed explicitly through the same public API."""
    from fastverify import traces

    analysis = traces.analyze_path(trace_dir)
    source = "analyzer default span"
    if not any(r["verify_passes"] for r in analysis["ranks"]):
        analysis = traces.analyze_path(trace_dir, span=VERIFY_SPAN)
        source = f"analyzer span={VERIFY_SPAN!r}"
    decode = traces.analyze_path(trace_dir, span=DECODE_SPAN)
    return {"verify": analysis, "decode": decode, "span_source": source}


RANK_KEYS = ("rank", "status", "error", "returncode", "gpu", "init_s", "import_s", "wall_s",
             "max_memory_gb", "max_rss_gb", "graphs", "build", "timings",
             "collectives_per_forward", "allreduce")  # fmt: skip


def _max(ranks: list[dict[str, Any]], phase: str, key: str = "p50_ms") -> float | None:
    vals = [r["timings"][phase][key] for r in ranks if r.get("timings")]
    return max(vals) if vals else None


def run_profile(
    name: str,
    path: str,
    env: Mapping[str, str],
    job: dict[str, Any],
    world: int,
    workdir: Path,
    cfg: Any,
    on_event: EventFn | None = None,
) -> dict[str, Any]:
    """One profile on one transport path: start the ranks, wait, merge, analyze the trace."""
    tag = re.sub(r"[^A-Za-z0-9._-]", "_", f"{name}.{path}")
    group, waited = run_job(env, world, workdir, tag, job, cfg, f"{name} ({path})", on_event)
    timed_out = waited["timed_out"]
    wall = time.perf_counter() - group.started_at

    ranks = group.reports()
    for i, r in enumerate(ranks):
        r.setdefault("rank", i)
    wall_reported = max((r.get("wall_s") or 0.0) for r in ranks)
    logs = group.nccl_summaries()
    env_verified, mismatch = group.env_delivered(ranks)
    result: dict[str, Any] = {
        "profile": name,
        "path": path,
        "status": "ok",
        "wall_s": wall,
        "rank_wall_s": wall_reported,  # process start to report, the slowest rank
        "stopped_after_report": waited["stopped_after_report"],
        "init_s": max((r.get("init_s") or 0.0) for r in ranks),
        "env_verified": env_verified,
        "nccl": {
            **nccl_digest(logs),
            "tuning": {str(k): v for k, v in logs[0]["tuning"].items()},
        },
        "ranks": report_rows(ranks, RANK_KEYS),
    }
    errors = [r.get("error") for r in ranks if r.get("error")]
    errors += [
        f"{ph}: {g['error']}"
        for r in ranks
        for ph, g in (r.get("graphs") or {}).items()
        if g.get("error")
    ]
    if mismatch:
        errors.insert(0, f"environment not delivered as resolved: {', '.join(mismatch)}")
    if timed_out:
        errors.insert(0, f"timed out after {cfg.timeout_s:.0f} s")
    # the rank that died first, not its peers' "Connection closed by peer"
    errors[:0] = killed_from_outside(ranks, waited["stopped"], job.get("memory_per_rank_gb"))
    if errors or any(r.get("status") != "ok" for r in ranks):
        result["status"] = "failed"
        result["error"] = errors[0] if errors else "a rank failed"
        return result

    decode, verify = _max(ranks, "decode"), _max(ranks, "verify")
    compute = _max(ranks, "verify_compute")
    draft, extend = _max(ranks, "draft"), _max(ranks, "draft_extend")
    if decode is None or verify is None or compute is None or draft is None or extend is None:
        result["status"] = "failed"
        result["error"] = "no rank reported its timings"
        return result
    drafter = job["draft_forwards"] * draft + extend
    expected = job["target"]["allreduce_per_forward"]
    result.update(
        decode_ms=decode,
        verify_ms=verify,
        compute_ms=compute,
        exposed_comm_ms=verify - compute,
        draft_ms=draft,
        draft_extend_ms=extend,
        drafter_ms=drafter,
        cycle_ms=drafter + verify,
        verify_ms_p90=_max(ranks, "verify", "p90_ms"),
        decode_ms_p90=_max(ranks, "decode", "p90_ms"),
        breakeven_accept_length=breakeven_accept_length(drafter, verify, decode),
        allreduce_expected=expected,
    )
    calls = ranks[0]["collectives_per_forward"]["verify"]["allreduce"]
    trace_dir = traces_dir(workdir, tag)
    try:
        window = analyze_window(trace_dir)
    except Exception as exc:  # the analyzer's own errors (TraceError, ...) are reported
        window = None
        result["trace_error"] = f"{type(exc).__name__}: {exc}"
    if window is not None:
        vranks = window["verify"]["ranks"]
        result["trace"] = {
            "span_source": window["span_source"],
            "verify_passes": [r["verify_passes"] for r in vranks],
            "verify_ms_p50": [r["verify_ms_p50"] for r in vranks],
            "allreduce_per_verify": [r["allreduce_per_verify"] for r in vranks],
            "allreduce_ms_per_verify": [r["allreduce_ms_per_verify"] for r in vranks],
            "allreduce_share": [r["allreduce_share"] for r in vranks],
            "allreduce_per_decode": [r["allreduce_per_verify"] for r in window["decode"]["ranks"]],
            "span_kind": [r.get("span_source") for r in vranks],
        }
    if (
        job["backend"] == "nccl"
        and window is not None
        and all(r["verify_passes"] for r in window["verify"]["ranks"])
    ):
        vranks = window["verify"]["ranks"]
        per = [r["allreduce_per_verify"] for r in vranks]
        result["allreduce_per_verify"] = max(per)
        result["allreduce_ms_per_verify"] = max(r["allreduce_ms_per_verify"] for r in vranks)
        result["allreduce_share"] = max(r["allreduce_share"] for r in vranks)
        result["allreduce_source"] = "GPU kernel records in the profiler window (traces.py)"
    else:
        result["allreduce_per_verify"] = calls
        result["allreduce_ms_per_verify"] = None
        result["allreduce_share"] = None
        result["allreduce_source"] = (
            "collective calls per forward (gloo runs no GPU kernels)"
            if job["backend"] != "nccl"
            else "collective calls per forward (no verify span in the trace)"
        )
    result["allreduce_check"] = result["allreduce_per_verify"] == expected
    if not result["allreduce_check"]:
        result["status"] = "failed"
        result["error"] = (
            f"all-reduces per verify: measured {result['allreduce_per_verify']}, the layer "
            f"arithmetic says {expected} (2 x {job['target']['num_layers']} layers + 1)"
        )
    return result
