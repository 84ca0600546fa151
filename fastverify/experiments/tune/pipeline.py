"""`fastverifyctl tune`: from a new host to a decided, applied profile, mode and backend.

The funnel, one stage after another (each a small module beside this one):

    inventory     doctor, topology, GPUs, versions, what SGLang adds, possible backends
    candidates    shipped + user profiles (or --profiles), their all-reduce backends
    derive_tuner  a tuner profile for this rank count          (GPUs; else skipped)
    preflight     drop capture failures and clearly slower ones (GPUs; else skipped)
    rehearse      break-even accept length per survivor         (GPUs + --model-config)
    trial         top candidates on dummy weights in the real server (+ EAGLE-3 for the best);
                  on the cached real weights where it serves baseline loads
    confirm       finalists with real weights, CI95 (the trial's rows where they were real);
                  a real EAGLE-3 load, from disk, only if it matters
    decide        choose, apply through the daemon (profile set + mode), record

A plan with estimates comes first (plan.py). Every stage is journaled (journal.py) under
the daemon's state dir; `resume=True` skips finished stages and continues an interrupted
one (its sweeps resume from their results files). The experiments reach the daemon only
through its control API (`fastverify.client.ControlClient`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastverify.api_models import PART_SHARED_LOAD_S, PART_SHARED_LOADS
from fastverify.experiments.tune import (
    cache,
    candidates,
    confirm,
    decide,
    gpu,
    inventory,
    journal,
    plan,
    report,
    trial,
)
from fastverify.experiments.tune.context import Ctx, StageResult, TuneConfig

StageFn = Callable[[Ctx], StageResult]
STAGES: tuple[tuple[str, StageFn], ...] = (
    ("inventory", inventory.run),
    ("candidates", candidates.run),
    ("derive_tuner", gpu.derive_tuner),
    ("preflight", gpu.preflight),
    ("rehearse", gpu.rehearse),
    ("trial", trial.run),
    ("confirm", confirm.run),
    ("decide", decide.run),
)
LOAD_STAGES = ("trial", "confirm", "decide")  # their ETA follows the loads measured so far
REPLAN_EVERY_S = 10.0  # how often a progress line may re-read the daemon's history for it
# what a tune writes in its output directory (--force replaces them, nothing else)
OUTPUTS = ("trial", "trial-eagle3", "confirm", "confirm-eagle3", "confirm-adaptive",
           "decision.json", "report.md", *report.PLOT_FILES)  # fmt: skip
OPTIONAL = {"derive_tuner", "preflight", "rehearse"}  # a failure here does not end the tune
Event = dict[str, Any]


class TuneError(RuntimeError):
    """The tune cannot start (bad options, nothing to resume, output dir in use)."""


class TuneBusy(TuneError):
    """Another experiment holds the daemon's lease."""


def tune_dir(status: dict[str, Any]) -> Path:
    """`<the daemon's state dir>/tune` when writable here, else this user's state dir's."""
    from fastverify import paths

    daemon_dir = (status.get("daemon") or {}).get("state_dir")
    if daemon_dir:
        d = Path(daemon_dir) / "tune"
        if (d.is_dir() and os.access(d, os.W_OK)) or os.access(daemon_dir, os.W_OK):
            return d
    return paths.state_dir() / "tune"


def _plan(ctx: Ctx, done: list[str], fixed: tuple[int, int] | None = None) -> dict[str, Any]:
    cfg = ctx.cfg
    serving = ctx.serving_before
    if ctx.status_of("candidates") == "done":
        names = [r["name"] for r in gpu.candidates(ctx)]  # the funnel (at TP 1, one per group)
        if fixed is not None:
            fixed = (min(fixed[0], len(names)), min(fixed[1], len(names)))
    else:
        names = _expected_candidates(ctx, list(cfg.profiles) or _all_profiles())
    accept, _ = confirm.accept_length(ctx, None)
    skips = gpu.host_skips(cfg)
    cached, read_s = _shared_baseline_loads(ctx)
    facts = plan.PlanFacts(
        candidates=len(names),
        serving_candidate=serving.get("mode") == "baseline" and serving.get("profile") in names,
        skips=skips,
        finalists=cfg.finalists,
        budget_s=cfg.budget_min * 60 if cfg.budget_min else None,
        repeats=cfg.repeats,
        duration_s=cfg.duration_s,
        accept_known=accept is not None
        and not (ctx.eagle3_confirm or confirm.trial_wants_eagle3(ctx, accept)),
        extra_real_loads=ctx.extra_confirm_loads,
        history=ctx.client.history(),
        times=ctx.journal.times(),
        done=done,
        fixed=fixed,
        ranked="preflight" not in skips or "rehearse" not in skips,
        cached=cached,
        checkpoint_read_s=read_s,
    )
    return plan.make_plan(facts)


