"""Timing trials: what a sweep on `--load-format dummy` servers may and may not conclude.

SGLang's dummy load format initialises random weights instead of reading the checkpoint.
Everything NCCL tuning is about stays real: shapes, kernels, the TP all-reduces, CUDA-graph
capture (a capture failure still shows), decode and verify step times, tok/s at fixed
output lengths (`ignore_eos`). The accept length does not: a random drafter's guesses are
(almost) never accepted, so a trial EAGLE-3 server sits at its floor (~1.0 token per
verify, the bonus token).

So a trial row keeps its timings and never uses its own accept length for a verdict:

- baseline rows: tok/s (ranked as usual), the decode step (1000 / per-request tok/s) and,
  when a profile window was captured, the trace's step time and all-reduces per step;
- EAGLE-3 rows: the spec cycle (dummy accept length / per-request tok/s), the verify pass
  and its all-reduces from the trace, and the **break-even accept length** (cycle x the
  same profile's baseline per-request tok/s). The verdict compares it with a *real* accept
  length: `--accept-length`, else one recorded with real weights (`POST /v1/baselines
  {accept_length}` by a real-weights sweep's EAGLE-3 phase). The dummy run's own accept
  length is kept only as `dummy_accept_length`.

Every record and row carries `weights` ("dummy" | "real"); `timing` sums what the trial
and the real (confirm) loads and measurements cost, from the results file's records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

from fastverify.config import weights_label
from fastverify.speculation.breakeven import breakeven_accept_length, cycle_seconds

DUMMY, REAL = "dummy", "real"


def weights_of(record: Mapping[str, Any]) -> str:
    """A record's weights; records written before trial mode existed are real."""
    return DUMMY if record.get("weights") == DUMMY else REAL


def split_by_weights(records: Sequence[dict[str, Any]], weights: str) -> list[dict[str, Any]]:
    """The records of one kind of weights (the `sweep` headers are kept for every kind)."""
    return [r for r in records if r.get("type") == "sweep" or weights_of(r) == weights]


def reference_accept_length(
    given: float | None, baselines: Mapping[str, Any], profile: str | None = None
) -> tuple[float | None, str]:
    """The real accept length a trial's break-even is compared with, and where it came from.

    `given` (the command line) wins; else the profile's recorded real-weights accept length;
    else the newest one recorded for any profile (the drafter and workload set the accept
    length, the NCCL profile hardly does); else None."""
    if given is not None:
        return float(given), "command line (--accept-length)"
    rec = baselines.get(profile or "") if profile else None
    if isinstance(rec, Mapping) and _positive(rec.get("accept_length")):
        return float(rec["accept_length"]), _recorded(rec, profile or "")
    newest = None
    for name, r in baselines.items():
        if isinstance(r, Mapping) and _positive(r.get("accept_length")):
            at = r.get("measured_at") or 0.0
            if newest is None or at > newest[0]:
                newest = (at, name, r)
    if newest is not None:
        return float(newest[2]["accept_length"]), _recorded(newest[2], f"{newest[1]}, newest")
    return None, "none"


def _recorded(rec: Mapping[str, Any], where: str) -> str:
    """Where a recorded accept length came from: real weights, or SGLang's forced length."""
    source = str(rec.get("acceptance_source") or "")
    if source.startswith("forced"):
        return f"recorded, {source} by SGLang ({where})"
    return f"recorded with real weights ({where})"


def per_request_rate(row: Mapping[str, Any]) -> float | None:
    """Tokens/s one sequence sees: from completed requests, else from the inter-token
    latency (a slow trial server may finish no request inside a short window; every
    streamed token still times a step): its mean where the row has it (total gap time over
    tokens), else its p50. The p50 alone reads a speculative server's cycle short: a chunk
    of n tokens counts gap / n n times, so the median token sits in the long chunks."""
    rate = row.get("per_request_tokens_per_second_mean")
    if _positive(rate):
        return float(rate)
    for key in ("itl_mean_ms_mean", "itl_p50_ms_mean"):
        itl = row.get(key)
        if _positive(itl):
            return 1000.0 / float(itl)
    return None


def _positive(v: Any) -> TypeGuard[float]:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def trace_figures(analysis: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Rank 0's (else the first rank's) step/verify figures from a capture's analysis."""
    ranks = (analysis or {}).get("ranks") or []
    if not ranks:
        return None
    r = next((x for x in ranks if x.get("rank") == 0), ranks[0])
    return {
        "span": (analysis or {}).get("span", "VERIFY"),
        "passes": r.get("verify_passes"),
        "step_ms_p50": r.get("verify_ms_p50"),
        "step_ms_p90": r.get("verify_ms_p90"),
        "allreduce_per_step": r.get("allreduce_per_verify"),
        "allreduce_ms_per_step": r.get("allreduce_ms_per_verify"),
        "allreduce_share": r.get("allreduce_share"),
        "ranks": len(ranks),
    }


