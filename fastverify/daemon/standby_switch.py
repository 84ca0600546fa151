"""A standby switch (`[frontdoor] mode = "standby"`, when the memory rule says both engines
fit): the new engine starts beside the serving one on the other internal port, mapping the
same weights through the part that shares them (parts.Sharing), and is verified as any
start (starting.py); then the
front door cuts over to it, the old engine's requests in flight drain and the old engine
stops. The daemon stays READY throughout: the old engine serves until the new one does.

A new engine that fails (a capture failure, a refusal, a failed verification, a cancel)
never took traffic: it is stopped, and the old engine simply serves on; the result says
`rolled_back` (or `cancelled`) with no downtime. Only when the old engine itself died
meanwhile does the failure take the hold path's rollback (rollback.py).

Records (launcher.py): the standby is in engine-standby.pid until it serves; its hand-over
writes engine.pid naming it and the old engine as `retiring` in one atomic write, and the
old engine's stop removes `retiring`. A daemon killed at any point adopts the one engine
engine.pid names and stops the other (reconcile.py `settle_standby`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastverify.daemon.core import Core
from fastverify.daemon.failures import Failure
from fastverify.daemon.frontdoor import DoorSteps, engine_port
from fastverify.daemon.launcher import EngineHandle, with_port
from fastverify.daemon.operations import Operation, OpResult
from fastverify.daemon.parts import Part
from fastverify.daemon.rollback import RollbackSteps
from fastverify.daemon.starting import Starts
from fastverify.daemon.states import State
from fastverify.frontdoor.standby import Fit, with_pool

if TYPE_CHECKING:
    from fastverify.profiles.model import Profile


class StandbySteps:
    """See the module docstring."""

    def __init__(self, core: Core, starts: Starts, rollback: RollbackSteps) -> None:
        self.c = core
        self.starts = starts
        self.rollback = rollback

    def switch(
        self,
        op: Operation,
        profile: Profile,
        argv: list[str],
        timeout_s: float | None,
        prev: dict[str, Any],
        planner: Part,
        fit: Fit,
    ) -> OpResult:
        """Switch `op` beside the serving engine, as `planner` (the part whose
        `plan_switch` said standby: the front door, which cuts over and drains) planned."""
        c = self.c
        old = c.current
        assert old is not None  # the plan says standby only beside a serving engine
        if not isinstance(planner, DoorSteps):
            raise TypeError(f"a standby switch is the front door's plan, not {planner.NAME}'s")
        door = planner
        port = door.standby_port()
        argv = with_port(argv, port)
        argv = with_pool(argv, fit)
        c.say(f"{op.kind}: starting {op.profile}/{op.mode} beside {old.profile}/{old.mode} "
              f"on port {port}; {old.profile}/{old.mode} serves meanwhile")  # fmt: skip
        outcome = self.starts.start_beside(op, profile, argv, timeout_s, op.cancel)
        if isinstance(outcome, Failure):
            return self._kept(op, door, outcome, prev)
        h = outcome
        memory = h.parts.get("memory")
        if memory is not None:  # what its `Load weight begin` saw beside the old engine
            memory.beside = fit.beside
            memory.capped_from = fit.cold_tokens  # its pool, a share of that cold one
        with c._lock:  # the point of no return (as the hold path's): a later cancel is refused
            late = op.cancel.is_set()
            op.committed = not late
        if late:
            c.stop_engine(h, "failed")
            self.starts.keep_failed_tail(op, h)
            return self._kept(op, door, Failure("cancelled", "operation cancelled"), prev)
        c.launcher.promote(h, old)
        with c._lock:
            c.current = h
            old.serving = False  # its exit from now on is its stop, not a crash
            c.active = {"profile": op.profile, "mode": op.mode}
            if c.state != State.READY:  # the old engine crashed meanwhile (BACKOFF)
                c.set_state(State.STARTING, f"standby {op.profile}/{op.mode}")
                c.set_state(State.VERIFYING, "standby engine verified")

        def retire(new: EngineHandle) -> None:
            door.drain_port(op, engine_port(old.url))
            t0 = time.monotonic()
            c.stop_engine(old, "stopped")
            op.phases["stop"] = round(time.monotonic() - t0, 4)
            c.launcher.retired(new)
            door.cuts_since_cut_over(op, engine_port(old.url))

        return self.starts.succeeded(op, h, prev, after_serving=retire)

    def _kept(
        self, op: Operation, door: DoorSteps, failure: Failure, prev: dict[str, Any]
    ) -> OpResult:
        """The standby failed or was cancelled: the old engine serves on (or, when it died
        meanwhile, the hold path's rollback puts the last good profile back)."""
        c = self.c
        h = c.current
        if h is None or not (h.serving and h.alive()) or c.state != State.READY:
            return self.rollback.failed(op, failure, prev)
        cancelled = failure.reason == "cancelled"
        if not cancelled:  # the serving engine's own state is fine: a past failure for status
            c.record_failure(failure, op, kept_serving=True)
        door.kept(op)
        back = {"profile": prev.get("profile"), "mode": prev.get("mode")}
        served = f"{back['profile']}/{back['mode']} served on (never stopped)"
        base: dict[str, Any] = {
            "reason": failure.reason,
            "log": failure.log,
            "line": failure.line,
            "previous": back,
        }
        if op.failed_engine is not None:
            base["log_tail"] = list(op.failed_engine["lines"])
        if cancelled:
            message = f"{op.kind} to {op.profile}/{op.mode} cancelled; {served}"
            return c.result(op, "cancelled", message=message, **base)
        message = (f"{op.profile}/{op.mode} failed: {failure.reason}; the standby engine never "
                   f"took traffic and {served} (log: {failure.log})")  # fmt: skip
        return c.result(op, "rolled_back", message=message, rolled_back_to=back, **base)