def _expected_candidates(ctx: Ctx, names: list[str]) -> list[str]:
    """The candidates stage's names before it ran: at TP 1 one per group of profiles that
    serve the same one-GPU server (the serving profile's where it is in one), as it will
    keep them."""
    from fastverify.experiments.tune import candidates as cand
    from fastverify.experiments.tune.inventory import server_tp_size
    from fastverify.profiles.store import ProfileStore

    tp = ctx.data("inventory").get("engine", {}).get("tp_size") or server_tp_size(ctx)
    if tp != 1:
        return names
    loaded = {e.name: prof for e, prof, _ in ProfileStore().list_entries()
              if prof is not None and e.name in names}  # fmt: skip
    rows = [{"name": n} for n in names if n in loaded]
    kept, _ = cand.collapse_tp1(rows, loaded, ctx.serving_before.get("profile"))
    return [r["name"] for r in kept]


def _shared_baseline_loads(ctx: Ctx) -> tuple[bool, float | None]:
    """Does a part of the daemon serve real baseline loads from memory the engines share
    (its status section's `shared_loads`)? Then they cost what a cached load costs; and the
    seconds it took to read them (`shared_load_s`: what a load from disk reads too)."""
    try:
        st = ctx.client.status()
    except Exception:  # the plan is made without it: priced as disk loads
        return False, None
    sections = [st.get(name) or {} for name in st.get("parts") or []]
    sharing = [s for s in sections if "baseline" in (s.get(PART_SHARED_LOADS) or ())]
    read = [s[PART_SHARED_LOAD_S] for s in sharing
            if isinstance(s.get(PART_SHARED_LOAD_S), int | float)]  # fmt: skip
    return bool(sharing), (max(read) if read else None)


def _wait_idle(client: Any, timeout_s: float, emit: Callable[[Event], None]) -> dict[str, Any]:
    """The daemon's status once no operation is in flight (e.g. the switch a killed tune
    left running), so the first switch of a resumed stage is not refused as busy."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.status()
        op = status.get("switch_in_flight")
        if not op or time.monotonic() > deadline:
            return status
        emit(
            {
                "event": "line",
                "stage": None,
                "eta_s": None,
                "text": f"waiting for the daemon's {op.get('kind')} of {op.get('profile')}/"
                f"{op.get('mode')} to finish ({op.get('elapsed_s') or 0:.0f} s)",
            }
        )
        time.sleep(1.0)


def _all_profiles() -> list[str]:
    from fastverify.profiles.store import ProfileStore

    return [e.name for e in ProfileStore().entries()]


def run(
    client: Any,
    cfg: TuneConfig,
    *,
    resume: bool = False,
    force: bool = False,
    on_event: Callable[[Event], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the tune; returns the `--json` document (also DIR/decision.json).
    `force`: start a new tune in an output directory that holds one (its files replaced)."""
    from fastverify.experiments.common.lease import LeaseRefused, hold

    emit = on_event or (lambda _e: None)
    if not resume and (bad := candidates.unknown_names(cfg.profiles)):
        # a usage error whoever holds the daemon: said before the lease is asked for
        raise TuneError(f"unknown profile(s): {', '.join(bad)}; nothing was switched")
    what = f"{'resumed; ' if resume else ''}output {cfg.output_dir}"
    try:
        with hold(client, "tune", what) as leased:
            return _run(leased, cfg, resume, force, emit)
    except LeaseRefused as exc:
        raise TuneBusy(f"{exc}; nothing was switched") from None


