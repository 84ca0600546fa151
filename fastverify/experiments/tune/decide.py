"""Tune stage 7, decide and apply.

Options: every confirmed finalist in baseline mode (real weights, CI95), and in EAGLE-3 mode
either as measured with real weights (the leader, when confirm ran it) or as predicted from
the trial: confirmed baseline tok/s x accept length / the trial's break-even accept length;
and mode adaptive where the daemon holds a speculation plan (`fastverifyctl spec plan`, made
on that profile's costs) that drafts at the tune's concurrency: confirmed baseline tok/s x
the plan's speedup at that batch-size tier. Only a measured option can win (a prediction
is shown beside them, and what measuring it would take, never applied): the fastest
measured option wins; among measured options tied with it (Welch not significant) and
within `TIE` of its mean, the one serving now is kept (no load).

Apply: `POST /v1/profile {name, mode, wait}` (the daemon validates, restarts, verifies every
process's environment or rolls back, as for any switch; `unchanged` when it already serves
exactly that), then `POST /v1/decision` so the decision is in the daemon's history and on
/metrics. `--no-apply` records the decision unapplied and puts back what served before the
tune.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastverify.experiments.common import stats
from fastverify.experiments.tune.candidates import candidate_backend, tp1_text
from fastverify.experiments.tune.context import Ctx, StageResult

TIE = 0.03
LOAD_KINDS = ("start", "switch", "mode", "restart", "crash_restart")


def options(confirm: Mapping[str, Any], trial_rows: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Every (profile, mode) the decision chooses from, with its evidence."""
    accept = confirm.get("accept_length")
    out: list[dict[str, Any]] = []
    be = {
        r["profile"]: r.get("break_even_accept_length")
        for r in trial_rows
        if r["mode"] == "eagle3" and r["status"] == "ok"
    }
    measured = confirm.get("eagle3")
    for r in confirm.get("rows", []):
        if r["status"] != "ok":
            continue
        out.append(
            {
                "profile": r["profile"],
                "mode": "baseline",
                "evidence": "measured",
                "tokens_per_second": r["tokens_per_second_mean"],
                "ci95": r.get("ci95"),
                "samples": r.get("samples") or [],
                "break_even": be.get(r["profile"]),
                "per_request": r.get("per_request_tokens_per_second_mean"),
            }
        )
        if measured and measured.get("profile") == r["profile"]:
            if measured["status"] == "ok":
                out.append(
                    {
                        "profile": r["profile"],
                        "mode": "eagle3",
                        "evidence": "measured",
                        "tokens_per_second": measured["tokens_per_second_mean"],
                        "ci95": measured.get("ci95"),
                        "samples": measured.get("samples") or [],
                        "accept_length": measured.get("accept_length_mean"),
                        "break_even": be.get(r["profile"]),
                    }
                )
        elif accept and be.get(r["profile"]):
            out.append(
                {
                    "profile": r["profile"],
                    "mode": "eagle3",
                    "evidence": "predicted",
                    "tokens_per_second": r["tokens_per_second_mean"] * accept / be[r["profile"]],
                    "ci95": None,
                    "samples": [],
                    "accept_length": accept,
                    "break_even": be[r["profile"]],
                }
            )
    return sorted(out, key=lambda o: -o["tokens_per_second"])


def spec_plan(ctx: Ctx, warnings: list[str]) -> dict[str, Any] | None:
    """The daemon's stored speculation plan (`GET /v1/spec/plan`); None when there is none
    (404, or `{}`), and any other refusal said in `warnings`, never swallowed."""
    from fastverify.client import ApiError

    try:
        return ctx.client.spec_plan() or None
    except ApiError as exc:
        if exc.status != 404:
            warnings.append(f"the daemon's speculation plan could not be read ({exc}): "
                            "mode adaptive was not considered")  # fmt: skip
        return None


