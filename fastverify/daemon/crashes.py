"""The controller's crash steps: a serving engine died (or lost a worker) -> BACKOFF ->
restart per the restart policy (restart.py) -> READY, or FAILED after the burst.

A step over the controller's core (core.py): its state, slot, launcher and events, and
the engine start (starting.py). READY is left, and the crash recorded and counted, under the
core's lock in the step that finds the engine dead (status never reads READY without a serving
engine); the restart runs as a `crash_restart` operation that holds the slot and is
`preemptible` while it waits out its backoff (an explicit switch cancels the wait).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from fastverify.daemon import events as ev
from fastverify.daemon import procs
from fastverify.daemon.core import Core
from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.operations import Claim, Operation, OpResult
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.restart import Decision
from fastverify.daemon.starting import Starts
from fastverify.daemon.states import State
from fastverify.daemon.watch import EngineWatch, WatchPolicy

log = logging.getLogger("fastverifyd.controller")


class CrashSteps:
    """A serving engine's crashes, over the controller's core (see the module docstring)."""

    def __init__(self, core: Core, starts: Starts) -> None:
        self.c = core
        self.starts = starts

    def on_exit(self, h: EngineHandle) -> None:
        """The launcher found the leader exited (called under the core's lock, in the step
        that marked it): why it died is read from its last lines and READY left in that step."""
        if self._serving(h):
            self._crashed(h, self.c.launcher.exit_failure(h), "died")

    def tick(self) -> None:
        """Called from the main loop (~1/s): a serving engine whose leader is alive but lost
        one of the workers verified at READY is broken; treat it as a crash. A serving
        engine gets its watch (SGLang's /health_generate, watch.py)."""
        h = self.c.current
        if h is not None and h.serving and not h.expected_exit and h.watch is None:
            self._watch(h)
        if h is None or not h.serving or h.expected_exit or not h.alive() or not h.worker_pids:
            return
        gone = self.c.launcher.lost_workers(h)
        if not gone or not h.serving:
            return
        leader = procs.read_stat(h.pid)
        if leader is None or not leader.alive:
            return  # the server itself died (its workers follow it): on_exit says why
        failure = Failure(
            "worker_exited",
            f"engine worker process(es) {gone} exited while the server (pid {h.pid}) kept running",
            log=str(h.log_path),
        )
        self._crashed(h, failure)

    def _watch(self, h: EngineHandle) -> None:
        """Start polling the engine's /health_generate (node rank 0 only: a multi-node
        follower serves no HTTP API); `watch.interval_s = 0` turns it off."""
        policy = WatchPolicy.from_config(self.c.cfg.watch)
        if policy.interval_s <= 0 or h.follower:
            h.watch = False  # decided: no watch for this engine
            return
        h.watch = EngineWatch(
            h.url,
            policy,
            serving=lambda: self.c.current is h and h.serving and not h.expected_exit,
            on_unresponsive=lambda failure: self._unresponsive(h, failure),
            recent_lines=h.recent_lines,
            log_path=str(h.log_path),
            pid=h.pid,
        )
        h.watch.start()

    def _unresponsive(self, h: EngineHandle, failure: Failure) -> None:
        """The watch's verdict: a live engine that answers nothing is a crash."""
        self._crashed(h, failure)

    def _count_crash(self, h: EngineHandle, failure: Failure) -> Decision:
        with self.c._lock:
            self.c.restarts[failure.reason] += 1
            decision = self.c.crashes.record(self.c.clock())
        self.c.bus.publish(
            ev.Crashed(
                failure.reason,
                failure.message,
                h.profile,
                h.mode,
                failure.log,
                failure.line,
                failure.exit_code,
            )
        )
        return decision

    def _serving(self, h: EngineHandle) -> bool:
        """`h` is the engine serving READY (not a start, a stop or a replaced engine)."""
        if h.expected_exit or self.c.shutting_down.is_set():
            return False
        return self.c.current is h and h.serving

    def _crashed(self, h: EngineHandle, failure: Failure, verb: str = "") -> None:
        """Leave READY in one step under the core's lock, with the crash recorded and counted
        (status never shows READY without a serving engine, nor BACKOFF without its crash);
        then restart from a thread that takes the slot."""
        with self.c._lock:
            if not self._serving(h):
                return
            h.serving = False
            self.c.say(f"engine pid {h.pid}{f' {verb}' if verb else ''}: {failure.message}",
                       logging.WARNING)  # fmt: skip
            if self.c.state != State.READY:
                return
            self.c.record_failure(failure, None, profile=h.profile, mode=h.mode, op="crash_restart")
            decision = self._count_crash(h, failure)
            self.c.set_state(State.BACKOFF, f"engine crashed: {failure.reason}")
            self.c.bus.publish(
                ev.EngineDown(h.profile, h.mode, self.c.engine.name, self.c.settings(h), "crashed")
            )
        for part in self.c.parts:  # (the front door's: new requests wait for the restart)
            part.on_crash()
        self.c.spawn_thread(self._crash_restart, h, failure, decision)

    def _state_now(self) -> State:
        """The core's state now: another thread may have moved it since the last check."""
        return self.c.state

    def _crash_restart(self, h: EngineHandle, failure: Failure, decision: Decision) -> None:
        op = Operation("crash_restart", h.profile, h.mode)
        if self.c.slot.claim(op, settle_s=5.0) is not Claim.TAKEN:
            return  # an explicit operation owns the engine now
        if (
            self.c.current is not h
            or self.c.state != State.BACKOFF
            or self.c.shutting_down.is_set()
        ):
            self.c.slot.release(op)  # an operation replaced or stopped this engine meanwhile
            return
        try:
            outcome, journal = self._crash_loop(op, h, failure, decision)
        except Exception as exc:
            log.exception("crash restart failed unexpectedly")
            outcome = self.c.result(op, "failed", reason="internal_error", message=str(exc))
            journal = True
            with contextlib.suppress(Exception):  # never stay in BACKOFF with nobody retrying
                self.c.record_failure(Failure("internal_error", str(exc)), op)
                if self._state_now() != State.FAILED:
                    self.c.set_state(State.FAILED, "crash restart failed unexpectedly")
        self.c.finish(op, outcome, journal)

    def _crash_loop(
        self, op: Operation, h: EngineHandle, failure: Failure, decision: Decision
    ) -> tuple[OpResult, bool]:
        while True:
            self.c.launcher.stop(h, forget=self.c.current is h)  # leftover TP workers of the group
            self.c.record_failure(failure, op)
            if decision.give_up:
                msg = f"{decision.message}; last: {failure.message}"
                with self.c._lock:
                    self.c.last_failure = dict(
                        self.c.last_failure or {}, message=msg, crash_loop=True
                    )
                if self.c.state != State.FAILED:
                    self.c.set_state(State.FAILED, "crash loop")
                self.c.say(f"giving up restarting: {msg}", logging.ERROR)
                out = self.c.result(
                    op, "failed", reason=failure.reason, message=msg, log=failure.log
                )
                return out, True
            self.c.set_state(State.BACKOFF, f"{failure.reason}; {decision.message}")
            burst = self.c.crashes.policy.burst
            self.c.say(
                f"restarting {h.profile}/{h.mode} in {decision.delay_s:.2f} s"
                f" (crash {decision.n}/{burst})"
            )
            self.c.slot_preemptible(op, True)
            op.cancel.wait(decision.delay_s)
            self.c.slot_preemptible(op, False)
            if op.cancel.is_set() or self.c.shutting_down.is_set() or not self._state_dir_ok(op, h):
                out = self.c.result(op, "failed", reason="cancelled", message="restart pre-empted")
                return out, False
            try:
                profile, argv = self.c.resolver.resolve(h.profile, h.mode)
            except RequestError as exc:
                fallback = self._fallback(h.profile, h.mode, exc)
                if fallback is None:
                    self.c.set_state(State.FAILED, "profile no longer loads")
                    out = self.c.result(op, "failed", reason="invalid_profile", message=str(exc))
                    return out, True
                profile, argv = fallback
                op.profile = profile.name  # what this restart starts (and its record says)
            self.c.set_state(State.STARTING, f"crash restart {decision.n}")
            outcome = self.starts.start(op, profile, argv, None, op.cancel)
            if isinstance(outcome, EngineHandle):
                out = self.starts.succeeded(op, outcome, {"profile": h.profile, "mode": h.mode})
                out.reason = failure.reason  # the record says why it restarted
                return out, True
            self.c.set_state(State.FAILED, outcome.reason)
            failure = outcome
            h = self.c.current or h
            decision = self._count_crash(h, failure)

    def _fallback(self, name: str, mode: str, exc: RequestError) -> tuple[Any, list[str]] | None:
        """The crashed engine's profile no longer loads (deleted, broken): the configured
        default profile in the same mode, with a finding; None when that fails too."""
        default = self.c.cfg.daemon.default_profile
        if default == name:
            return None
        try:
            resolved = self.c.resolver.resolve(default, mode)
        except RequestError:
            return None
        msg = (
            f"profile {name}/{mode} no longer loads ({exc}); the crash restart started"
            f" {default}/{mode} instead (switch with `fastverifyctl profile set`)"
        )
        self.c.set_finding("profile_fallback", msg)
        self.c.say(msg, logging.WARNING)
        return resolved

    def _state_dir_ok(self, op: Operation, h: EngineHandle) -> bool:
        """Before a crash restart: the state dir must take the engine's pid file and log.
        While it does not, stay in BACKOFF with a finding and retry (core.wait_state_dir);
        recover by itself once the dir works again. False when cancelled."""

        def tell(msg: str, attempt: int) -> None:
            self.c.record_failure(Failure("state_dir_unwritable", msg), op)
            self.c.say(msg, logging.ERROR if attempt == 1 else logging.WARNING)

        def pause(delay: float) -> bool:
            self.c.slot_preemptible(op, True)
            op.cancel.wait(delay)
            self.c.slot_preemptible(op, False)
            return op.cancel.is_set() or self.c.shutting_down.is_set()

        return self.c.wait_state_dir(
            f"crash restart of {h.profile}/{h.mode}", "restarting", pause, tell
        )
