"""Leaving FAILED by policy: retry the last good (profile, mode) with exponential backoff, up
to `daemon.recover_retries` times (`daemon.recover_backoff_s`: first delay, cap).

A mixin of `Controller` (controller.py), like crashes.py. The main loop's tick schedules
the next retry while the daemon sits in FAILED with nothing in flight; the retry itself is
a `recover` operation that takes the slot, starts the target and verifies it as a switch
does (READY, or FAILED again). Any explicit operation meanwhile simply runs (the waiting
retry holds no slot), and cancels the schedule by leaving FAILED.

The target is the declared profile and mode in declarative mode (a pod serves nothing
else), else the last good one. The count is forgotten after an explicit operation succeeds
or once READY has held for `daemon.restart_window_s`. When the retries are spent the
budget says so (`status.recovery.spent`); in declarative mode /livez then answers 503 so
that the kubelet restarts the pod, and under systemd the daemon exits with status 3 so that
the unit fails (its Restart= policy decides).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.operations import Claim, Operation, OpResult
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.states import State

log = logging.getLogger("fastverifyd.controller")
EXIT_RECOVERY_SPENT = 3  # fastverifyd's exit status when a declarative daemon gives up


@dataclass
class RecoveryBudget:
    """Retries of the last good profile out of FAILED (not thread-safe: under the lock)."""

    attempts: int = 0  # retries since the count was last forgotten
    next_at: float | None = None  # clock time of the scheduled retry
    running: bool = False
    spent: bool = False
    last: str | None = None  # the last retry's outcome, for status
    ready_at: float | None = None  # clock time READY was first seen by the tick

    def forget(self) -> None:
        self.attempts, self.next_at, self.spent, self.last = 0, None, False, None


def delay(backoff_s: tuple[float, float], n: int) -> float:
    """Seconds before retry `n` (1-based): first * 2**(n-1), at most the cap."""
    first, cap = backoff_s
    return min(first * 2 ** max(0, n - 1), cap)


class RecoverySteps:
    """Mixed into `Controller`; the attributes it relies on are the controller's."""

    cfg: Any
    state: State
    active: dict[str, Any]
    last_good: dict[str, str] | None
    slot: Any
    resolver: Any
    shutting_down: threading.Event
    clock: Any
    _lock: Any
    say: Any
    set_state: Any
    record_failure: Any
    _result: Any
    _succeeded: Any
    _start: Any
    _spawn_thread: Any
    _finish: Any

    @property
    def recovery(self) -> RecoveryBudget:
        budget = self.__dict__.get("_recovery_budget")
        if budget is None:
            budget = self.__dict__["_recovery_budget"] = RecoveryBudget()
        return budget

    def recovery_status(self) -> dict[str, Any]:
        d = self.cfg.daemon
        with self._lock:
            r = self.recovery
            next_in = None if r.next_at is None else max(0.0, r.next_at - self.clock())
            return {
                "retries": r.attempts,
                "limit": int(d.recover_retries),
                "backoff_s": list(d.recover_backoff_s),
                "next_in_s": None if next_in is None else round(next_in, 1),
                "running": r.running,
                "spent": r.spent,
                "last": r.last,
                "target": self._target_view(),
            }

    def recovery_exit_code(self) -> int | None:
        """EXIT_RECOVERY_SPENT when a declarative daemon under systemd gave up, else None."""
        import os

        spent = self.recovery.spent and self.cfg.daemon.declarative
        return EXIT_RECOVERY_SPENT if spent and os.environ.get("NOTIFY_SOCKET") else None

    def _target_view(self) -> dict[str, str]:
        """What a retry starts and why that one (status's `recovery.target`)."""
        profile, mode = self._recover_target()
        if self.cfg.daemon.declarative:
            why = "the declared profile"
        elif self.last_good:
            why = "the last good profile"
        elif self.active.get("profile"):
            why = "the profile it was asked to serve: none has served verified yet"
        else:
            why = "the default profile: none has served verified yet"
        return {"profile": profile, "mode": mode, "why": why}

    def _recover_target(self) -> tuple[str, str]:
        d = self.cfg.daemon
        if d.declarative:
            return d.default_profile, self.cfg.server.mode
        good = self.last_good or self.active
        if good and good.get("profile") and good.get("mode"):
            return good["profile"], good["mode"]
        return d.default_profile, self.cfg.server.mode

    def recovery_tick(self) -> None:
        """From the main loop: forget, schedule or start a retry (see the module doc)."""
        d = self.cfg.daemon
        limit = int(d.recover_retries)
        now = self.clock()
        start: tuple[str, str] | None = None
        with self._lock:
            r = self.recovery
            if self.state == State.READY:
                r.next_at = None
                if r.ready_at is None:
                    r.ready_at = now
                if r.attempts and now - r.ready_at > float(d.restart_window_s):
                    r.forget()  # healthy for a whole window: a later failure starts afresh
                return
            r.ready_at = None
            if self.state != State.FAILED or r.running or self.slot.in_flight() is not None:
                r.next_at = None if self.state != State.FAILED else r.next_at
                return
            if limit <= 0 or self.shutting_down.is_set():
                return
            if r.attempts >= limit:
                if not r.spent:
                    r.spent = True
                    spent = True
                else:
                    return
            else:
                spent = False
                if r.next_at is None:
                    wait = delay(tuple(d.recover_backoff_s), r.attempts + 1)
                    r.next_at = now + wait
                    profile, mode = self._recover_target()
                    msg = (
                        f"FAILED: retrying {profile}/{mode} in {wait:.1f} s (retry "
                        f"{r.attempts + 1}/{limit}, daemon.recover_retries)"
                    )
                elif now >= r.next_at:
                    r.running = True
                    start = self._recover_target()
                    msg = ""
                else:
                    return
        if spent:
            where = (
                "; /livez answers 503 (declarative: the orchestrator restarts the daemon)"
                if d.declarative
                else "; staying FAILED until an operator acts"
            )
            self.say(f"FAILED: {limit} recovery retries spent{where}", logging.ERROR)
            return
        if start is None:
            self.say(msg)
            return
        self._spawn_thread(self._recover, *start)

    def _recover(self, profile_name: str, mode: str) -> None:
        op = Operation("recover", profile_name, mode)
        r = self.recovery
        if self.slot.claim(op) is not Claim.TAKEN:
            with self._lock:
                r.running, r.next_at = False, None
            return
        outcome: OpResult | None = None
        try:
            with self._lock:
                if self.state != State.FAILED or self.shutting_down.is_set():
                    r.running, r.next_at = False, None
                    self.slot.release(op)
                    return
                r.attempts += 1
                r.next_at = None
                n, limit = r.attempts, int(self.cfg.daemon.recover_retries)
            outcome = self._recover_once(op, n, limit)
        except Exception as exc:
            log.exception("recovery failed unexpectedly")
            outcome = self._result(op, "failed", reason="internal_error", message=str(exc))
            if self.state != State.FAILED:
                self.set_state(State.FAILED, "recovery failed unexpectedly")
        finally:
            with self._lock:
                r.running = False
                if outcome is not None:
                    r.last = f"{outcome.result}: {outcome.message or outcome.reason or ''}"
        self._finish(op, outcome)

    def _recover_once(self, op: Operation, n: int, limit: int) -> OpResult:
        prev = dict(self.active)
        try:
            profile, argv = self.resolver.resolve(op.profile, op.mode)
        except RequestError as exc:
            failure = Failure("invalid_profile", f"recovery {n}/{limit}: {exc}")
            self.record_failure(failure, op)
            self.say(failure.message, logging.ERROR)
            return self._result(op, "failed", reason=failure.reason, message=failure.message)
        self.say(f"recovery {n}/{limit}: starting {op.profile}/{op.mode}")
        self.set_state(State.STARTING, f"recovery {n}/{limit} {op.profile}/{op.mode}")
        with self._lock:
            self.active = {"profile": op.profile, "mode": op.mode}
        outcome = self._start(op, profile, argv, None, op.cancel)
        if isinstance(outcome, EngineHandle):
            return self._succeeded(op, outcome, prev)
        self.record_failure(outcome, op)
        self.set_state(State.FAILED, f"recovery {n}/{limit} failed: {outcome.reason}")
        return self._result(
            op, "failed", reason=outcome.reason, message=outcome.message, log=outcome.log
        )
