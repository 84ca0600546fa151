"""The tune plan: every stage with its estimated time, before anything is loaded.

Estimates come from this host's records where there are any, in every stage: weight loads
from the daemon's history (`duration_s` of switches that came up, per kind of load: from
disk, dummy, cached = real weights mapped from the daemon's cached weights; a kind with none
recorded yet is the engine's part of the recorded loads plus its own weights' time, see
`load_times`), stage times per unit from
earlier tunes (`times.json` in the tune journal's directory: inventory, candidates, tuner
derivation, preflight and rehearse per profile, a trace window, a measurement's overhead).
Where there is nothing recorded, a default is used and the plan says `default`.

Where cached weights serve real baseline loads (`cached`), the trial's baselines are
cached loads whose rows are the confirmation: confirm reloads no finalist, only its EAGLE-3 /
adaptive loads read from disk, and the decision's load is a cached one. Each stage says which
kind of load it priced (`cached_loads` of its `real_loads`; the totals: real, cached, disk,
dummy).

Trial candidates: every candidate when nothing ranks them before the trial (no GPU here);
the best `finalists + RANKED_EXTRA` when preflight or rehearse will rank them.
`budget_s` lowers the number of finalists first, then the number of trial candidates,
rather than overrun; when even one finalist and one trial do not fit, the plan says by how
much it is over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

# Defaults (seconds) when nothing was recorded on this host. Real-host figures: a 10-minute
# real load and ~1.5 minutes for a dummy one (docs/guides/experiments.md), preflight 4-7 s per
# profile on 2 H200, rehearse ~10-20 s per profile (benchmarks/results/).
DEFAULTS = {
    "load_real": 600.0,
    "load_dummy": 90.0,
    # a real load from the daemon's cached weights: the weights mapped over CUDA IPC (SGLang's
    # published figure: under a second for a 235B FP8 model), the rest as a dummy load's
    "load_cached": 90.0,
    "inventory": 10.0,
    "candidates": 2.0,
    "derive_tuner": 180.0,
    "preflight": 6.0,  # per profile
    "rehearse": 20.0,  # per profile
    "trace": 5.0,  # one profile window per trial row
    "bench_overhead": 2.0,  # per measurement: warm-up request, switch bookkeeping
}
RANKED_EXTRA = 2  # trial candidates beyond the finalists when preflight/rehearse ranked them


def loads_text(loads: Mapping[str, int]) -> str:
    """A plan's or a run's loads as a person reads them: `8 real (7 cached),
    2 dummy` (the cached ones are counted among the real)."""
    cached = loads.get("cached") or 0
    return (
        f"{loads['real']} real"
        + (f" ({cached} cached)" if cached else "")
        + f", {loads['dummy']} dummy"
    )


@dataclass(frozen=True)
class PlanFacts:
    """What the plan is made from (gathered by the pipeline; pure here)."""

    candidates: int  # profiles that will be candidates
    skips: Mapping[str, str]  # stage -> why it cannot run on this host
    finalists: int
    budget_s: float | None
    repeats: int
    duration_s: float
    accept_known: bool  # an accept length is given or recorded: no real EAGLE-3 load planned
    history: Sequence[Mapping[str, Any]] = ()  # GET /v1/history
    times: Mapping[str, Any] = field(default_factory=dict)  # the journal's times.json
    done: Sequence[str] = ()  # stages already finished (resume)
    fixed: tuple[int, int] | None = None  # (finalists, trials) decided earlier: re-estimate only
    ranked: bool = False  # preflight or rehearse will rank the candidates before the trial
    extra_real_loads: int = 0  # real loads confirm decided on besides the plan's (adaptive)
    cached: bool = False  # a part of the daemon serves real baseline loads (shared_loads)
    checkpoint_read_s: float | None = None  # that part's own read of the weights (a disk load's)
    serving_candidate: bool = False  # the serving profile's baseline is a candidate


def _kind(r: Mapping[str, Any]) -> str:
    """real | dummy | cached (a real load whose weights came from the daemon's cached weights)."""
    weights = r.get("weights") or "real"
    if weights == "real" and (r.get("weight_load") or {}).get("source") == "cache":
        return "cached"
    return weights


def _seconds(r: Mapping[str, Any]) -> Any:
    """A load's seconds: `duration_s`; for a cached one its phases' sum where recorded (the
    daemon's first start also waits for the cache's own disk load, which no later cached
    load pays again)."""
    phases = r.get("phases") or {}
    if _kind(r) == "cached" and phases and all(isinstance(v, int | float) for v in phases.values()):
        return sum(phases.values())
    return r.get("duration_s")


def _engine_s(r: Mapping[str, Any]) -> float:
    """A load's seconds without its weights' own (`weight_load.seconds`: from disk, the
    cache or nowhere): the engine's part, which every kind of load pays alike."""
    weights = (r.get("weight_load") or {}).get("seconds")
    return float(_seconds(r)) - (float(weights) if isinstance(weights, int | float) else 0.0)


def load_times(
    history: Sequence[Mapping[str, Any]], checkpoint_read_s: float | None = None
) -> dict[str, tuple[float, str]]:
    """kind (real: from disk, dummy, cached: real weights the daemon keeps mapped) ->
    (median seconds of the newest loads that came up, where it came from).

    The daemon's first start (`kind` start) pays one-time kernel builds that later loads do
    not (SGLang 0.5.17, 8B, one H100: 61 s of CUDA-graph capture on the first start, 11-12 s
    on each later load). So a kind is priced, in this order, from: its later loads; the
    engine's part of the later loads (what every load pays beside its weights) plus its own
    weights' time (none for a dummy load, the mapping for a cached one, and for one from disk
    `checkpoint_read_s`, the weight cache's own read of the checkpoint, when known); its
    first starts; the engine's part of the first starts plus its weights' time; a default."""
    ok = [
        r
        for r in history
        if r.get("kind") in ("switch", "start", "mode", "restart")
        and r.get("result") == "ok"
        and isinstance(_seconds(r), int | float)
        and _seconds(r) > 0
    ]
    later = [r for r in ok if r.get("kind") != "start"]
    first = [r for r in ok if r.get("kind") == "start"]
    out: dict[str, tuple[float, str]] = {}
    for pool, said in ((later, ""), (first, " (first start: kernel builds included)")):
        for weights in ("real", "dummy", "cached"):
            secs = [float(_seconds(r)) for r in pool if _kind(r) == weights][-5:]
            if secs and weights not in out:
                out[weights] = (
                    median(secs),
                    f"recorded: median of {len(secs)} daemon load(s){said}",
                )
        if not pool:
            continue
        newest = pool[-5:]
        engine = median(_engine_s(r) for r in newest)
        src = f"recorded: the engine's part of {len(newest)} daemon load(s){said}"
        out.setdefault("dummy", (engine, f"{src}, no weights read"))
        out.setdefault("cached", (engine, f"{src}, the weights mapped"))
        if checkpoint_read_s:
            read = f"{checkpoint_read_s:.0f} s, the weight cache's read of the checkpoint"
            out.setdefault("real", (engine + checkpoint_read_s, f"{src} + {read}"))
    for weights in ("real", "dummy", "cached"):
        out.setdefault(weights, (DEFAULTS[f"load_{weights}"], "default"))
    return out


def _per_unit(times: Mapping[str, Any], key: str) -> tuple[float, str]:
    values = [v for v in times.get(key, []) if isinstance(v, int | float)]
    if values:
        return median(values), f"recorded: {len(values)} earlier tune(s) on this host"
    return DEFAULTS[key], "default"


def _estimates(f: PlanFacts, finalists: int, trials: int) -> list[dict[str, Any]]:
    loads = load_times(f.history, f.checkpoint_read_s)
    disk, disk_src = loads["real"]  # EAGLE-3 / adaptive read from disk: no draft in the cache
    cached, cached_src = loads["cached"]
    dummy, dummy_src = loads["dummy"]
    overhead, _ = _per_unit(f.times, "bench_overhead")
    measure = f.repeats * (f.duration_s + overhead)
    eagle = min(finalists, trials)
    rows: list[dict[str, Any]] = []

    def add(
        name: str,
        seconds: float,
        source: str,
        units: str,
        real_loads: int = 0,
        dummy_loads: int = 0,
        note: str = "",
        cached_loads: int = 0,
    ) -> None:
        skip = f.skips.get(name)
        done = name in f.done
        rows.append(
            {
                "name": name,
                "estimate_s": 0.0 if (skip or done) else seconds,
                "source": source,
                "units": units,
                "real_loads": 0 if (skip or done) else real_loads,
                "cached_loads": 0 if (skip or done) else cached_loads,  # of real_loads
                "dummy_loads": 0 if (skip or done) else dummy_loads,
                "will_run": not skip and not done,
                "skip_reason": skip,
                "note": "finished earlier (resume)" if done else note,
            }
        )

    for name in ("inventory", "candidates", "derive_tuner"):
        sec, src = _per_unit(f.times, name)
        add(name, sec, src, "1 run")
    for name in ("preflight", "rehearse"):
        sec, src = _per_unit(f.times, name)
        add(name, sec * f.candidates, src, f"{f.candidates} profile(s) x {sec:.0f} s")
    trace, _ = _per_unit(f.times, "trace")
    run = f"{measure:.0f} s measuring + {trace:.0f} s trace"
    if f.cached:  # the baselines on the cache's real weights: they are the confirmation
        # the serving baseline goes first and needs no load when the trial takes every candidate
        serving = 1 if f.serving_candidate and trials >= f.candidates else 0
        add(
            "trial",
            trials * (measure + trace)
            + (trials - serving) * cached
            + eagle * (dummy + measure + trace),
            f"cached load: {cached_src}; dummy load: {dummy_src}",
            f"{trials} baseline(s) on cached real weights x ({cached:.0f} s "
            f"cached load + {run})"
            + (" (the serving one first: no load)" if serving else "")
            + f" + {eagle} EAGLE-3 on dummy weights x ({dummy:.0f} s dummy load + {run})",
            real_loads=trials - serving,
            cached_loads=trials - serving,
            dummy_loads=eagle,
        )
    else:
        add(
            "trial",
            (trials + eagle) * (dummy + measure + trace),
            f"dummy load: {dummy_src}",
            f"{trials} baseline + {eagle} EAGLE-3 trial(s) x ({dummy:.0f} s load + {run})",
            dummy_loads=trials + eagle,
        )
    extra = 0 if f.accept_known else 1
    more = (" + " if extra else "") + f"{f.extra_real_loads} adaptive" if f.extra_real_loads else ""
    spec = (
        f" + {'1 EAGLE-3' if extra else ''}{more} x ({disk:.0f} s load from disk + {measure:.0f} s)"
        if extra or f.extra_real_loads
        else ""
    )
    spec_note = (
        ""
        if extra
        else f"+1 real EAGLE-3 load{' from disk' if f.cached else ''} only if the trial puts "
        "EAGLE-3 within 10% of the baseline"
    )
    if f.cached:
        add(
            "confirm",
            (extra + f.extra_real_loads) * (disk + measure),
            f"load from disk: {disk_src}",
            f"{finalists} finalist(s): their trial rows (real weights from the cache), no "
            f"reload{spec}",
            real_loads=extra + f.extra_real_loads,
            note=spec_note,
        )
        add(
            "decide",
            1.0 + cached,
            f"cached load: {cached_src}",
            f"apply: 1 cached load ({cached:.0f} s)",
            real_loads=1,
            cached_loads=1,
            note="no load when the winner is the EAGLE-3 load confirm ran last",
        )
        return rows
    add(
        "confirm",
        finalists * (disk + measure) + (extra + f.extra_real_loads) * (disk + measure),
        f"real load: {disk_src}",
        f"{finalists} finalist(s) x ({disk:.0f} s load + {measure:.0f} s measuring){spec}",
        real_loads=finalists + extra + f.extra_real_loads,
        note=spec_note,
    )
    add(
        "decide",
        1.0,
        "default",
        "apply",
        note="no load when the winner is the finalist "
        f"loaded last; else +1 real load ({disk:.0f} s)",
    )
    return rows


def make_plan(f: PlanFacts) -> dict[str, Any]:
    """The plan (JSON-able): stages with estimates, totals, and what the budget changed."""
    finalists = max(1, f.finalists)
    trials = max(f.candidates, 1)
    if f.ranked:  # a GPU stage ranked them: the trial takes the best few (RANKED_EXTRA more)
        trials = min(trials, finalists + RANKED_EXTRA)
    finalists = min(finalists, trials)
    if f.fixed is not None:
        finalists, trials = f.fixed
    rows = _estimates(f, finalists, trials)
    total = sum(r["estimate_s"] for r in rows)
    note = None
    if f.fixed is None and f.budget_s is not None and total > f.budget_s:
        asked = (finalists, trials)
        while total > f.budget_s and finalists > 1:
            finalists -= 1
            rows = _estimates(f, finalists, trials)
            total = sum(r["estimate_s"] for r in rows)
        while total > f.budget_s and trials > finalists:
            trials -= 1
            rows = _estimates(f, finalists, trials)
            total = sum(r["estimate_s"] for r in rows)
        note = (
            f"budget {f.budget_s / 60:.1f} min: finalists {asked[0]} -> {finalists}, "
            f"trial candidates {asked[1]} -> {trials}"
        )
        if total > f.budget_s:
            note += (
                f"; still {(total - f.budget_s) / 60:.1f} min over (the smallest plan: "
                "one trial, one finalist)"
            )
    return {
        "stages": rows,
        "total_s": total,
        "budget_s": f.budget_s,
        "finalists": finalists,
        "finalists_asked": f.finalists,
        "trial_candidates": trials,
        "budget_note": note,
        "over_budget": f.budget_s is not None and total > f.budget_s,
        "cached": f.cached,  # the trial's baselines load the cached real weights
        "loads": {
            "real": sum(r["real_loads"] for r in rows),
            "cached": sum(r["cached_loads"] for r in rows),  # of the real ones
            "disk": sum(r["real_loads"] - r["cached_loads"] for r in rows),
            "dummy": sum(r["dummy_loads"] for r in rows),
        },
    }


def stage_plan(plan: Mapping[str, Any], name: str) -> dict[str, Any]:
    """What `plan` estimated for one stage: `planned_s` and `planned_loads` by kind (real,
    cached, disk, dummy: the plan's and a run's `loads` keys); None each when the plan has
    no row for it."""
    row = next((r for r in plan.get("stages", []) if r["name"] == name), None)
    if row is None:
        return {"planned_s": None, "planned_loads": None}
    real, cached = row["real_loads"], row["cached_loads"]
    loads = {"real": real, "cached": cached, "disk": real - cached, "dummy": row["dummy_loads"]}
    return {"planned_s": round(float(row["estimate_s"]), 1), "planned_loads": loads}


def remaining_s(plan: Mapping[str, Any], after: str | None, elapsed_in_current: float) -> float:
    """ETA: the estimates of the stages after `after` plus what is left of `after`'s."""
    total, seen = 0.0, after is None
    for r in plan.get("stages", []):
        if seen:
            total += r["estimate_s"]
        elif r["name"] == after:
            seen = True
            total += max(0.0, r["estimate_s"] - elapsed_in_current)
    return total


def overrun_s(plan: Mapping[str, Any], stage: str | None, elapsed_in_current: float) -> float:
    """How far the running stage is past its estimate (0 within it): the ETA then holds
    only the later stages, and says so."""
    for r in plan.get("stages", []):
        if r["name"] == stage:
            return max(0.0, elapsed_in_current - r["estimate_s"])
    return 0.0
