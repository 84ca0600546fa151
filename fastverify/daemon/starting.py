"""One engine start, over the controller's core: spawn (or adopt) -> STARTING -> ready ->
VERIFYING (the verifiers, verifier.py) -> the handle, or the `Failure` with the engine
stopped; and what READY then records (`serving`, `succeeded`).

Every step that starts an engine goes through `Starts`: a switch (controller.py), a crash
restart (crashes.py), a rollback (rollback.py), a recovery retry (recovery.py) and the
adoption at start-up (reconcile.py).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastverify.config import weights_label
from fastverify.daemon import events as ev
from fastverify.daemon.core import Core
from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.operations import Operation, OpResult, StartOf
from fastverify.daemon.states import State
from fastverify.daemon.verifier import Verifiers
from fastverify.engines.sglang import load_format_of
from fastverify.redact import mask_argv

if TYPE_CHECKING:
    from fastverify.profiles.model import Profile

    pass

FAILED_TAIL_LINES = 12  # a failed engine's last log lines in the result (`log_tail`)


class Starts:
    def __init__(self, core: Core, verifiers: Verifiers) -> None:
        self.c = core
        self.verifiers = verifiers

    def start(
        self,
        op: StartOf,
        profile: Profile,
        argv: list[str],
        timeout_s: float | None,
        cancel: threading.Event,
        adopt: EngineHandle | None = None,
    ) -> EngineHandle | Failure:
        """Spawn (or adopt), wait for readiness, verify. The engine is stopped on failure.
        `op`: an Operation, or a rollback's step inside one (rollback.Step)."""
        c = self.c
        timeout = timeout_s or c.cfg.restart.readiness_timeout_s
        if adopt is None and (taken := c.launcher.port_in_use(argv)) is not None:
            c.say(f"{op.kind} {op.profile}/{op.mode}: {taken.message}", logging.WARNING)
            return taken  # said before a load that would fail only once it is over
        h: EngineHandle | Failure
        if adopt is None:
            h = self._spawn(op, profile, argv, cancel)
            if isinstance(h, Failure):
                return h
        else:
            h = adopt
        with c._lock:
            c.current = h
        op.emit("engine", pid=h.pid, log=str(h.log_path), argv=mask_argv(h.argv))
        c.bus.publish(
            ev.EngineStarting(
                h.profile, h.mode, c.engine.name, c.settings(h), h.pid, str(h.log_path)
            )
        )
        beat = lambda: c.bus.publish(ev.EngineWaiting(h.profile, h.mode))  # noqa: E731
        failure = c.launcher.await_ready(h, timeout, cancel, heartbeat=beat)
        if failure is None:
            op.phases.setdefault("engine_ready", round(h.ready_s or 0.0, 4))
            c.set_state(State.VERIFYING, f"engine ready after {h.ready_s or 0.0:.2f} s")
            failure = self._verify(op, h, cancel, adopted=adopt is not None)
            if failure is None:
                return h
        level = logging.INFO if failure.reason == "cancelled" else logging.WARNING
        c.say(
            f"{op.kind} {h.profile}/{h.mode} failed: {failure.message} (log: {h.log_path})", level
        )
        c.stop_engine(h, "failed")  # stops its tail: every line it wrote has been read
        self.keep_failed_tail(op, h)
        again = False
        for part in c.parts:  # each part reads the failure (weights.py: SGLang refused it)
            failure, retry = part.after_failure(op, h, failure, cancel)
            again = again or retry
        if again:
            return self.start(op, profile, argv, timeout_s, cancel)
        return failure

    def start_beside(
        self, op: StartOf, profile: Profile, argv: list[str], timeout_s: float | None,
        cancel: threading.Event,
    ) -> EngineHandle | Failure:  # fmt: skip
        """A standby engine beside the serving one (on the port `argv` names): spawn, wait
        for readiness, verify as any start; `c.current` stays the serving engine. The
        standby is stopped on failure, and nothing else is touched (no part's retry: a
        disk load beside the serving engine would hold a second copy of the weights)."""
        c = self.c
        if (taken := c.launcher.port_in_use(argv)) is not None:
            c.say(f"{op.kind} {op.profile}/{op.mode}: {taken.message}", logging.WARNING)
            return taken
        h = self._spawn(op, profile, argv, cancel, standby=True)
        if isinstance(h, Failure):
            return h
        op.emit("engine", pid=h.pid, log=str(h.log_path), argv=mask_argv(h.argv), standby=True)
        timeout = timeout_s or c.cfg.restart.readiness_timeout_s
        failure = c.launcher.await_ready(h, timeout, cancel)
        if failure is None:
            op.phases.setdefault("engine_ready", round(h.ready_s or 0.0, 4))
            c.say(f"standby engine ready after {h.ready_s or 0.0:.2f} s; verifying it")
            failure = self._verify(op, h, cancel, adopted=False)
            if failure is None:
                return h
        level = logging.INFO if failure.reason == "cancelled" else logging.WARNING
        c.say(f"{op.kind} {h.profile}/{h.mode} (standby) failed: {failure.message} "
              f"(log: {h.log_path})", level)  # fmt: skip
        c.stop_engine(h, "failed")
        self.keep_failed_tail(op, h)
        return failure

    def _spawn(
        self, op: StartOf, profile: Profile, argv: list[str], cancel: threading.Event,
        standby: bool = False,
    ) -> EngineHandle | Failure:  # fmt: skip
        """The launcher's spawn with every part around it (weights.py: its gate)."""
        c = self.c

        def launch(a: list[str]) -> EngineHandle | Failure:
            try:
                beside = {"standby": True} if standby else {}
                return c.launcher.spawn(profile, op.mode, a, **beside)
            except OSError as exc:
                failure = Failure("spawn_failed", f"cannot start the engine: {exc}")
                c.say(f"{op.kind} {op.profile}/{op.mode} failed: {failure.message}",
                      logging.WARNING)  # fmt: skip
                return failure

        spawn: Callable[[list[str]], EngineHandle | Failure] = launch
        for part in reversed(c.parts):  # the first part is the outermost
            spawn = functools.partial(part.around_spawn, op, cancel=cancel, spawn=spawn)
        return spawn(argv)

    def _verify(
        self, op: StartOf, h: EngineHandle, cancel: threading.Event, adopted: bool
    ) -> Failure | None:
        """VERIFYING: the verifiers in order; then a late cancel; then the weights' record."""
        t0 = time.monotonic()
        verdict = self.verifiers.verify(h)
        env = verdict.details.get("env") or {}
        op.emit("verify", ok=verdict.ok, message=env.get("message", ""))
        op.phases.setdefault("verify", round(time.monotonic() - t0, 4))
        failure = verdict.failure
        if failure is None:
            h.worker_pids = tuple(p["pid"] for p in env.get("processes", []) if p["pid"] != h.pid)
        if failure is None and cancel.is_set():
            failure = Failure("cancelled", "operation cancelled", log=str(h.log_path))
        for part in self.c.parts if not adopted else ():
            failure = failure or part.after_ready(op, h)
        if failure is None:
            op.verify = verdict.details
        return failure

    def keep_failed_tail(self, op: StartOf, h: EngineHandle) -> None:
        """The first engine of `op` that failed: its log file and last lines (masked), for
        the result's excerpt. A rollback's start (a `Step`) never replaces it."""
        if isinstance(op, Operation) and op.failed_engine is None:
            op.failed_engine = {
                "log": str(h.log_path),
                "lines": h.recent_lines()[-FAILED_TAIL_LINES:],
            }

    def serving(self, h: EngineHandle, why: str) -> None:
        c = self.c
        with c._lock:
            c.active = {"profile": h.profile, "mode": h.mode}
            c.last_good = {"profile": h.profile, "mode": h.mode}
        c.save_state()
        c.launcher.mark_verified(h)
        # serving and READY together: the health watch starts on a serving engine and its
        # verdict acts only in READY, so an engine marked serving before READY (while the
        # files above are written on a slow disk) could hang unnoticed and then show READY
        with c._lock:
            h.serving = True
            c.set_state(State.READY, why)
            if not h.alive():  # it exited after its verification: a crash, found now
                c.launcher.on_exit(h)
        for part in c.parts:  # (the front door's: the held requests go to this engine)
            part.on_serving(h)
        c.bus.publish(
            ev.EngineUp(
                h.profile,
                h.mode,
                c.engine.name,
                h.url,
                c.settings(h),
                h.pid,
                h.engine_id,
                h.ready_s or 0.0,
                h.adopted,
                h.engine_env,
                {part.NAME: part.engine_fields(h) for part in c.parts},
            )
        )

    def succeeded(
        self,
        op: Operation,
        h: EngineHandle,
        prev: dict[str, Any],
        after_serving: Callable[[EngineHandle], None] | None = None,
    ) -> OpResult:
        """READY with `h`, and the result; `after_serving(h)` runs once `h` serves (a
        standby switch: drain and stop the engine it replaced)."""
        c = self.c
        t0 = time.monotonic()
        if op.kind != "crash_restart":
            c.crashes.clear()
        if op.kind not in ("crash_restart", "recover"):
            c.recovery.forget()  # an operator's start: FAILED's retries count afresh
        if op.kind == "switch":
            c.clear_finding("profile_fallback")  # the operator chose a profile
        self.serving(h, f"{h.profile}/{h.mode} verified")
        op.phases["persist"] = round(time.monotonic() - t0, 4)
        if after_serving is not None:
            after_serving(h)
        trial = weights_label(load_format_of(h.argv)) == "dummy"
        message = (
            f"{h.profile}/{h.mode} is serving"
            + (" on dummy weights (a trial: random output, timings only)" if trial else "")
            + f" (ready in {h.ready_s or 0.0:.2f} s, verified)"
            + "".join(f"; {text}" for text in self._said(op, h))
        )
        c.say(message, stream=False)  # the result says it
        return c.result(
            op,
            "ok",
            log=str(h.log_path),
            message=message,
            engine_ready_s=round(h.ready_s or 0.0, 3),
            verify=op.verify,
            engine_env=h.engine_env,  # what the engine added to its workers' NCCL env
            pid=h.pid,
            previous={"profile": prev.get("profile"), "mode": prev.get("mode")},
            phases=dict(op.phases),
            **{k: v for part in c.parts for k, v in part.result_fields(op, h).items()},
        )

    def _said(self, op: Operation, h: EngineHandle) -> list[str]:
        """The parts' one-line summaries of a start (weights.py: where the weights
        came from), as their result fields carry them (`text`)."""
        return [
            rec["text"]
            for part in self.c.parts
            for rec in part.result_fields(op, h).values()
            if isinstance(rec, dict) and rec.get("text")
        ]
