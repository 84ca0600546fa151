"""Leaving FAILED by policy (fastverify.daemon.recovery), with the fake launcher and a fake
clock: the schedule (first delay, doubling to the cap), the limit, what counts as a retry,
when the count is forgotten, what status says. The real daemon does it end to end in
tests/integration/test_daemon_hang.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastverify.daemon import events as ev
from fastverify.daemon.recovery import EXIT_RECOVERY_SPENT, delay
from fastverify.daemon.states import State
from tests.support.daemon_fakes import build


def failed_controller(tmp_path: Path, retries: int, **restart: Any) -> tuple[Any, Any, Any, list]:
    """A controller serving ring, then FAILED by a crash with no restart left (burst 0)."""
    ctl, launcher, seen = build(tmp_path, burst=0)
    ctl.cfg.restart.recover_retries = retries
    ctl.cfg.restart.recover_backoff_s = [10.0, 25.0]
    ctl.cfg.daemon.declarative = False
    for k, v in restart.items():
        setattr(ctl.cfg.restart, k, v)
    clock = [1000.0]
    ctl.clock = lambda: clock[0]
    assert ctl.request("switch", "ring", None).wait(10)["result"] == "ok"
    h = launcher.started[-1]
    h.serving = True
    seen.clear()
    launcher.crash(h)
    seen.wait_for(lambda e: isinstance(e, ev.OperationFinished))
    ctl.slot.wait_idle(10)  # the record is published just before the slot is let go
    assert ctl.state == State.FAILED
    return ctl, launcher, seen, clock


def finished(ctl: Any, seen: Any, kind: str, n: int) -> list:
    """The first `n` finished operations of `kind`, once the slot is free again."""
    seen.wait_for(lambda e: sum(isinstance(x, ev.OperationFinished) and x.kind == kind
                                for x in seen) >= n)  # fmt: skip
    ctl.slot.wait_idle(10)
    return [e for e in seen if isinstance(e, ev.OperationFinished) and e.kind == kind]


def test_delay_doubles_to_the_cap() -> None:
    assert [delay((10.0, 25.0), n) for n in (1, 2, 3, 4)] == [10.0, 20.0, 25.0, 25.0]


def test_failed_retries_the_last_good_after_the_backoff(tmp_path: Path) -> None:
    ctl, launcher, seen, clock = failed_controller(tmp_path, retries=2)
    started = len(launcher.started)
    ctl.recovery_tick()  # schedules the first retry 10 s out
    st = ctl.recovery_status()
    assert (st["retries"], st["limit"], st["next_in_s"], st["spent"]) == (0, 2, 10.0, False)
    clock[0] += 9.9
    ctl.recovery_tick()
    assert len(launcher.started) == started and ctl.state == State.FAILED  # not yet
    clock[0] += 0.2
    ctl.recovery_tick()
    (rec,) = finished(ctl, seen, "recover", 1)
    assert rec.result == "ok" and ctl.state == State.READY
    assert launcher.started[-1].profile == "ring"  # the last good profile
    st = ctl.recovery_status()
    assert st["retries"] == 1 and st["last"].startswith("ok:") and st["next_in_s"] is None


def test_failing_retries_double_their_delay_then_the_budget_is_spent(tmp_path: Path) -> None:
    ctl, launcher, seen, clock = failed_controller(tmp_path, retries=2)
    launcher.plan["ring"] = "cuda_oom"  # the last good profile no longer starts
    ctl.recovery_tick()
    clock[0] += 10.0
    ctl.recovery_tick()
    finished(ctl, seen, "recover", 1)
    assert ctl.state == State.FAILED
    ctl.recovery_tick()  # schedules retry 2: twice the first delay
    assert ctl.recovery_status()["next_in_s"] == 20.0
    clock[0] += 20.0
    ctl.recovery_tick()
    recs = finished(ctl, seen, "recover", 2)
    assert [(r.result, r.record["reason"]) for r in recs] == [("failed", "cuda_oom")] * 2
    ctl.recovery_tick()
    st = ctl.recovery_status()
    assert st["spent"] and st["retries"] == 2 and ctl.state == State.FAILED
    n = len(launcher.started)
    clock[0] += 1e6
    ctl.recovery_tick()
    assert len(launcher.started) == n  # spent: no more retries
    assert ctl.recovery_exit_code() is None  # not declarative


def test_the_count_is_forgotten_after_a_healthy_window_or_an_operators_switch(
    tmp_path: Path,
) -> None:
    ctl, _launcher, seen, clock = failed_controller(tmp_path, retries=1, window_s=60.0)
    ctl.recovery_tick()
    clock[0] += 10.0
    ctl.recovery_tick()
    finished(ctl, seen, "recover", 1)
    assert ctl.state == State.READY and ctl.recovery.attempts == 1
    ctl.recovery_tick()  # READY seen at this clock time
    clock[0] += 59.0
    ctl.recovery_tick()
    assert ctl.recovery.attempts == 1  # not a whole window yet
    clock[0] += 2.0
    ctl.recovery_tick()
    assert ctl.recovery.attempts == 0
    # an operator's successful switch forgets it too
    ctl.recovery.attempts = 1
    assert ctl.request("switch", "tree", None).wait(10)["result"] == "ok"
    assert ctl.recovery.attempts == 0


def test_declarative_retries_the_declared_profile_and_exits_under_systemd(
    tmp_path: Path, monkeypatch: Any
) -> None:
    ctl, launcher, seen, clock = failed_controller(tmp_path, retries=1)
    ctl.cfg.daemon.declarative = True
    ctl.cfg.daemon.default_profile = "tree"  # the declared profile, not the last good one
    launcher.plan["tree"] = "nccl_error"
    ctl.recovery_tick()
    clock[0] += 10.0
    ctl.recovery_tick()
    (rec,) = finished(ctl, seen, "recover", 1)
    assert (rec.record["profile"], rec.result) == ("tree", "failed")
    ctl.recovery_tick()
    assert ctl.recovery_status()["spent"]
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert ctl.recovery_exit_code() is None  # Kubernetes: /livez says it
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    assert ctl.recovery_exit_code() == EXIT_RECOVERY_SPENT == 3


def test_no_retries_configured_leaves_failed_alone(tmp_path: Path) -> None:
    ctl, launcher, _seen, clock = failed_controller(tmp_path, retries=0)
    n = len(launcher.started)
    for _ in range(3):
        ctl.recovery_tick()
        clock[0] += 1e6
    assert len(launcher.started) == n and ctl.state == State.FAILED
    assert not ctl.recovery_status()["spent"]