def _run(
    client: Any, cfg: TuneConfig, resume: bool, force: bool, emit: Callable[[Event], None]
) -> dict[str, Any]:
    """The tune itself, its client holding the daemon's lease."""
    status = _wait_idle(client, cfg.switch_timeout_s, emit)
    jr, cfg, start = _open(status, cfg, resume, force)
    ctx, shown_plan = _context(client, cfg, jr, start, emit)
    emit(
        {
            "event": "plan",
            "plan": ctx.plan,
            "resumed": resume,
            "journal": str(jr.path),
            "output": str(ctx.out),
        }
    )
    try:
        for index, (name, fn) in enumerate(STAGES, 1):
            where = {"event": "stage", "name": name, "index": index, "total": len(STAGES)}
            if name in ctx.results:
                emit({**where, "status": "finished earlier"})
                continue
            res = _run_stage(ctx, name, fn, where, emit)
            if res.status == "failed" and name not in OPTIONAL:
                break
    except KeyboardInterrupt:
        _put_back(ctx)  # as sweep and spec costs do; the journal stays for --resume
        _journal_interrupted(ctx)
        raise
    result = _result(ctx, jr, start, ctx.out, shown_plan)
    if all(n in ctx.results and ctx.results[n].status != "failed" for n, _ in STAGES):
        jr.append({"event": "end", "decision": result["decision"]})
    return result


def _put_back(ctx: Ctx) -> None:
    """Ctrl-C: what served before the tune goes back (real weights), queued behind a trial's
    switch still in flight, when the daemon answers; said, never a traceback."""
    from fastverify.experiments.common.daemon_ops import switch

    before = ctx.serving_before
    if not before.get("profile"):
        return
    what = f"{before['profile']}/{before['mode']}"
    ctx.emit(f"interrupted: putting back {what} (real weights) ...")
    try:
        body = {"name": before["profile"], "mode": before["mode"], "queue": True}
        res = switch(ctx.client, body, ctx.cfg.switch_timeout_s, ctx.emit)
    except Exception as exc:  # the interrupt is what the user sees, not a traceback
        ctx.emit(f"interrupted: {what} not put back ({exc})")
        return
    ctx.emit(f"interrupted: {what} put back ({res.get('result')}"
             + (f": {res.get('message')})" if res.get("result") not in ("ok", "unchanged")
                else ")"))  # fmt: skip


def _loads_since(ctx: Ctx, since: float) -> dict[str, int] | None:
    """The engine starts the daemon recorded since `since` (time.time()), by kind; None when
    its history cannot be read (said nowhere else: a figure, not worth failing a stage)."""
    try:
        return decide.count_loads(ctx.client.history(), since)
    except Exception:
        return None


def _journal_interrupted(ctx: Ctx) -> None:
    """Ctrl-C in a stage: its time and loads so far (the put-back's included) into the
    journal, so the tune's totals count the attempt a --resume runs again."""
    if ctx.running is None:
        return
    name, planned = ctx.running
    with contextlib.suppress(Exception):  # a second Ctrl-C, an unreachable daemon
        ctx.journal.append(
            {
                "event": "stage_interrupted",
                "name": name,
                "wall_s": time.monotonic() - ctx.stage_t0,
                **planned,
                "loads": _loads_since(ctx, ctx.stage_since),
            }
        )


def _open(
    status: dict[str, Any], cfg: TuneConfig, resume: bool, force: bool = False
) -> tuple[journal.Journal, TuneConfig, dict[str, Any]]:
    """The journal, the options and the start record (with what served before the tune):
    the unfinished tune's when resuming, else a new tune's (checked first)."""
    jr = journal.Journal(tune_dir(status))
    if resume:
        start = jr.start_record()
        if not jr.unfinished() or start is None:
            raise TuneError(_nothing_to_resume(jr, start))
        cfg = TuneConfig(**{**start["config"], "profiles": tuple(start["config"]["profiles"])})
    else:
        cfg = replace(cfg, output_dir=str(Path(cfg.output_dir).resolve()))  # resume anywhere
        out = Path(cfg.output_dir)
        if any((out / sub).exists() for sub in OUTPUTS):
            if not force:
                raise TuneError(_in_use(out, jr))
            _clear(out)
        jr.begin(cfg.describe())
        jr.append(
            {
                "event": "serving",
                "serving": {"profile": status.get("profile"), "mode": status.get("mode")},
            }
        )
        start = jr.start_record()
    assert start is not None
    serving = next((r for r in jr.records if r.get("event") == "serving"), {})
    return jr, cfg, dict(start, serving=serving.get("serving"))


