"""The controller's failure steps: an operation failed or was cancelled -> record it, FAILED
-> ROLLING_BACK to the last good (profile, mode) (to the previous one for a cancel) ->
READY, or FAILED when that cannot start either; the operation's result says which.

A step over the controller's core (core.py), as crashes.py is: its state and resolver, and
the engine start (starting.py). A rollback streams into the operation that failed, as a
`Step` under the target's (profile, mode); only shutdown stops it, since the operation's
own cancel may be its cause.
"""

from __future__ import annotations

import logging
from typing import Any

from fastverify.daemon.core import Core
from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.operations import Operation, OpResult
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.starting import Starts
from fastverify.daemon.states import State


class RollbackSteps:
    """A failed or cancelled operation's way back, over the controller's core."""

    def __init__(self, core: Core, starts: Starts) -> None:
        self.c = core
        self.starts = starts

    def failed(self, op: Operation, failure: Failure, prev: dict[str, Any]) -> OpResult:
        """The result of `op` that failed (or was cancelled) with `failure`, after putting
        back what should serve: the last good (profile, mode), the previous one on a cancel."""
        cancelled = op.cancel_reason == "cancelled" and not self.c.shutting_down.is_set()
        base: dict[str, Any] = {
            "reason": failure.reason,
            "message": failure.message,
            "log": failure.log,
            "line": failure.line,
            "previous": {"profile": prev.get("profile"), "mode": prev.get("mode")},
        }
        if op.failed_engine is not None:  # the failed (or cancelled) engine's own last lines
            base["log_tail"] = list(op.failed_engine["lines"])
        if not cancelled:
            self.c.record_failure(failure, op)
            self.c.set_state(State.FAILED, failure.reason)
        elif self.c.state not in (State.STARTING, State.VERIFYING, State.STOPPING, State.FAILED):
            self.c.set_state(State.FAILED, "cancelled")  # nothing to roll back from
        if self.c.shutting_down.is_set() or (failure.reason == "cancelled" and not cancelled):
            return self.c.result(op, "failed", **base)
        if cancelled:
            target = prev if prev.get("profile") and prev.get("mode") else self.c.last_good
        else:
            target = self.c.last_good
        if target and (cancelled or (target["profile"], target["mode"]) != (op.profile, op.mode)):
            rb = self.rollback(op, {"profile": target["profile"], "mode": target["mode"]})
            if isinstance(rb, EngineHandle):
                back = {"profile": target["profile"], "mode": target["mode"]}
                if cancelled:
                    base["message"] = (
                        f"{op.kind} to {op.profile}/{op.mode} cancelled; "
                        f"{back['profile']}/{back['mode']} is serving again"
                    )
                    return self.c.result(op, "cancelled", rolled_back_to=back, **base)
                base["message"] = (
                    f"{op.profile}/{op.mode} failed: {failure.reason}; rolled back to "
                    f"{back['profile']}/{back['mode']} (log: {failure.log})"
                )
                return self.c.result(op, "rolled_back", rolled_back_to=back, **base)
            base["rollback_failure"] = rb.to_dict()
        with self.c._lock:
            if self.c.current is not None and not self.c.current.alive():
                self.c.current = None
        self.c.save_state()
        if cancelled:
            msg = f"{op.kind} to {op.profile}/{op.mode} cancelled"
            if "rollback_failure" in base:
                msg += f"; putting the previous profile back failed: {base['rollback_failure']['reason']}"  # noqa: E501
            base["message"] = msg
            return self.c.result(op, "cancelled", **base)
        msg = f"{op.profile}/{op.mode} failed: {failure.reason} (log: {failure.log})"
        if "rollback_failure" in base:
            msg += f"; rollback failed too: {base['rollback_failure']['reason']}"
        base["message"] = msg
        return self.c.result(op, "failed", **base)

    def rollback(self, op: Operation, target: dict[str, str]) -> EngineHandle | Failure:
        self.c.set_state(State.ROLLING_BACK, f"to {target['profile']}/{target['mode']}")
        self.c.say(f"rolling back to {target['profile']}/{target['mode']}")
        try:
            profile, argv = self.c.resolver.resolve(
                target["profile"], target["mode"], load_format=op.load_format
            )
        except RequestError as exc:
            self.c.set_state(State.FAILED, "last good profile no longer loads")
            return Failure("invalid_profile", f"last good profile no longer loads: {exc}")
        with self.c._lock:
            self.c.active = dict(target)
        if not self._room_for(target):
            return Failure("cancelled", "fastverifyd is shutting down")
        step = Step(op, target["profile"], target["mode"])
        # Only shutdown stops a rollback: the operation's own cancel flag may be what led here.
        outcome = self.starts.start(step, profile, argv, None, self.c.shutting_down)
        if isinstance(outcome, EngineHandle):
            self.starts.serving(outcome, f"rolled back to {target['profile']}/{target['mode']}")
            # the READY state event and the result say it
            self.c.say(
                f"rolled back: {target['profile']}/{target['mode']} is serving", stream=False
            )
            return outcome
        self.c.set_state(State.FAILED, f"rollback failed: {outcome.reason}")
        return outcome

    def _room_for(self, target: dict[str, str]) -> bool:
        """The state dir takes the rollback's writes (core.wait_state_dir): the last good
        profile is put back when space allows; False when fastverifyd shuts down meanwhile."""

        def tell(msg: str, attempt: int) -> None:
            if attempt == 1:
                self.c.say(msg, logging.ERROR)

        return self.c.wait_state_dir(
            f"rollback to {target['profile']}/{target['mode']}",
            "rolling back",
            self.c.shutting_down.wait,
            tell,
        )


class Step:
    """A step of an operation under another (profile, mode) that streams into the same
    operation (a rollback inside a switch)."""

    def __init__(self, op: Operation, profile: str, mode: str) -> None:
        self.parent = op
        self.kind = "rollback"
        self.profile = profile
        self.mode = mode
        self.phases: dict[str, float] = {}
        self.verify: dict[str, Any] | None = None
        self.parts: dict[str, Any] = {}  # the parts' state for this start (not the switch's)

    def emit(self, event: str, **data: Any) -> None:
        self.parent.emit(event, **data)
