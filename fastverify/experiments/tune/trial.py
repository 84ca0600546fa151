"""Tune stage 5, trial on dummy weights: the top candidates in the real server (capture,
step time, all-reduces per step from a profile window, tok/s), the best `finalists` of
them also in EAGLE-3 mode for their cycle and break-even accept length (judged by a real
accept length: `--accept-length`, else one recorded with real weights). Where a rehearsal
ran, its figures are set beside the trial's and every disagreement is named."""

from __future__ import annotations

from typing import Any

from fastverify.experiments.tune import gpu, measure
from fastverify.experiments.tune.context import Ctx, StageResult

KEYS = (
    "profile",
    "mode",
    "status",
    "reason",
    "message",
    "tokens_per_second_mean",
    "ci95",
    "n",
    "decode_step_ms",
    "spec_cycle_ms",
    "break_even_accept_length",
    "accept_length_reference",
    "accept_length_source",
    "eagle3_verdict",
    "dummy_accept_length",
    "rank",
    "few_requests",
)
AGREE = 0.10  # rehearsal and trial orderings that differ by less than this are not a disagreement


def row_view(r: dict[str, Any]) -> dict[str, Any]:
    out = {k: r.get(k) for k in KEYS}
    t = r.get("trace") or {}
    out["trace_step_ms"] = t.get("step_ms_p50")
    out["allreduce_per_step"] = t.get("allreduce_per_step")
    if r.get("trace_error") and not out.get("reason"):  # the table's reason column says it
        out["reason"] = f"trace window: {r['trace_error']}"
    return out


def disagreements(rows: list[dict[str, Any]], rehearsal: list[dict[str, Any]]) -> list[str]:
    """Where the rehearsal (no model, GEMM shapes) and the trial (the real server on dummy
    weights) disagree: the order of two profiles by more than AGREE, and all-reduce counts."""
    trial = {r["profile"]: r for r in rows if r["mode"] == "baseline" and r["status"] == "ok"}
    reh = {r["profile"]: r for r in rehearsal if r.get("status") == "ok"}
    both = [p for p in trial if p in reh]
    out = []
    for i, a in enumerate(both):
        for b in both[i + 1 :]:
            ta, tb = trial[a]["tokens_per_second_mean"], trial[b]["tokens_per_second_mean"]
            ra, rb = reh[a]["baseline_tokens_per_s"], reh[b]["baseline_tokens_per_s"]
            if (ta > tb * (1 + AGREE) and rb > ra * (1 + AGREE)) or (
                tb > ta * (1 + AGREE) and ra > rb * (1 + AGREE)
            ):
                out.append(
                    f"order of {a} and {b}: trial {ta:.1f} vs {tb:.1f} tok/s, rehearsal "
                    f"{ra:.1f} vs {rb:.1f} tok/s"
                )
    for p in both:
        n_t = (trial[p].get("trace") or {}).get("allreduce_per_step")
        n_r = reh[p].get("allreduce_per_verify")
        if n_t is not None and n_r is not None and abs(n_t - n_r) > 1:
            out.append(
                f"{p}: {n_t:.0f} all-reduces per step in the server, {n_r:.0f} per "
                "verify in the rehearsal"
            )
    for p in reh:
        if p in {r["profile"] for r in rows if r["status"] != "ok"}:
            out.append(f"{p}: rehearsed fine but failed in the server's trial")
    return out


def run(ctx: Ctx) -> StageResult:
    names = gpu.survivors(ctx)[: int(ctx.plan.get("trial_candidates") or 1)]
    if not names:
        return StageResult("failed", "no candidate is left for the trial")
    finalists = int(ctx.plan.get("finalists") or 1)
    ctx.emit(f"trial on dummy weights: {', '.join(names)} (EAGLE-3 for the best {finalists})")
    report = measure.sweep(
        ctx,
        "trial",
        names,
        load_format="dummy",
        then_eagle3=finalists,
        accept_length=ctx.cfg.accept_length,
    )
    rows = [r for r in report["results"] if r.get("weights") == "dummy"]
    ok = [r for r in rows if r["mode"] == "baseline" and r["status"] == "ok"]
    rehearsal = ctx.data("rehearse").get("table", []) if ctx.status_of("rehearse") == "done" else []
    data = {
        "rows": [row_view(r) for r in rows],
        "results_file": report["results_file"],
        "timing": report.get("timing"),
        "warnings": report.get("warnings", []),
        "disagreements": disagreements(rows, rehearsal) if rehearsal else [],
        "compared_with_rehearsal": bool(rehearsal),
        "concurrency": ctx.cfg.concurrency,  # what every rate and break-even above is for
    }
    if not ok:
        return StageResult.none_measured("every trial candidate failed", rows, data)
    return StageResult("done", None, data)