def _in_use(out: Path, jr: journal.Journal) -> str:
    """What to do about an output directory that holds a tune: resume it when it is the
    unfinished one, else a new directory or --force."""
    start = jr.start_record() or {}
    ours = Path(str((start.get("config") or {}).get("output_dir") or "")) == out
    if jr.unfinished() and ours:
        return (
            f"{out} holds the unfinished tune of this host: pass --resume to continue it, "
            f"or --force to start again in {out} (its files are replaced)"
        )
    return (
        f"{out} already holds a finished tune (report: {out / 'report.md'}): choose a new "
        f"directory (-o NEWDIR), or pass --force to replace it"
    )


def _nothing_to_resume(jr: journal.Journal, start: dict[str, Any] | None) -> str:
    """Why --resume has nothing to do, and what would start a new tune."""
    last = Path(str(((start or {}).get("config") or {}).get("output_dir") or ""))
    if start is None or not str(last) or str(last) == ".":
        return (
            f"nothing to resume: no tune was started on this host ({jr.path}); "
            "run `fastverifyctl tune` without --resume"
        )
    return (
        f"nothing to resume: the last tune of this host finished (report: "
        f"{last / 'report.md'}); start a new one with `fastverifyctl tune -o NEWDIR`, or "
        f"`fastverifyctl tune -o {last} --force` to replace it"
    )


def _clear(out: Path) -> None:
    """Remove a previous tune's files from `out` (--force): only the names a tune writes."""
    import shutil

    for name in OUTPUTS:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _context(
    client: Any,
    cfg: TuneConfig,
    jr: journal.Journal,
    start: dict[str, Any],
    emit: Callable[[Event], None],
) -> tuple[Ctx, dict[str, Any]]:
    """The stages' context with the finished stages restored and the plan made (a resumed
    tune keeps the finalists and trials it planned); also the plan the report shows."""
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(
        cfg=cfg,
        client=client,
        journal=jr,
        out=out,
        emit=lambda _t: None,
        serving_before=start.get("serving") or {},
    )

    replanned = [0.0]

    def line(text: str) -> None:
        now = time.monotonic()
        if ctx.stage in LOAD_STAGES and now - replanned[0] >= REPLAN_EVERY_S:
            # the loads this stage just measured replace the plan's defaults in the ETA
            replanned[0] = now
            with contextlib.suppress(Exception):  # an ETA is not worth failing a tune for
                _replan(ctx)
        elapsed = now - ctx.stage_t0
        emit(
            {
                "event": "line",
                "stage": ctx.stage,
                "text": text,
                "eta_s": plan.remaining_s(ctx.plan, ctx.stage, elapsed),
                "over_s": plan.overrun_s(ctx.plan, ctx.stage, elapsed),
            }
        )

    ctx.emit = line
    ctx.replan = lambda: _replan(ctx)
    for name, rec in jr.finished().items():
        ctx.results[name] = StageResult(rec["status"], rec.get("reason"), rec.get("data") or {})
    first = next((r["plan"] for r in jr.records if r.get("event") == "plan"), None)
    if first is not None:
        fixed = (first["finalists"], first["trial_candidates"])
        ctx.plan = dict(_plan(ctx, list(ctx.results), fixed), budget_note=first["budget_note"])
    else:
        ctx.plan = _plan(ctx, list(ctx.results))
    jr.append({"event": "plan", "plan": ctx.plan, "resumed": first is not None})
    return ctx, first or ctx.plan


def _replan(ctx: Ctx) -> None:
    """The plan again from the loads the daemon recorded so far (same finalists, trials)."""
    fixed = (ctx.plan["finalists"], ctx.plan["trial_candidates"])
    note = ctx.plan.get("budget_note")
    ctx.plan = dict(_plan(ctx, list(ctx.results), fixed), budget_note=note)


def _run_stage(
    ctx: Ctx, name: str, fn: StageFn, where: dict[str, Any], emit: Callable[[Event], None]
) -> StageResult:
    """One stage, journaled before and after (a kill in between re-runs it on resume)."""
    if name in LOAD_STAGES:  # fresher load times for the ETA
        _replan(ctx)
    ctx.stage, ctx.stage_t0, ctx.stage_since = name, time.monotonic(), time.time()
    planned = plan.stage_plan(ctx.plan, name)
    ctx.journal.append({"event": "stage_started", "name": name, **planned})
    emit({**where, "status": "started", "eta_s": plan.remaining_s(ctx.plan, name, 0.0)})
    ctx.running = (name, planned)
    res = fn(ctx)
    ctx.running = None
    wall = time.monotonic() - ctx.stage_t0
    if name in ("inventory", "candidates"):
        ctx.journal.record_time(name, wall)
    ctx.journal.append(
        {
            "event": "stage_finished",
            "name": name,
            "status": res.status,
            "wall_s": wall,
            "reason": res.reason,
            "data": res.data,
            **planned,
            "loads": _loads_since(ctx, ctx.stage_since),
        }
    )
    ctx.results[name] = res
    emit(
        {
            **where,
            "status": res.status,
            "wall_s": wall,
            "reason": res.reason,
            "eta_s": plan.remaining_s(ctx.plan, name, float("inf")),
        }
    )
    return res


