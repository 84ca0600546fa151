"""Tune stage 5, the trial: the top candidates in the real server (capture, step time,
all-reduces per step from a profile window, tok/s), the best `finalists` of them also in
EAGLE-3 mode for their cycle and break-even accept length (judged by a real accept length:
`--accept-length`, else one recorded with real weights). Where a rehearsal ran, its figures
are set beside the trial's and every disagreement is named.

The baseline candidates load dummy weights, unless the daemon's cached weights serve real
baseline loads (the plan's `cached`): then they load the cache's real weights, a
cached load each, and their rows (repeats, CI95, posted as the profiles' baselines) are
the confirmation. The EAGLE-3 trials load dummy weights either way: the cache exports no
draft model, and a disk load costs what the cache saves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastverify.experiments.tune import gpu, measure
from fastverify.experiments.tune.context import Ctx, StageResult

DUMMY, REAL = "dummy", "real"  # a row's `weights` (fastverify.experiments.sweep.trial)

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
    "weights",
)
# what a real-weights row carries beyond KEYS (a confirmation's row, decide's evidence)
REAL_KEYS = (
    "samples",
    "vs_best",
    "accept_length_mean",
    "per_request_tokens_per_second_mean",
    "acceptance_source",
)
AGREE = 0.10  # rehearsal and trial orderings that differ by less than this are not a disagreement


def real_view(r: dict[str, Any]) -> dict[str, Any]:
    """A real-weights row as confirm and decide read it."""
    return {k: r.get(k) for k in (*KEYS, *REAL_KEYS)}


def row_view(r: dict[str, Any]) -> dict[str, Any]:
    out = real_view(r) if r.get("weights") == REAL else {k: r.get(k) for k in KEYS}
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
    if ctx.plan.get("cached"):
        serving = ctx.serving_before
        if serving.get("mode") == "baseline" and serving.get("profile") in names:
            # what serves now is measured first: its row needs no load
            names.sort(key=lambda n: n != serving["profile"])
        report, rows = _from_cache(ctx, names, finalists)
    else:
        ctx.emit(f"trial on dummy weights: {', '.join(names)} (EAGLE-3 for the best {finalists})")
        report = measure.sweep(
            ctx,
            "trial",
            names,
            load_format="dummy",
            then_eagle3=finalists,
            accept_length=ctx.cfg.accept_length,
        )
        rows = [r for r in report["results"] if r.get("weights") == DUMMY]
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


def _from_cache(
    ctx: Ctx, names: list[str], finalists: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The baselines on the cached real weights (with their profile windows), then
    EAGLE-3 on dummy weights for the best `finalists` (its break-even against the real
    baselines just recorded); the report (the baselines' results file) and the rows."""
    from fastverify.experiments.sweep import trial as sweep_trial
    from fastverify.experiments.sweep.config import RESULTS_FILE
    from fastverify.experiments.sweep.results import load_records

    ctx.emit(f"trial on real weights from the daemon's cached weights (a cached load each): "
             f"{', '.join(names)}; EAGLE-3 on dummy weights for the best {finalists} (the "
             "cache exports no draft model)")  # fmt: skip
    report = measure.sweep(ctx, "trial", names, real_traces=True)
    rows = [r for r in report["results"] if r["mode"] == "baseline"]
    traces = {r["profile"]: r for r in load_records(Path(report["results_file"]))
              if r.get("type") == "trace" and r.get("mode") == "baseline"}  # fmt: skip
    for r in rows:
        t = traces.get(r["profile"]) or {}
        if t.get("figures"):
            r["trace"] = t["figures"]
        elif t.get("error"):
            r["trace_error"] = t["error"]
        if r["status"] == "ok" and (rate := sweep_trial.per_request_rate(r)):
            r["decode_step_ms"] = 1000.0 / rate
    best = sorted((r for r in rows if r["status"] == "ok"),
                  key=lambda r: -r["tokens_per_second_mean"])[:finalists]  # fmt: skip
    if best:
        eagle = measure.sweep(ctx, "trial-eagle3", [r["profile"] for r in best], mode="eagle3",
                              load_format="dummy", accept_length=ctx.cfg.accept_length)  # fmt: skip
        real = {r["profile"]: r for r in best}
        for r in eagle["results"]:
            b = real.get(r["profile"])
            if r.get("weights") == DUMMY and r.get("spec_cycle_ms") and b is not None:
                # against the trial's own baseline, as a dummy trial's EAGLE-3 rows are
                rate = sweep_trial.per_request_rate(b) or b["tokens_per_second_mean"]
                sweep_trial.judge(r, rate, "trial baseline (real weights, from the cache)")
        rows += [r for r in eagle["results"] if r.get("weights") == DUMMY]
        report = dict(report, warnings=report.get("warnings", []) + eagle.get("warnings", []))
    recs = [load_records(Path(ctx.out) / sub / RESULTS_FILE) for sub in ("trial", "trial-eagle3")]
    return dict(report, timing=sweep_trial.timing(recs[0] + recs[1])), rows