def annotate(
    rows: list[dict[str, Any]],
    traces: Mapping[tuple[str, str], dict[str, Any]],
    accept_for: Callable[[str], tuple[float | None, str]],
    recorded: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """Turn summarised dummy-weights rows into trial rows (see the module docstring).

    `traces`: (profile, mode) -> `trace_figures(...)`; `accept_for(profile)`: the
    `reference_accept_length` for a profile; `recorded`: GET /v1/baselines (real
    per-request baselines, used when the trial measured no baseline of a profile)."""
    base = {r["profile"]: r for r in rows if r["mode"] == "baseline" and r["status"] == "ok"}
    for r in rows:
        r["weights"] = DUMMY
        r["trial"] = True
        t = traces.get((r["profile"], r["mode"]))
        if t is not None:
            r["trace"] = t
        if r["status"] != "ok":
            continue
        per_req = per_request_rate(r)
        if r["mode"] == "baseline":
            if per_req:
                r["decode_step_ms"] = 1000.0 / per_req
            continue
        # EAGLE-3 on random weights: the cycle is real, the accept length is not.
        dummy_accept = r.pop("accept_length_mean", None)
        r["dummy_accept_length"] = dummy_accept
        for k in ("real_speedup", "speedup_significance", "break_even_accept_length"):
            r.pop(k, None)
        if not per_req:
            continue
        cycle_s = cycle_seconds(dummy_accept or 1.0, per_req)
        r["spec_cycle_ms"] = cycle_s * 1000.0
        b = base.get(r["profile"])
        b_rate, b_src = None, "no baseline"
        if b is not None:
            b_rate = per_request_rate(b) or b["tokens_per_second_mean"]
            b_src = "trial baseline"
        elif isinstance(recorded.get(r["profile"]), Mapping):
            b_rate = recorded[r["profile"]].get("per_request_tokens_per_second")
            b_src = "recorded baseline"
        accept_ref, accept_src = accept_for(r["profile"])
        r["accept_length_reference"] = accept_ref
        r["accept_length_source"] = accept_src
        if accept_ref:
            r["predicted_per_request_tokens_per_second"] = accept_ref / cycle_s
        if b_rate:
            judge(r, b_rate, b_src)
    return rows


def judge(row: dict[str, Any], baseline_rate: float, source: str) -> None:
    """An annotated EAGLE-3 row's break-even accept length against a baseline's per-request
    tok/s (`source` says whose), and its verdict at the row's real accept length."""
    be = breakeven_accept_length(row["spec_cycle_ms"] / 1000.0, baseline_rate)
    row["break_even_accept_length"] = be
    row["baseline_source"] = source
    accept_ref = row.get("accept_length_reference")
    if accept_ref:
        ratio = accept_ref / be
        row["eagle3_verdict"] = f"{'wins' if ratio > 1 else 'loses'} x{ratio:.2f}"


def timing(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Seconds spent per kind of weights (loads = successful switches, measurements),
    from `switch` and `measurement` records, and what the trial saved in loads."""
    out: dict[str, dict[str, Any]] = {}
    for w in (DUMMY, REAL):
        loads = [r["seconds"] for r in records if r.get("type") == "switch" and weights_of(r) == w]
        meas = [
            r.get("wall_s") or r.get("duration_s") or 0.0
            for r in records
            if r.get("type") == "measurement" and weights_of(r) == w
        ]
        extra = [r.get("wall_s") or 0.0 for r in records
                 if r.get("type") == "trace" and weights_of(r) == w]  # fmt: skip
        out["trial" if w == DUMMY else "real"] = {
            "loads": len(loads),
            "load_s": sum(loads),
            "load_s_mean": sum(loads) / len(loads) if loads else None,
            "measure_s": sum(meas) + sum(extra),
            "total_s": sum(loads) + sum(meas) + sum(extra),
        }
    trial, real = out["trial"], out["real"]
    if trial["loads"] and real["load_s_mean"] is not None:
        # what loading every trial profile with real weights would have cost instead
        trial["same_loads_with_real_weights_s"] = trial["loads"] * real["load_s_mean"]
        trial["load_s_saved"] = trial["same_loads_with_real_weights_s"] - trial["load_s"]
    return out


__all__ = [
    "DUMMY",
    "REAL",
    "annotate",
    "reference_accept_length",
    "split_by_weights",
    "timing",
    "trace_figures",
    "weights_label",
    "weights_of",
]