def _run_view(rec: dict[str, Any]) -> dict[str, Any]:
    """An earlier run of a stage (interrupted, or failed before a --resume ran it again)."""
    status = "interrupted" if rec.get("event") == "stage_interrupted" else rec.get("status")
    return {"status": status, "wall_s": round(float(rec.get("wall_s") or 0.0), 3),
            "loads": rec.get("loads")}  # fmt: skip


def total_loads(jr: journal.Journal) -> dict[str, int] | None:
    """The loads of every run of every stage the journal recorded (interrupted ones and their
    put-back included), by kind: what the tune cost across daemon restarts and machines. None
    when a run recorded no loads (a journal an older fastverify began, an unreadable history):
    the daemon's own history since the start then counts them, as it sees them."""
    runs = [r for name, _ in STAGES for r in jr.attempts(name)]
    if not runs or any(not isinstance(r.get("loads"), dict) for r in runs):
        return None
    out = {"real": 0, "cached": 0, "disk": 0, "dummy": 0}
    for r in runs:
        for k in out:
            out[k] += int(r["loads"].get(k) or 0)
    return out


def _result(
    ctx: Ctx, jr: journal.Journal, start: dict[str, Any], out: Path, shown_plan: dict[str, Any]
) -> dict[str, Any]:
    stages = []
    for name, _ in STAGES:
        rec = jr.last_of(name)
        if rec is not None:
            first = plan.stage_plan(shown_plan, name)["planned_s"]
            stages.append(
                {
                    "name": name,
                    "status": rec["status"],
                    "wall_s": round(float(rec.get("wall_s") or 0.0), 3),
                    "reason": rec.get("reason"),
                    "planned_s": rec.get("planned_s"),
                    "planned_s_at_start": first,
                    "planned_loads": rec.get("planned_loads"),
                    "loads": rec.get("loads"),
                    "earlier_runs": [_run_view(r) for r in jr.attempts(name) if r is not rec],
                }
            )
    dec = ctx.data("decide")
    win = dec.get("winner") or {}
    failed = next((s for s in stages if s["status"] == "failed"), None)
    decision = {
        "profile": win.get("profile"),
        "mode": win.get("mode"),
        "backend": dec.get("backend"),
        "applied": bool(dec.get("applied")),
        "why": dec.get("why")
        or (f"{failed['name']} failed: {failed['reason']}" if failed else "no decision"),
    }
    if win.get("mode") == "adaptive":  # the plan travels with the decision (render kubernetes)
        decision["adaptive_config"] = win.get("adaptive_config")
        decision["adaptive_config_json"] = win.get("adaptive_config_json")
    # which engine measured it (the daemon's own account: the sim's figures are simulated)
    decision["engine"] = (ctx.client.status().get("engine") or {}).get("identity")
    history = ctx.client.history()
    result = {
        "decision": decision,
        "warnings": list(dec.get("warnings") or []),
        "stages": stages,
        "loads": total_loads(jr) or decide.count_loads(history, float(start.get("ts") or 0.0)),
        "wall_s": round(time.time() - float(start.get("ts") or time.time()), 3),
        "report": str(out / "report.md"),
        "fingerprint": ctx.data("inventory").get("fingerprint"),
        "evidence": cache.evidence(win, ctx.cfg) if win else None,
    }
    data = {name: r.data for name, r in ctx.results.items()}
    ctx.emit("drawing the plots ...")  # seconds on a busy machine: never a silent wait
    result["plots"] = report.draw_plots(out, result, data)
    ctx.emit(f"writing {out / 'report.md'} and decision.json ...")
    report.write(out, result, data, shown_plan)
    cache.store(jr.path.parent, result)
    return result
