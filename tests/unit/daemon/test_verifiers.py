"""The verifier protocol and its list (daemon/verifier.py, daemon/checks.py): a verifier added
to the list runs in each of its places, one that fails makes a switch roll back as any
failed verification does, and a re-run reports every verifier."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from fastverify.daemon.checks import default_checks
from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.logs import LineFacts
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.reverify import rerun
from fastverify.daemon.states import State
from fastverify.daemon.verifier import Check, Context, Finding, Plan, Problem, Verifiers
from tests.support.daemon_fakes import build


class Spy(Check):
    """Records where it ran; fails verification of `fail_for`, refuses `refuse_for`."""

    name = "spy"

    def __init__(self, fail_for: str = "", refuse_for: str = "") -> None:
        self.fail_for, self.refuse_for = fail_for, refuse_for
        self.plans: list[Plan] = []
        self.verified: list[tuple[str, bool]] = []

    def refuse(self, plan: Plan) -> Problem | None:
        self.plans.append(plan)
        if plan.name == self.refuse_for:
            return Problem(422, f"spy refuses {plan.name}", {"reason": "spy_refused"})
        return None

    def verify(self, h: EngineHandle, ctx: Context) -> Finding:
        self.verified.append((h.profile, ctx.rerun))
        ctx.details["spy"] = {"pid": h.pid}
        if h.profile == self.fail_for:
            return self.failed(Failure("spy_mismatch", f"spy: {h.profile} drifted"), pid=h.pid)
        return self.ok("spy: fine", pid=h.pid)


def _start(ctl: Any) -> None:
    assert ctl.request("start", "ring", "baseline").wait(10)["result"] == "ok"


def test_a_verifier_added_to_the_list_runs_before_the_load_and_after_ready(
    tmp_path: Path,
) -> None:
    spy = Spy()
    ctl, launcher, _ = build(tmp_path, checks=(spy,))
    _start(ctl)
    result = ctl.request("switch", "tree", None).wait(10)
    assert result["result"] == "ok"
    assert [(p.kind, p.name, p.mode) for p in spy.plans] == [
        ("start", "ring", "baseline"),
        ("switch", "tree", "baseline"),
    ]
    assert spy.verified == [("ring", False), ("tree", False)]
    assert result["verify"]["spy"] == {"pid": launcher.started[-1].pid}  # its record


def test_a_refusal_changes_nothing(tmp_path: Path) -> None:
    ctl, launcher, _ = build(tmp_path, checks=(Spy(refuse_for="tree"),))
    _start(ctl)
    n = len(launcher.started)
    with pytest.raises(RequestError) as err:
        ctl.request("switch", "tree", None)
    assert (err.value.status, err.value.body["error"]) == (422, "spy refuses tree")
    assert err.value.reason == "spy_refused"
    assert len(launcher.started) == n and not launcher.stopped  # nothing stopped or started
    assert (ctl.state, ctl.active["profile"]) == (State.READY, "ring")


def test_a_verifier_that_fails_makes_the_switch_roll_back(tmp_path: Path) -> None:
    spy = Spy(fail_for="tree")
    ctl, launcher, _ = build(tmp_path, checks=(spy,))
    _start(ctl)
    result = ctl.request("switch", "tree", None).wait(10)
    assert result["result"] == "rolled_back"
    assert result["reason"] == "spy_mismatch"
    assert result["rolled_back_to"] == {"profile": "ring", "mode": "baseline"}
    assert "tree/baseline failed: spy_mismatch; rolled back to ring/baseline" in result["message"]
    assert (ctl.state, ctl.active["profile"]) == (State.READY, "ring")
    assert ctl.last_failure["reason"] == "spy_mismatch"
    tree = [h for h in launcher.started if h.profile == "tree"]
    assert tree and tree[0] in launcher.stopped  # the engine that failed was stopped
    assert spy.verified == [("ring", False), ("tree", False), ("ring", False)]


def test_a_start_stops_at_the_first_failure_a_rerun_reports_every_verifier(
    tmp_path: Path,
) -> None:
    first, second = Spy(fail_for="ring"), Spy()
    second.name = "second"
    h = EngineHandle("e", 1, 1, None, [], tmp_path / "log", "ring", "baseline", "u", {})
    verifiers = Verifiers([first, second])
    verdict = verifiers.verify(h)
    assert verdict.failure is not None and verdict.failure.reason == "spy_mismatch"
    assert [f.name for f in verdict.findings] == ["spy"] and second.verified == []
    verdict = verifiers.verify(h, rerun=True)
    assert [(f.name, f.status) for f in verdict.findings] == [("spy", "failed"), ("second", "ok")]
    assert verdict.findings[0].to_dict()["reason"] == "spy_mismatch"


class NoVerify(Check):
    name = "refuses-only"


def test_a_verifier_with_nothing_to_check_after_ready_is_left_out_of_the_verdict(
    tmp_path: Path,
) -> None:
    h = EngineHandle("e", 1, 1, None, [], tmp_path / "log", "ring", "baseline", "u", {})
    verdict = Verifiers([NoVerify(), Spy()]).verify(h, rerun=True)
    assert verdict.ok and [f.name for f in verdict.findings] == ["spy"]


class FallbackLine(Check):
    name = "lines"

    def on_line(self, h: EngineHandle, line: str, facts: LineFacts) -> Failure | None:
        return Failure("fell_back", line) if "fell back" in line else None


def test_a_failure_read_in_a_line_ends_the_readiness_wait(tmp_path: Path) -> None:
    h = EngineHandle("e", 1, 1, None, [], tmp_path / "log", "ring", "baseline", "u", {})
    h.wake = threading.Event()
    verifiers = Verifiers([FallbackLine()])
    verifiers.on_line(h, "loading", LineFacts(None, None))
    assert h.line_failure is None and not h.wake.is_set()
    verifiers.on_line(h, "TP0 fell back to NCCL", LineFacts(None, None))
    assert h.line_failure is not None and h.line_failure.reason == "fell_back"
    assert h.wake.is_set()
    verifiers.on_line(h, "fell back again", LineFacts(None, None))
    assert h.line_failure.message == "TP0 fell back to NCCL"  # the first one stands


def test_rerun_on_the_serving_engine_and_refused_when_nothing_serves(tmp_path: Path) -> None:
    spy = Spy()
    ctl, _, _ = build(tmp_path, checks=(spy,))
    with pytest.raises(RequestError) as err:
        rerun(ctl)
    assert err.value.status == 409 and err.value.body["busy"] is False
    assert "no engine is serving (state STOPPED)" in err.value.body["error"]
    _start(ctl)
    out = rerun(ctl)
    assert out["ok"] is True and out["profile"] == "ring"
    assert [v["name"] for v in out["verifiers"]] == ["env", "spy"]
    assert spy.verified[-1] == ("ring", True)
    spy.fail_for = "ring"
    out = rerun(ctl)
    assert (out["ok"], out["reason"]) == (False, "spy_mismatch")
    assert out["verifiers"][1]["evidence"] == {"pid": ctl.current.pid}
    assert ctl.state == State.READY  # a re-run changes nothing


def test_the_daemon_list_in_order() -> None:
    checks = default_checks(None, None)  # type: ignore[arg-type]
    assert [c.name for c in checks] == [
        "argv", "forced", "p2p", "env", "nccl", "adaptive", "tuner", "allreduce", "profile",
    ]  # fmt: skip
