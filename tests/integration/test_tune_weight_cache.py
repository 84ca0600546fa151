"""`fastverifyctl tune` with the daemon's weight cache on (weight_cache = "on", the sim's cache
daemon): the plan prices the trial's baselines as cached loads and says so, the trial runs them
on the cache's real weights (real-weights rows with their repeats and CI95), confirm reloads no
finalist (the trial's rows are the confirmation), the only loads from disk are the speculative
ones (the cache exports no draft model), and the cache process keeps its PID through it all."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import DaemonHarness
from tests.support.tune import CONFIG, MEASURE, TP, read_journal

PROFILES = ("nccl-default", "ring-ll", "ring-simple", "tree-ll")
SPECULATIVE = ("eagle3", "adaptive")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tune-cache")
    config = {**CONFIG, "server": {"weight_cache": "on"}}
    with DaemonHarness(tmp, tp_size=TP, sim_load_seconds=3.0, config=config) as d:
        before = d.status()
        t0 = time.time()
        out = d.tmp / "tune-out"
        proc = d.ctl("tune", "--accept-length", "2.0", "--json", *MEASURE, "--profiles",
                     ",".join(PROFILES), "--output", str(out), timeout=1200)  # fmt: skip
        yield {
            "proc": proc,
            "before": before,
            "t0": t0,
            "result": json.loads(proc.stdout) if proc.stdout.strip() else None,
            "status": d.status(),
            "history": d.client.get("/v1/history"),
            "baselines": d.client.get("/v1/baselines"),
            "journal": read_journal(d),
        }


def _stage(tuned: dict[str, Any], name: str) -> dict[str, Any]:
    (rec,) = [r for r in tuned["journal"]
              if r.get("event") == "stage_finished" and r.get("name") == name]  # fmt: skip
    return rec["data"]


def _loads(tuned: dict[str, Any]) -> list[dict[str, Any]]:
    """The engine starts the daemon recorded during the tune, in order."""
    kinds = ("start", "switch", "mode", "restart", "crash_restart")
    return [r for r in tuned["history"]
            if r.get("kind") in kinds and (r.get("started_at") or 0) >= tuned["t0"]]  # fmt: skip


def test_the_tune_decides_and_the_cache_keeps_its_pid(tuned: dict[str, Any]) -> None:
    proc = tuned["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert tuned["result"]["decision"]["applied"] is True
    wc_before, wc_after = tuned["before"]["weight_cache"], tuned["status"]["weight_cache"]
    assert wc_before["state"] == wc_after["state"] == "ready", (wc_before, wc_after)
    assert wc_after["pid"] == wc_before["pid"] and wc_after["restarts"] == wc_before["restarts"]


def test_the_plan_names_the_cached_loads(tuned: dict[str, Any]) -> None:
    (plan,) = [r["plan"] for r in tuned["journal"] if r.get("event") == "plan"][:1]
    assert plan["cached"] is True
    trial = next(s for s in plan["stages"] if s["name"] == "trial")
    n = plan["trial_candidates"]
    # what serves (nccl-default, a candidate) is the trial's first row: no load for it
    assert tuned["before"]["profile"] == "nccl-default" and tuned["before"]["mode"] == "baseline"
    assert trial["cached_loads"] == trial["real_loads"] == n - 1
    assert "(the serving one first: no load)" in trial["units"]
    assert trial["dummy_loads"] == plan["finalists"]  # the EAGLE-3 trials only
    assert trial["source"].startswith("cached load: ")
    err = tuned["proc"].stderr
    assert f"{n} baseline(s) on cached real weights x (" in err
    assert " cached), " in err  # the total's "loads planned: N real (C cached), ..."
    confirm = next(s for s in plan["stages"] if s["name"] == "confirm")
    assert "no reload" in confirm["units"] and confirm["cached_loads"] == 0


def test_trial_rows_are_real_weights_from_the_cache_and_confirm_reloads_none(
    tuned: dict[str, Any],
) -> None:
    trial, confirm = _stage(tuned, "trial"), _stage(tuned, "confirm")
    base = [r for r in trial["rows"] if r["mode"] == "baseline"]
    assert {r["profile"] for r in base} == set(PROFILES)
    assert all(r["weights"] == "real" for r in base), base
    ok = [r for r in base if r["status"] == "ok"]
    assert ok and all(len(r["samples"]) == 2 and r["ci95"] for r in ok), ok  # --repeats 2
    # the profile windows still came with them: the sim's 122 all-reduces per step
    assert all(r["allreduce_per_step"] == 122 for r in ok), ok
    eagle = [r for r in trial["rows"] if r["mode"] == "eagle3"]
    assert eagle and all(r["weights"] == "dummy" for r in eagle), eagle
    assert all(r.get("break_even_accept_length") for r in eagle if r["status"] == "ok"), (
        eagle,
        tuned["baselines"],
    )
    # confirm's rows are the finalists' trial rows: nothing reloaded
    assert confirm["from_trial"] is True
    report = Path(tuned["result"]["report"]).read_text()
    assert "(cached real weights):\nnone was reloaded." in report
    by_profile = {r["profile"]: r for r in base}
    assert [r["profile"] for r in confirm["rows"]] == confirm["order"]
    for r in confirm["rows"]:
        assert r["samples"] == by_profile[r["profile"]]["samples"]
    loads = _loads(tuned)
    ends = [r["ts"] for r in tuned["journal"] if r.get("event") == "stage_finished"]
    trial_end = ends[[r.get("name") for r in tuned["journal"]
                      if r.get("event") == "stage_finished"].index("trial")]  # fmt: skip
    during_confirm = [r for r in loads if r["started_at"] >= trial_end and r["mode"] == "baseline"
                      and r["profile"] in confirm["finalists"]
                      and r is not loads[-1]]  # the decision's own load may follow  # fmt: skip
    assert during_confirm == [], during_confirm


def test_every_baseline_load_came_from_the_cache_and_only_speculation_read_disk(
    tuned: dict[str, Any],
) -> None:
    loads = _loads(tuned)
    real = [r for r in loads if r.get("weights") != "dummy"]
    assert real, loads
    for r in real:
        source = (r.get("weight_load") or {}).get("source")
        if r["result"] != "ok":  # tree-ll's failed capture: no weights record, never disk
            assert r["profile"] == "tree-ll" and source in (None, "cache"), r
        elif r["mode"] in SPECULATIVE:
            assert source == "disk", r
        else:
            assert source == "cache", r
    # one cached load per trial baseline that came up (tree-ll fails capture and rolls
    # back), at most one more (the decision's)
    baseline = [r for r in real if r["mode"] == "baseline" and r["result"] == "ok"]
    assert len(PROFILES) - 1 <= len(baseline) <= len(PROFILES), baseline

    # the result counts its real loads by where the weights came from, as the plan does
    # (a rolled-back start is two loads: the attempt and the rollback)
    def weight(source: str | None) -> int:
        return sum(2 if r["result"] == "rolled_back" else 1 for r in real
                   if (r.get("weight_load") or {}).get("source") == source)  # fmt: skip

    counted = tuned["result"]["loads"]
    assert (counted["cached"], counted["disk"]) == (weight("cache"), weight("disk")) != (0, 0)
    assert counted["real"] == weight("cache") + weight("disk") + weight(None), counted
    dummy = [r for r in loads if r.get("weights") == "dummy"]
    assert dummy and all(r["mode"] == "eagle3" for r in dummy), dummy


def test_each_stage_counts_its_loads_by_where_the_weights_came_from(
    tuned: dict[str, Any],
) -> None:
    """The trial: cached baselines and dummy EAGLE-3 loads, as it planned them; confirm: the
    EAGLE-3 load from disk exactly when it planned one (the trial's break-even said so)."""
    stages = {s["name"]: s for s in tuned["result"]["stages"]}
    trial, confirm = stages["trial"], stages["confirm"]
    n, finalists = len(PROFILES), _plan(tuned)["finalists"]
    planned = n - 1  # what served before is measured first, with no load
    assert trial["planned_loads"] == {"real": planned, "cached": planned, "disk": 0,
                                      "dummy": finalists}  # fmt: skip
    # tree-ll's capture fails and rolls back (its own load never comes up; none from disk)
    assert planned - 1 <= trial["loads"]["cached"] <= trial["loads"]["real"] <= planned + 1, trial
    assert trial["loads"]["disk"] == 0 and trial["loads"]["dummy"] == finalists, trial
    eagle3 = _stage(tuned, "confirm")["eagle3"] is not None
    assert confirm["planned_loads"]["disk"] == confirm["loads"]["disk"] == int(eagle3), confirm
    assert confirm["loads"]["cached"] == confirm["loads"]["dummy"] == 0
    assert confirm["planned_s"] > 0 if eagle3 else confirm["planned_s"] == 0.0


def _plan(tuned: dict[str, Any]) -> dict[str, Any]:
    return next(r["plan"] for r in tuned["journal"] if r.get("event") == "plan")
