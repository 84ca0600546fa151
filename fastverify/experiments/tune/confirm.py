"""Tune stage 6, confirm the finalists with real weights: the trial's best `finalists`
baseline rows are reloaded with real weights and measured as a sweep measures (repeats,
CI95, Welch), the trial's leader last, so that applying it costs no further load. Where the
trial ran them on the cached real weights, their trial rows (measured the same
way) are the confirmation and nothing is reloaded.

EAGLE-3 gets a real-weights load of the leading finalist only when it could change the
decision: no real accept length is known (none given, none recorded), or the trial puts
EAGLE-3 within `UNSURE` of the baseline at the known accept length (or ahead of it). That
run measures the accept length that then decides the mode. Mode adaptive gets one when the
daemon's speculation plan predicts it above everything measured here: a decision is always
a measured option, so a prediction that could win is measured before it can."""

from __future__ import annotations

from typing import Any

from fastverify.experiments.tune import measure
from fastverify.experiments.tune.context import Ctx, StageResult
from fastverify.experiments.tune.trial import REAL, real_view

UNSURE = 0.10


def accept_length(ctx: Ctx, profile: str | None) -> tuple[float | None, str]:
    """The real accept length known before any real EAGLE-3 load, and its source."""
    from fastverify.experiments.sweep import trial as sweep_trial

    try:
        recorded = ctx.client.baselines() or {}
    except OSError:
        recorded = {}
    return sweep_trial.reference_accept_length(ctx.cfg.accept_length, recorded, profile)


def _disk(ctx: Ctx) -> str:
    """What a speculative load beside the cached weights is said to be."""
    return " from disk (the cached weights hold no draft model)" if ctx.plan.get("cached") else ""


def eagle3_needed(accept: float | None, break_even: float | None) -> tuple[bool, str]:
    """Whether a real EAGLE-3 load could change the mode, and why."""
    if accept is None:
        return True, "no real accept length known: measure it"
    if break_even is None:
        return False, "no EAGLE-3 trial figure for the leader (it failed or did not run)"
    ratio = accept / break_even
    if ratio < 1 - UNSURE:
        return False, (
            f"accept length {accept:.2f} < break-even {break_even:.2f} by "
            f"x{ratio:.2f}: EAGLE-3 loses clearly, no real EAGLE-3 load"
        )
    return True, (
        f"accept length {accept:.2f} vs break-even {break_even:.2f} (x{ratio:.2f}): "
        "close or ahead, measured with real weights"
    )


def trial_wants_eagle3(ctx: Ctx, accept: float | None) -> bool:
    """Whether the finished trial already says confirm will load EAGLE-3 with real weights
    (its leader's break-even against a known accept length, `eagle3_needed`): the plan
    counts that load from then on, not only once confirm decides on it."""
    if accept is None or ctx.status_of("trial") != "done":
        return False
    rows = ctx.data("trial").get("rows", [])
    ok = [r for r in rows if r["mode"] == "baseline" and r["status"] == "ok"]
    if not ok:
        return False
    leader = max(ok, key=lambda r: r["tokens_per_second_mean"])["profile"]
    be = next((r.get("break_even_accept_length") for r in rows if r["profile"] == leader
               and r["mode"] == "eagle3" and r["status"] == "ok"), None)  # fmt: skip
    return eagle3_needed(accept, be)[0]