def measured_adaptive(row: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Mode adaptive as confirm measured it with real weights (a sweep row), if it did."""
    if not row or row.get("status") != "ok":
        return []
    return [{
        "profile": row["profile"], "mode": "adaptive", "evidence": "measured",
        "tokens_per_second": row["tokens_per_second_mean"], "ci95": row.get("ci95"),
        "samples": row.get("samples") or [], "adaptive_config": row.get("adaptive_config"),
        "adaptive_config_json": row.get("adaptive_config_json"),
    }]  # fmt: skip


def adaptive_options(
    rows: Sequence[Mapping[str, Any]], plan: Mapping[str, Any] | None, concurrency: int
) -> list[dict[str, Any]]:
    """Mode adaptive for the plan's profile: baseline tok/s x the plan's predicted speedup at
    `concurrency` (`speculation.plan.predicted_speedup`); nothing when there is no plan or it
    does not draft there (its steps-0 passes then cost more than a baseline server's)."""
    from fastverify.speculation.plan import predicted_speedup

    if not plan or not plan.get("tiers") or not plan.get("adaptive_config"):
        return []
    tier = predicted_speedup(dict(plan), concurrency)
    if tier is None or tier.get("steps", 0) < 1:
        return []
    out = []
    for r in rows:
        if r["status"] != "ok" or r["profile"] != plan.get("profile"):
            continue
        out.append({
            "profile": r["profile"], "mode": "adaptive", "evidence": "predicted (plan)",
            "tokens_per_second": r["tokens_per_second_mean"] * tier["speedup"],
            "ci95": None, "samples": [], "speedup": tier["speedup"],
            "speedup_ci95": tier.get("ci"), "steps": tier["steps"],
            "speedup_from": tier["from"],
            "adaptive_config": plan["adaptive_config"],
            "adaptive_config_json": plan.get("adaptive_config_json"),
        })  # fmt: skip
    return out


def choose(opts: list[dict[str, Any]], serving: tuple[str | None, str | None]) -> dict | None:
    """The fastest measured option, or the serving one when it is tied with it (see TIE);
    None when nothing was measured."""
    measured = [o for o in opts if o["evidence"] == "measured"]
    if not measured:
        return None
    best = measured[0]
    for o in measured[1:]:
        tied = (
            o["samples"]
            and best["samples"]
            and stats.compare(best["samples"], o["samples"]) == "not significant"
            and o["tokens_per_second"] >= best["tokens_per_second"] * (1 - TIE)
        )
        o["tied_with_best"] = bool(tied)
        if tied and (o["profile"], o["mode"]) == serving:
            o["kept_because"] = "tied with the fastest and already serving (no load)"
            return o
    return best


def what_would_change(
    winner: Mapping[str, Any], opts: Sequence[Mapping[str, Any]], accept: float | None
) -> list[str]:
    """Plain sentences: the accept length at which the other mode would win, and how close
    the runner-up is."""
    out = []
    wt = winner["tokens_per_second"]
    for o in opts:
        be = o.get("break_even")
        if o["mode"] != "baseline" or not be:
            continue
        base = o["tokens_per_second"]
        need = be * wt / base  # EAGLE-3 on this profile = base x A / be; beats the winner above
        if winner["mode"] == "baseline":
            out.append(
                f"EAGLE-3 on {o['profile']} would win at an accept length above "
                f"{need:.2f} (break-even with its own baseline {be:.2f}"
                + (f"; now {accept:.2f})" if accept else ")")
            )
        elif o["profile"] == winner["profile"]:
            out.append(
                f"the baseline of {o['profile']} would win below an accept length of "
                f"{be:.2f}" + (f" (now {accept:.2f})" if accept else "")
            )
    for o in opts:
        if o["evidence"] != "measured" and o["tokens_per_second"] > wt:
            out.append(
                f"{o['profile']}/{o['mode']} is predicted at {o['tokens_per_second']:.1f} tok/s "
                f"({o['evidence']}), x{o['tokens_per_second'] / wt:.3f} of the winner, but was "
                f"not measured, so it is not applied: {_how_to_measure(o)}"
            )
    others = [o for o in opts if o is not winner and o["evidence"] == "measured"]
    if others:
        r = others[0]
        verdict = "tied within noise" if r.get("tied_with_best") else "slower"
        out.append(
            f"runner-up {r['profile']}/{r['mode']} ({r['evidence']}): "
            f"{r['tokens_per_second']:.1f} tok/s, x{r['tokens_per_second'] / wt:.3f} "
            f"of the winner ({verdict})"
        )
    return out


def _how_to_measure(o: Mapping[str, Any]) -> str:
    """The commands that would measure a predicted option with real weights."""
    if o["mode"] == "adaptive":
        return (
            f"`fastverifyctl profile set {o['profile']} --mode adaptive` then `fastverifyctl "
            "bench` measures it (compare with the winner's tok/s at the same -c)"
        )
    return (
        f"`fastverifyctl sweep {o['profile']} --then-eagle3 1` measures its EAGLE-3 with real "
        "weights (or tune again with it among the finalists)"
    )


def count_loads(history: Sequence[Mapping[str, Any]], since: float) -> dict[str, int]:
    """Engine starts the daemon journaled since `since`, as the plan counts them: real (of
    which `cached` loaded the cached weights, `disk` read the checkpoint) and dummy.
    A record that came up is one load, a rolled-back one two (the attempt and the rollback,
    both counted where the record's weights came from); a real one whose record names no
    source (a start that failed before its weights were read) counts in neither."""
    out = {"real": 0, "cached": 0, "disk": 0, "dummy": 0}
    for r in history:
        if r.get("kind") not in LOAD_KINDS or (r.get("started_at") or 0) < since:
            continue
        n = 2 if r.get("result") == "rolled_back" else 1
        if r.get("weights") == "dummy":
            out["dummy"] += n
            continue
        out["real"] += n
        source = (r.get("weight_load") or {}).get("source")
        if source in ("cache", "disk"):
            out["cached" if source == "cache" else "disk"] += n
    return out


def _switch(ctx: Ctx, profile: str, mode: str) -> dict[str, Any]:
    from fastverify.client import ApiError

    try:
        return ctx.client.set_profile(
            profile, mode=mode, wait=True, timeout=ctx.cfg.switch_timeout_s
        )
    except ApiError as exc:
        return {"result": "failed", **exc.body}


def _simulated(status: Mapping[str, Any]) -> bool:
    return bool((status.get("engine") or {}).get("simulated"))


def _save_accept_length(
    ctx: Ctx, profile: str, base: Mapping[str, Any], accept: float, source: str | None = None
) -> str | None:
    """Record the measured accept length with its baseline, at the concurrency it was
    measured at (`POST /v1/baselines`); None when saved, else why not (said, never
    swallowed)."""
    from fastverify.client import ApiError

    body = {
        "profile": profile,
        "tokens_per_second": base["tokens_per_second"],
        "per_request_tokens_per_second": base.get("per_request") or base["tokens_per_second"],
        "concurrency": ctx.cfg.concurrency,
        "accept_length": accept,
        "acceptance_source": source or "measured",  # forced by SGLang: said with it
    }
    try:
        ctx.client.record_baseline(**body)
    except (ApiError, OSError) as exc:
        return f"the measured accept length {accept:.2f} was not saved: the daemon answered {exc}"
    ctx.emit(f"decide: accept length {accept:.2f} of {profile} saved with its baseline "
             f"(at {ctx.cfg.concurrency} concurrent request(s))")  # fmt: skip
    return None


def run(ctx: Ctx) -> StageResult:
    from fastverify.client import ApiError
    from fastverify.profiles.store import ProfileStore

    confirm = ctx.data("confirm")
    status = ctx.client.status()
    serving = (
        (status.get("profile"), status.get("mode")) if not status.get("trial") else (None, None)
    )
    warnings: list[str] = []
    opts = options(confirm, ctx.data("trial").get("rows", []))
    measured = measured_adaptive(confirm.get("adaptive"))
    predicted = adaptive_options(
        confirm.get("rows", []), spec_plan(ctx, warnings), ctx.cfg.concurrency
    )
    opts = sorted(
        opts + measured + [o for o in predicted if not measured],
        key=lambda o: -o["tokens_per_second"],
    )
    win = choose(opts, serving)
    if win is None:
        return StageResult("failed", "no measured option to decide between")
    accept = confirm.get("accept_length")
    backend = candidate_backend(ProfileStore().load(win["profile"], force=True))
    ci = win.get("ci95")
    runs = len(win.get("samples") or [])
    # the sim's "real weights" are simulated: every figure says which engine measured it
    weights = "real weights, SIMULATED by the sim engine" if _simulated(status) else "real weights"
    evidence = f"{win['tokens_per_second']:.1f} tok/s" + (
        f" ({stats.ci_text(ci, runs)}, {weights})" if ci else f" (measured, {weights})"
    )
    why = f"{win['profile']}/{win['mode']}: {evidence}"
    if win["mode"] == "baseline" and accept:
        why += (
            f"; EAGLE-3 loses at accept length {accept:.2f} ({confirm.get('accept_length_source')})"
        )
    elif win["mode"] == "eagle3":
        why += f"; accept length {accept:.2f} ({confirm.get('accept_length_source')})"
    elif win["mode"] == "adaptive":
        why += f"; SGLang's adaptive steps from the speculation plan ({win['adaptive_config']})"
    if win.get("kept_because"):
        why += f"; {win['kept_because']}"
    tp1 = tp1_text(ctx.data("candidates").get("tp1"))
    if tp1:  # one GPU: the profile was not ranked against the others, and the why says so
        why += f"; {tp1}"
    data: dict[str, Any] = {
        "options": opts,
        "winner": win,
        "backend": backend,
        "why": why,
        "changes": what_would_change(win, opts, accept),
        "accept_length": accept,
        "applied": False,
        "warnings": warnings,
        "tp1": tp1,
    }
    if ctx.cfg.apply:
        ctx.emit(f"apply: {win['profile']}/{win['mode']} (real weights) ...")
        res = _switch(ctx, win["profile"], win["mode"])
        data["apply_result"] = {k: res.get(k) for k in ("result", "reason", "message", "weights")}
        after = ctx.client.status()
        data["applied"] = (
            res.get("result") in ("ok", "unchanged")
            and (after.get("profile"), after.get("mode")) == (win["profile"], win["mode"])
            and not after.get("trial")
        )
    else:
        original = ctx.serving_before
        if original.get("profile"):
            ctx.emit(f"--no-apply: putting back {original['profile']}/{original['mode']} ...")
            res = _switch(ctx, original["profile"], original["mode"])
            data["restore_result"] = {k: res.get(k) for k in ("result", "reason", "message")}
    eagle3 = confirm.get("eagle3") or {}
    if eagle3.get("status") == "ok" and eagle3.get("accept_length_mean"):
        # what confirm measured with real weights, whatever won: for later trials here
        base = next(
            (o for o in opts if o["profile"] == eagle3["profile"] and o["mode"] == "baseline"),
            None,
        )
        if base:
            saved = _save_accept_length(ctx, eagle3["profile"], base, eagle3["accept_length_mean"],
                                        eagle3.get("acceptance_source"))  # fmt: skip
            data["accept_length_saved"] = saved is None
            if saved is not None:
                warnings.append(saved)
    body = {
        "profile": win["profile"],
        "mode": win["mode"],
        "backend": backend,
        "applied": data["applied"],
        "why": why[:2000],
        "report": str(ctx.out / "report.md"),
        "tokens_per_second": win["tokens_per_second"],
    }
    if accept:
        body["accept_length"] = accept
        body["acceptance_source"] = confirm.get("acceptance_source") or "measured"
        data["acceptance_source"] = body["acceptance_source"]
    if win["mode"] == "adaptive":
        body["adaptive_config"] = win["adaptive_config"]
    try:
        ctx.client.record_decision(**body)
        data["recorded"] = True
    except ApiError as exc:
        data["recorded"] = False
        data["record_error"] = str(exc)
        warnings.append(f"the daemon refused the decision record ({exc}): status and /metrics "
                        "do not show this decision")  # fmt: skip
    for w in warnings:
        ctx.emit(f"warning: {w}")
    if ctx.cfg.apply and not data["applied"]:
        return StageResult(
            "failed",
            f"applying {win['profile']}/{win['mode']} failed: "
            f"{(data.get('apply_result') or {}).get('message')}",
            data,
        )
    return StageResult("done", None, data)
