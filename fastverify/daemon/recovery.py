"""Leaving FAILED by policy: retry the last good (profile, mode) with exponential backoff, up
to `restart.recover_retries` times (`restart.recover_backoff_s`: first delay, cap).

A step over the controller's core (core.py), like crashes.py. The main loop's tick schedules
the next retry while the daemon sits in FAILED with nothing in flight; the retry itself is
a `recover` operation that takes the slot, starts the target and verifies it as a switch
does (READY, or FAILED again). Any explicit operation meanwhile simply runs (the waiting
retry holds no slot), and cancels the schedule by leaving FAILED.

The target is the declared profile and mode in declarative mode (a pod serves nothing
else), else the last good one. The count is forgotten after an explicit operation succeeds
or once READY has held for `restart.window_s`. When the retries are spent the
budget says so (`status.recovery.spent`); in declarative mode /livez then answers 503 so
that the kubelet restarts the pod, and under systemd the daemon exits with status 3 so that
the unit fails (its Restart= policy decides).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from fastverify.daemon.core import Core, RecoveryBudget
from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.operations import Claim, Operation, OpResult
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.starting import Starts
from fastverify.daemon.states import State

log = logging.getLogger("fastverifyd.controller")
EXIT_RECOVERY_SPENT = 3  # fastverifyd's exit status when a declarative daemon gives up


def delay(backoff_s: tuple[float, float], n: int) -> float:
    """Seconds before retry `n` (1-based): first * 2**(n-1), at most the cap."""
    first, cap = backoff_s
    return float(min(first * 2 ** max(0, n - 1), cap))


__all__ = ["EXIT_RECOVERY_SPENT", "RecoveryBudget", "RecoverySteps", "delay"]


class RecoverySteps:
    """FAILED's retries over the core's `recovery` budget (see the module docstring)."""

    def __init__(self, core: Core, starts: Starts) -> None:
        self.c = core
        self.starts = starts

    def recovery_status(self) -> dict[str, Any]:
        d = self.c.cfg.restart
        with self.c._lock:
            r = self.c.recovery
            next_in = None if r.next_at is None else max(0.0, r.next_at - self.c.clock())
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
        spent = self.c.recovery.spent and self.c.cfg.daemon.declarative
        return EXIT_RECOVERY_SPENT if spent and os.environ.get("NOTIFY_SOCKET") else None

    def _target_view(self) -> dict[str, str]:
        """What a retry starts and why that one (status's `recovery.target`)."""
        profile, mode = self._recover_target()
        if self.c.cfg.daemon.declarative:
            why = "the declared profile"
        elif self.c.last_good:
            why = "the last good profile"
        elif self.c.active.get("profile"):
            why = "the profile it was asked to serve: none has served verified yet"
        else:
            why = "the default profile: none has served verified yet"
        return {"profile": profile, "mode": mode, "why": why}

    def _recover_target(self) -> tuple[str, str]:
        d = self.c.cfg.daemon
        if d.declarative:
            return d.default_profile, self.c.cfg.server.mode
        good = self.c.last_good or self.c.active
        if good and good.get("profile") and good.get("mode"):
            return str(good["profile"]), str(good["mode"])
        return d.default_profile, self.c.cfg.server.mode

    def recovery_tick(self) -> None:
        """From the main loop: forget, schedule or start a retry (see the module doc)."""
        d = self.c.cfg.restart
        limit = int(d.recover_retries)
        now = self.c.clock()
        start: tuple[str, str] | None = None
        with self.c._lock:
            r = self.c.recovery
            if self.c.state == State.READY:
                r.next_at = None
                if r.ready_at is None:
                    r.ready_at = now
                if r.attempts and now - r.ready_at > float(d.window_s):
                    r.forget()  # healthy for a whole window: a later failure starts afresh
                return
            r.ready_at = None
            if self.c.state != State.FAILED or r.running or self.c.slot.in_flight() is not None:
                r.next_at = None if self.c.state != State.FAILED else r.next_at
                return
            if limit <= 0 or self.c.shutting_down.is_set():
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
                    wait = delay(d.recover_backoff_s, r.attempts + 1)
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
                if self.c.cfg.daemon.declarative
                else "; staying FAILED until an operator acts"
            )
            self.c.say(f"FAILED: {limit} recovery retries spent{where}", logging.ERROR)
            return
        if start is None:
            self.c.say(msg)
            return
        self.c.spawn_thread(self._recover, *start)

    def _recover(self, profile_name: str, mode: str) -> None:
        op = Operation("recover", profile_name, mode)
        r = self.c.recovery
        if self.c.slot.claim(op) is not Claim.TAKEN:
            with self.c._lock:
                r.running, r.next_at = False, None
            return
        outcome: OpResult | None = None
        try:
            with self.c._lock:
                if self.c.state != State.FAILED or self.c.shutting_down.is_set():
                    r.running, r.next_at = False, None
                    self.c.slot.release(op)
                    return
                r.attempts += 1
                r.next_at = None
                n, limit = r.attempts, int(self.c.cfg.restart.recover_retries)
            outcome = self._recover_once(op, n, limit)
        except Exception as exc:
            log.exception("recovery failed unexpectedly")
            outcome = self.c.result(op, "failed", reason="internal_error", message=str(exc))
            if self.c.state != State.FAILED:
                self.c.set_state(State.FAILED, "recovery failed unexpectedly")
        finally:
            with self.c._lock:
                r.running = False
                if outcome is not None:
                    r.last = f"{outcome.result}: {outcome.message or outcome.reason or ''}"
        self.c.finish(op, outcome)

    def _recover_once(self, op: Operation, n: int, limit: int) -> OpResult:
        prev = dict(self.c.active)
        try:
            profile, argv = self.c.resolver.resolve(op.profile, op.mode)
        except RequestError as exc:
            failure = Failure("invalid_profile", f"recovery {n}/{limit}: {exc}")
            self.c.record_failure(failure, op)
            self.c.say(failure.message, logging.ERROR)
            return self.c.result(op, "failed", reason=failure.reason, message=failure.message)
        self.c.say(f"recovery {n}/{limit}: starting {op.profile}/{op.mode}")
        self.c.set_state(State.STARTING, f"recovery {n}/{limit} {op.profile}/{op.mode}")
        with self.c._lock:
            self.c.active = {"profile": op.profile, "mode": op.mode}
        outcome = self.starts.start(op, profile, argv, None, op.cancel)
        if isinstance(outcome, EngineHandle):
            return self.starts.succeeded(op, outcome, prev)
        self.c.record_failure(outcome, op)
        self.c.set_state(State.FAILED, f"recovery {n}/{limit} failed: {outcome.reason}")
        return self.c.result(
            op, "failed", reason=outcome.reason, message=outcome.message, log=outcome.log
        )
