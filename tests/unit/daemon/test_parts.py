"""The daemon's parts (daemon/parts.py) over a controller of fakes: each has its status
section, the all-reduce part feeds its own exporter source from EngineUp, the speculation
part feeds the hub's speculation source (records and plans, earlier runs' at start-up); at
most one part plans a switch and gives its figures, and the switch machine names no part."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fastverify.daemon import acceptance
from fastverify.daemon import events as ev
from fastverify.daemon.allreduce_part import AllreducePart
from fastverify.daemon.parts import BasePart, Fit, switch_figures, switch_plan
from fastverify.daemon.speculation_part import SpeculationPart
from fastverify.exporters.hub import MetricsHub
from tests.support.daemon_fakes import build
from tests.support.hub import scrape, value


def test_every_part_has_a_name_a_section_and_the_section_keys(tmp_path: Path) -> None:
    ctl, _, _ = build(tmp_path)
    names = [part.STATUS for part in ctl.parts]
    assert names == ["weight_cache", "allreduce", "speculation", None, "frontdoor"]  # tuner: none
    for part in ctl.parts[1:]:  # the weight cache's reads the release's facts: test_weights.py
        sec = part.status()
        if sec is not None:  # speculation: no drafting mode serves; the tuner has no section
            assert isinstance(sec["summary"], list) and isinstance(sec["shared_loads"], list)
        assert bool(part.SECTION) == (part.STATUS is not None)  # a section is documented


class _Planner(BasePart):
    NAME = "planner"

    def plan_switch(self, op: Any) -> Fit | None:
        return Fit("hold", f"{self.NAME} holds")

    def switch_figures(self, op: Any) -> dict[str, Any] | None:
        return {"mode": self.NAME}


class _Other(_Planner):
    NAME = "other"


def test_at_most_one_part_plans_a_switch_and_gives_its_figures() -> None:
    op = SimpleNamespace(kind="switch")
    quiet, planner = BasePart(None), _Planner(None)
    assert switch_plan([quiet], op) is None and switch_figures([quiet], op) is None
    got = switch_plan([quiet, planner], op)
    assert got is not None and got[0] is planner and got[1].why == "planner holds"
    assert switch_figures([planner, quiet], op) == {"mode": "planner"}
    with pytest.raises(RuntimeError, match="planner, other"):
        switch_plan([planner, quiet, _Other(None)], op)
    with pytest.raises(RuntimeError, match="switch figures"):
        switch_figures([planner, _Other(None)], op)


DAEMON = Path(__file__).resolve().parents[3] / "fastverify" / "daemon"


def _door_names(tree: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and "door" in n.id.lower()]


def test_the_switch_machine_calls_the_parts_and_never_the_front_door_by_name() -> None:
    for name in ("core", "crashes", "starting", "operations", "rollback", "recovery"):
        tree = ast.parse((DAEMON / f"{name}.py").read_text())
        attrs = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
        assert not _door_names(tree) and not [a for a in attrs if "door" in a], name
    tree = ast.parse((DAEMON / "controller.py").read_text())
    parts = next(n for n in tree.body if isinstance(n, ast.AnnAssign)
                 and getattr(n.target, "id", "") == "PARTS")  # fmt: skip
    assert _door_names(parts) == ["DoorSteps"]  # one entry of the list
    rest = [n for n in tree.body if n is not parts and not isinstance(n, ast.ImportFrom)]
    assert not [x for n in rest for x in _door_names(n)]


def test_the_allreduce_source_follows_engine_up_and_down(tmp_path: Path) -> None:
    ctl, _, _ = build(tmp_path)
    hub, bus = MetricsHub(), ev.EventBus()
    part = next(p for p in ctl.parts if isinstance(p, AllreducePart))
    part.attach(bus, hub)
    hub.set_engine(True, "pcie-ipc", "baseline", {}, "sglang", "http://127.0.0.1:1")
    served = {"allreduce": {"allreduce": {"backend": "pcie_ipc", "max_bytes": 8 << 20}}}
    bus.publish(ev.EngineUp("pcie-ipc", "baseline", "sglang", "http://127.0.0.1:1", {}, 7,
                            "e7", 1.0, parts=served))  # fmt: skip
    labels = {"profile": "pcie-ipc", "mode": "baseline", "backend": "pcie_ipc",
              "max_bytes": str(8 << 20)}  # fmt: skip
    assert value(scrape(hub), "fastverify_allreduce_backend_info", **labels) == 1.0
    hub.set_engine(False, "pcie-ipc", "baseline", {}, "sglang", None)
    assert not any(k[0] == "fastverify_allreduce_backend_info" for k in scrape(hub))


class _Speculation:
    def __init__(self) -> None:
        self.records: list[Any] = []
        self.plans: list[Any] = []

    def on_acceptance(self, rec: Any) -> None:
        self.records.append(rec)

    def set_plan(self, plan: Any) -> None:
        self.plans.append(plan)


def test_the_speculation_part_feeds_records_and_plans_and_earlier_runs_at_start_up(
    tmp_path: Path,
) -> None:
    ctl, _, _ = build(tmp_path)
    part = next(p for p in ctl.parts if isinstance(p, SpeculationPart))
    hub, bus = SimpleNamespace(speculation=_Speculation()), ev.EventBus()
    part.attach(bus, hub)
    rec = {"profile": "ring-ll", "mode": "eagle3", "steps": 3, "histogram": [1, 2]}
    bus.publish(ev.AcceptanceRecorded(rec))
    bus.publish(ev.PlanStored({"accept_steps": 3}))
    assert hub.speculation.records == [rec] and hub.speculation.plans == [{"accept_steps": 3}]
    ctl.store.save_json(acceptance.PLAN_FILE, {"accept_steps": 2})  # an earlier run's plan
    assert part.adopt() is None
    assert hub.speculation.plans[-1] == {"accept_steps": 2}
    unattached = SpeculationPart(ctl)  # no exporter: nothing to feed, no section
    assert unattached.adopt() is None and unattached.status() is None
