"""The tune plan against a real tune's records: SGLang 0.5.17 at TP 1 on one H100, the 8B
shape behind the weight cache (tests/fixtures/sglang-0.5.17-h100-tune8b). The plan is made
from the daemon history that tune saw at each point, and compared with what each stage
then took."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fastverify.experiments.tune import plan

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang-0.5.17-h100-tune8b"


def _json(name: str) -> Any:
    return json.loads((FIX / name).read_text())


def _facts(history: list[dict[str, Any]], accept_known: bool) -> plan.PlanFacts:
    """What the real tune was given: 3 profiles that stand for one server at TP 1 (the serving
    nccl-default), 1 finalist, 1 x 10 s per row, the cache's own read of the checkpoint."""
    read_s = _json("status-first-start.json")["weight_cache"]["ready_s"]
    return plan.PlanFacts(candidates=1, skips={"derive_tuner": "1 GPU"}, finalists=1,
                          budget_s=None, repeats=1, duration_s=10.0, accept_known=accept_known,
                          history=history, cached=True, checkpoint_read_s=read_s,
                          serving_candidate=True)  # fmt: skip


def _stage(p: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in p["stages"] if s["name"] == name)


def test_the_plan_prices_the_real_tunes_loads_from_what_the_daemon_recorded() -> None:
    history = [r for r in _json("history.json") if r["kind"] != "decision"]
    actual = {s["name"]: s for s in _json("decision.json")["stages"]}
    assert [r["weights"] for r in history] == ["real", "dummy", "real"]  # cached, dummy, disk

    # at the start: only the first start (kernel builds included) is recorded. The serving
    # baseline is the trial's first row (no load); its one load is the dummy EAGLE-3 one.
    start = plan.make_plan(_facts(history[:1], accept_known=True))
    trial = _stage(start, "trial")
    assert (trial["real_loads"], trial["dummy_loads"]) == (0, 1)
    assert actual["trial"]["loads"] == {"real": 0, "cached": 0, "disk": 0, "dummy": 1}
    assert actual["trial"]["wall_s"] <= trial["estimate_s"] <= 2 * actual["trial"]["wall_s"]

    # at confirm: the dummy load is recorded; the real EAGLE-3 load from disk is its
    # engine's part plus the cache's own read of the checkpoint (not the 10-minute default)
    confirm = _stage(plan.make_plan(_facts(history[:2], accept_known=False)), "confirm")
    engine = history[1]["duration_s"] - history[1]["weight_load"]["seconds"]
    read_s = _json("status-first-start.json")["weight_cache"]["ready_s"]
    assert "the weight cache's read of the checkpoint" in confirm["source"]
    assert confirm["estimate_s"] == pytest.approx(engine + read_s + 1 * (10.0 + 2.0))
    assert actual["confirm"]["loads"]["disk"] == confirm["real_loads"] == 1
    assert actual["confirm"]["wall_s"] <= confirm["estimate_s"] <= 1.5 * actual["confirm"]["wall_s"]


def test_a_first_start_prices_nothing_once_a_later_load_is_recorded() -> None:
    history = [r for r in _json("history.json") if r["kind"] != "decision"]
    first = history[0]
    assert first["kind"] == "start" and first["weight_load"]["source"] == "cache"
    # the first start's CUDA-graph capture (kernel builds) against a later load's
    assert (
        first["weight_load"]["phases"]["cuda_graph"]
        > 3 * history[1]["weight_load"]["phases"]["cuda_graph"]
    )
    loads = plan.load_times(history[:2])
    # a cached load: the later dummy load's engine part (the weights mapped), not the start
    assert loads["cached"][0] < first["duration_s"] / 2
    assert loads["cached"][1].startswith("recorded: the engine's part of 1 daemon load(s)")