def run(ctx: Ctx) -> StageResult:
    trial_rows = ctx.data("trial").get("rows", [])
    ranked = sorted(
        (r for r in trial_rows if r["mode"] == "baseline" and r["status"] == "ok"),
        key=lambda r: -r["tokens_per_second_mean"],
    )
    finalists = [r["profile"] for r in ranked[: int(ctx.plan.get("finalists") or 1)]]
    if not finalists:
        return StageResult("failed", "no finalist: nothing passed the trial")
    order = list(reversed(finalists))  # the trial's leader last
    real = {r["profile"]: r for r in ranked if r.get("weights") == REAL}
    from_trial = all(p in real for p in finalists)
    if from_trial:
        ctx.emit(f"confirm: {', '.join(order)} ran the trial on real weights from the "
                 "cached weights (their rows, CI95, are the confirmation): no reload")  # fmt: skip
        rows = [real[p] for p in order]
        results_file = ctx.data("trial").get("results_file")
    else:
        ctx.emit(f"confirm with real weights: {', '.join(order)}")
        report = measure.sweep(ctx, "confirm", order, load_format="auto", traces=False)
        rows = [real_view(r) for r in report["results"] if r["mode"] == "baseline"]
        results_file = report["results_file"]
    ok = [r for r in rows if r["status"] == "ok"]
    data: dict[str, Any] = {
        "finalists": finalists,
        "order": order,
        "rows": rows,
        "results_file": results_file,
        "from_trial": from_trial,  # the trial's rows (cached real weights)
        "eagle3": None,
    }
    if not ok:
        return StageResult.none_measured(
            "no finalist could be measured with real weights", rows, data
        )
    leader = max(ok, key=lambda r: r["tokens_per_second_mean"])["profile"]
    be = next(
        (
            r.get("break_even_accept_length")
            for r in trial_rows
            if r["profile"] == leader and r["mode"] == "eagle3" and r["status"] == "ok"
        ),
        None,
    )
    accept, source = accept_length(ctx, leader)
    need, why = eagle3_needed(accept, be)
    data.update(
        leader=leader,
        accept_length=accept,
        accept_length_source=source,
        accept_length_before=accept,  # what was known before any real EAGLE-3 load
        accept_length_before_source=source,
        break_even_trial=be,
        eagle3_why=why,
    )
    planned = ""
    if need and accept is not None:  # the plan's conditional load: in the ETA from now on
        ctx.eagle3_confirm = True
        ctx.replan()
        planned = f"; +1 real EAGLE-3 load{_disk(ctx)}, in the ETA from now on"
    ctx.emit(f"confirm: leader {leader}; EAGLE-3: {why}{planned}")
    if need:
        rep = measure.sweep(ctx, "confirm-eagle3", [leader], mode="eagle3", traces=False)
        row = next((r for r in rep["results"] if r["mode"] == "eagle3"), None)
        if row is not None:
            data["eagle3"] = real_view(row)
            if row["status"] == "ok" and row.get("accept_length_mean"):
                forced = str(row.get("acceptance_source") or "")
                data.update(
                    accept_length=row["accept_length_mean"],
                    accept_length_source=f"{forced}, by SGLang ({leader})"
                    if forced.startswith("forced")
                    else f"measured with real weights ({leader})",
                    acceptance_source=forced or "measured",
                )
    data["adaptive"] = _adaptive(ctx, ok, data.get("eagle3"))
    return StageResult("done", None, data)


def _adaptive(
    ctx: Ctx, ok: list[dict[str, Any]], eagle3: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Measure mode adaptive with real weights when the speculation plan predicts it faster
    than every option measured so far (its row, with the plan's config), else None."""
    from fastverify.experiments.tune import decide

    plan = decide.spec_plan(ctx, [])
    predicted = decide.adaptive_options(ok, plan, ctx.cfg.concurrency)
    measured = [r["tokens_per_second_mean"] for r in ok]
    if eagle3 and eagle3.get("status") == "ok":
        measured.append(eagle3["tokens_per_second_mean"])
    if not predicted or not plan or predicted[0]["tokens_per_second"] <= max(measured):
        return None
    p = predicted[0]
    ctx.extra_confirm_loads += 1  # in the ETA from now on
    ctx.replan()
    ctx.emit(f"confirm: the speculation plan predicts {p['profile']}/adaptive at "
             f"{p['tokens_per_second']:.1f} tok/s, above everything measured: measuring it "
             f"with real weights (+1 real load{_disk(ctx)}, in the ETA from now on)")  # fmt: skip
    rep = measure.sweep(ctx, "confirm-adaptive", [p["profile"]], mode="adaptive", traces=False)
    row = next((r for r in rep["results"] if r["mode"] == "adaptive"), None)
    if row is None:
        return None
    return dict(real_view(row), adaptive_config=plan.get("adaptive_config"),
                adaptive_config_json=plan.get("adaptive_config_json"))  # fmt: skip
