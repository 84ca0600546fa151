"""The controller: the daemon's state machine and the switch / rollback / cancel / crash steps.

`Controller` is the typed core (core.py: the state of states.py's one table, the active and
last good (profile, mode), the engine handle, the last failure, the slot) with its steps
composed over it, each in a module of its own: starting.py (one engine start and its
verification by the verifiers, verifier.py / checks.py), weights.py, rollback.py,
crashes.py, recovery.py. It runs one operation at a time through the `Slot`
(operations.py). Engine I/O is the launcher's (launcher.py); the restart policy is
restart.py's; what the daemon persists, journals, notifies and exports is done by
observers of the typed events it publishes (events.py, observers.py).

Steps
-----
switch/mode/restart: stop the engine -> STARTING -> ready -> VERIFYING -> READY; on failure
  FAILED -> ROLLING_BACK to the last good (profile, mode) -> READY (or FAILED): rollback.py.
  With the front door in standby mode and room for two engines: the new engine starts and
  is verified beside the serving one, which serves (READY) until the cut-over; a failure
  stops the new one only: standby_switch.py.
cancel (POST /v1/cancel): the operation in flight stops where it is (a model load in
  STARTING: the new engine's group is stopped) and the previous (profile, mode) is put
  back; the result is `cancelled`.
crash: the engine died, lost a verified worker or stopped answering SGLang's
  /health_generate (watch.py) after READY -> BACKOFF (restart policy) -> STARTING ... READY;
  too many crashes in the window -> FAILED: crashes.py. An explicit operation pre-empts a
  crash restart waiting out its backoff.
recover: FAILED -> STARTING the last good (declared) profile after a backoff, up to
  restart.recover_retries times: recovery.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastverify.daemon import events as ev
from fastverify.daemon.allreduce_part import AllreducePart
from fastverify.daemon.core import Core
from fastverify.daemon.crashes import CrashSteps
from fastverify.daemon.failures import Failure
from fastverify.daemon.frontdoor import DoorSteps
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.logs import LineFacts
from fastverify.daemon.operations import Claim, Operation, OpResult
from fastverify.daemon.parts import BasePart, switch_plan
from fastverify.daemon.recovery import RecoverySteps
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.rollback import RollbackSteps
from fastverify.daemon.speculation_part import SpeculationPart
from fastverify.daemon.standby_switch import StandbySteps
from fastverify.daemon.starting import Starts
from fastverify.daemon.states import State
from fastverify.daemon.tuner_part import TunerPart
from fastverify.daemon.verifier import Plan
from fastverify.daemon.weights import WeightSteps
from fastverify.redact import mask_argv

if TYPE_CHECKING:
    from fastverify.daemon.auth import Caller
    from fastverify.profiles.model import Profile

log = logging.getLogger("fastverifyd.controller")

# Operations counted as profile switches by the exporter (start-up and crash restarts are not).
SWITCH_KINDS = ("switch", "mode")
# Operations answered `unchanged` when they ask for what already serves (unless restart).
NOOP_KINDS = ("switch", "mode")
# Operations a client may cancel.
CANCELLABLE = ("switch", "mode", "restart", "start")


# The daemon's parts (parts.py), in the order their hooks run and their status sections show.
PARTS: tuple[type[BasePart], ...] = (
    WeightSteps, AllreducePart, SpeculationPart, TunerPart, DoorSteps
)  # fmt: skip


class Controller(Core):
    """See the module docstring. Public methods are thread-safe."""

    def compose(self) -> None:
        """The steps over this core, each in its own module (see the module docstring)."""
        # each feature a part (parts.py): its own state, say in a start and a switch,
        # exporter source, status section; the steps below call over the list, never one
        self.parts = [part(self) for part in PARTS]
        self.starts = Starts(self, self.verifiers)
        self.rollback = RollbackSteps(self, self.starts)
        self.crash_steps = CrashSteps(self, self.starts)
        self.recovery_steps = RecoverySteps(self, self.starts)
        self.standby = StandbySteps(self, self.starts, self.rollback)
        self._admission = threading.Lock()  # request(): one admitted at a time
        self.launcher.on_line = self._on_line
        self.launcher.on_exit = self.crash_steps.on_exit
        for name in ("group", "standby_group"):  # an engine's exit and its crash step: one step
            if (group := getattr(self.launcher, name, None)) is not None:
                group.exit_lock = self._lock

    def tick(self) -> None:
        """From the main loop (~1/s): a serving engine's watch and lost workers (crashes.py),
        then each part's (the front door's: its restart, its cut-over brought back)."""
        self.crash_steps.tick()
        for part in self.parts:
            part.tick()

    def recovery_tick(self) -> None:
        """From the main loop: FAILED's retries (recovery.py)."""
        self.recovery_steps.recovery_tick()

    def recovery_status(self) -> dict[str, Any]:
        return self.recovery_steps.recovery_status()

    def recovery_exit_code(self) -> int | None:
        return self.recovery_steps.recovery_exit_code()

    # ------------------------------------------------------------------ requests
    def request(
        self,
        kind: str,
        name: str | None,
        mode: str | None,
        *,
        force: bool = False,
        queue: bool = False,
        timeout_s: float | None = None,
        withdrawn: Callable[[], bool] | None = None,
        restart: bool = False,
        load_format: str | None = None,
        eagle3_steps: int | None = None,
        caller: Caller | None = None,
        gate: Callable[[], None] | None = None,
    ) -> Operation:
        """Validate, take the slot (or queue for it), start the operation thread.
        A switch/mode to what is already serving (same profile, mode, argv and NCCL
        settings, READY, nothing in flight) is answered `unchanged` at once without
        touching the engine, unless `restart`.
        `load_format` (SGLang --load-format; "dummy" = a trial) holds for this operation and
        its rollback; None = the config's `[server] load_format`. `eagle3_steps`: a timing
        trial's draft steps (mode eagle3 on dummy weights only; this start only, its rollback
        and any later start run the configured ones). `caller` (auth.Caller):
        who asked, recorded with the result (`by`, `caller`); None: the daemon itself.
        `gate()` (a lease's check, which may raise) runs once the request is known valid and
        not `unchanged`: a typo is refused as a typo (and what serves already is `unchanged`),
        whoever holds the daemon.
        Raises RequestError: 409 busy, 422 invalid, 503 shutting down, 507 state dir."""
        # one request admitted at a time, in the order they came: one that comes while an
        # earlier one is still being validated is answered after it (never `unchanged`
        # beside a switch about to start)
        with self._admission:
            if self.shutting_down.is_set():
                raise RequestError(503, "fastverifyd is shutting down")
            name, mode = self.resolver.defaults(name, mode, self.active)
            t0 = time.monotonic()
            profile, argv = self.resolver.resolve(
                name, mode, force, load_format=load_format, eagle3_steps=eagle3_steps
            )
            # the verifiers' refusals (checks.py): known before the load, nothing is stopped
            self.verifiers.refuse(Plan(kind, name, mode, profile, argv, force))
            verdict = self.resolver.check_argv(argv)  # cached: what the argv check said
            validate_s = time.monotonic() - t0
            if not queue:
                self._refuse_if_busy()
            if kind in NOOP_KINDS and not restart:
                same = self._unchanged(kind, name, mode, profile, argv, caller, load_format)
                if same is not None:
                    return same
            if gate is not None:
                gate()
            problem = self.store.check_writable()
            if problem:
                raise RequestError(
                    507,
                    f"{problem}; {kind} refused, nothing was stopped or changed",
                    reason="state_dir_unwritable",
                )
            op = Operation(kind, name, mode)
            op.caller = caller
            op.load_format = load_format  # a trial rolls back on dummy weights too
            op.eagle3_steps = eagle3_steps  # this start only: never the rollback's or persisted
            if queue:
                self.slot.enqueue(op)  # its place in the line: the order the requests came in
            else:
                claim = self.slot.claim(op)
        if queue:
            claim = self.slot.wait_claim(op, withdrawn=withdrawn, stopping=self.shutting_down)
        if claim is Claim.STOPPING:
            raise RequestError(503, "fastverifyd is shutting down")
        if claim is Claim.WITHDRAWN:
            log.info("queued %s to %s/%s withdrawn: the client went away", kind, name, mode)
            raise RequestError(499, "queued request withdrawn", reason="withdrawn")
        if claim is Claim.BUSY:
            self._refuse_if_busy()
            raise RequestError(409, "another operation is in flight")
        op.restart_clock()
        op.phases["validate"] = round(validate_s, 4)
        notices = {k: v for part in self.parts
                   for k, v in part.accepted(kind, mode, load_format, op).items()}  # fmt: skip
        op.emit("accepted", op=op.describe(), argv=mask_argv(argv), check=verdict.to_dict(),
                **notices)  # fmt: skip
        for text in notices.values():
            if text:
                self.say(text, logging.WARNING)  # before anything stops
        for warning in getattr(profile, "warnings", ()):  # e.g. LL128 without NVLink, --force
            self.say(f"profile {name}: {warning.message}", logging.WARNING)
        self.bus.publish(ev.OperationStarted(
            op.id, kind, name, mode, op.describe()["by"], caller.to_dict() if caller else None,
            dict(self.active)))  # fmt: skip
        self.spawn_thread(self._run_op, op, profile, argv, timeout_s)
        return op

    def _unchanged(
        self,
        kind: str,
        name: str,
        mode: str,
        profile: Profile,
        argv: list[str],
        caller: Caller | None,
        load_format: str | None,
    ) -> Operation | None:
        """An answered operation (`unchanged`) when the request asks for what serves now and
        nothing is queued to change it."""
        if self.slot.queued():  # looked at before the holder: one leaves the queue to hold
            return None
        with self._lock:
            h = self.current
            serving = (
                self.state == State.READY
                and self.op is None
                and h is not None
                and h.serving
                and (self.active.get("profile"), self.active.get("mode")) == (name, mode)
            )
        if not serving or h is None or not self.launcher.same_engine(h, profile, argv):
            return None
        op = Operation(kind, name, mode)
        op.caller = caller
        op.load_format = load_format  # its result says the weights that serve (a trial's)
        message = (
            f"{name}/{mode} is already serving (engine pid {h.pid}); nothing changed"
            " (to restart it anyway: `profile set --restart`, or `fastverifyctl restart`)"
        )
        op.finish(self.result(op, "unchanged", message=message, pid=h.pid))
        return op

    def _refuse_if_busy(self) -> None:
        op = self.op
        if op is not None and self.state == State.READY and op.moved():
            op.wait(2.0)  # READY again: the operation is only writing its record
        op = self.op
        if op is not None and not op.preemptible:
            raise RequestError(
                409,
                f"a {op.kind} to {op.profile}/{op.mode} is in flight "
                f"(started {time.monotonic() - op.t0:.1f} s ago); retry later, or pass --queue "
                "(API `queue: true`) to wait for it",
                in_flight=op.describe(),
            )

    def cancel(self, caller: Caller | None = None) -> Operation | None:
        """Cancel the operation in flight (None when there is none that can be cancelled;
        RequestError 409 when it has already succeeded and is only being recorded). Its
        result names `caller` as `cancelled_by`."""
        with self._lock:
            op = self.op
            if op is None or op.kind not in CANCELLABLE:
                return None
            if op.committed:
                raise RequestError(
                    409,
                    f"the {op.kind} to {op.profile}/{op.mode} has already succeeded and is"
                    " being recorded; nothing was cancelled (switch back to undo it)",
                    reason="already_finished",
                    busy=False,  # nothing else holds the daemon: the CLI exits 1, not 4
                )
            op.request_cancel("cancelled")
            op.cancelled_by = caller
        by = f" by {caller.by}" if caller is not None else ""
        self.say(f"cancel requested{by}: {op.kind} to {op.profile}/{op.mode}")
        return op

    def _run_op(
        self, op: Operation, profile: Profile, argv: list[str], timeout_s: float | None
    ) -> None:
        try:
            outcome = self._switch(op, profile, argv, timeout_s)
        except Exception as exc:  # never leave a caller without an answer
            log.exception("operation %s failed unexpectedly", op.id)
            outcome = self.result(op, "failed", reason="internal_error", message=str(exc))
        self.finish(op, outcome)

    # ------------------------------------------------------------------ the switch
    def _switch(
        self, op: Operation, profile: Profile, argv: list[str], timeout_s: float | None
    ) -> OpResult:
        prev = dict(self.active)
        self.say(f"{op.kind}: {prev.get('profile')}/{prev.get('mode')} -> {op.profile}/{op.mode}")
        # the one part that plans switches (the front door's standby mode): the new engine
        # beside the serving one, or hold (and why)
        planned = switch_plan(self.parts, op)
        if planned is not None and planned[1].mode == "standby":
            planner, fit = planned
            return self.standby.switch(op, profile, argv, timeout_s, prev, planner, fit)
        for part in self.parts:  # new requests wait, those in flight finish (or are cut)
            part.before_stop(op)
        if op.cancel.is_set() and not self.shutting_down.is_set() and self._resumed(op):
            return self.result(
                op, "cancelled", reason="cancelled", previous=prev,
                message=f"{op.kind} to {op.profile}/{op.mode} cancelled during the drain; "
                f"{prev.get('profile')}/{prev.get('mode')} served on (never stopped)",
            )  # fmt: skip
        t0 = time.monotonic()
        self.stop_current(f"{op.kind} to {op.profile}/{op.mode}")
        op.phases["stop"] = round(time.monotonic() - t0, 4)
        if op.cancel.is_set():
            failure = Failure("cancelled", "cancelled before the new engine started")
            return self.rollback.failed(op, failure, prev)
        self.set_state(State.STARTING, f"{op.kind} {op.profile}/{op.mode}")
        with self._lock:
            self.active = {"profile": op.profile, "mode": op.mode}
        outcome = self.starts.start(op, profile, argv, timeout_s, op.cancel)
        if isinstance(outcome, EngineHandle):
            # The point of no return: a cancel accepted until now is honoured, a later one
            # is refused (409) instead of being acknowledged and ignored.
            with self._lock:
                late = op.cancel.is_set()
                op.committed = not late
            if not late:
                return self.starts.succeeded(op, outcome, prev)
            self.stop_engine(outcome, "failed")
            self.starts.keep_failed_tail(op, outcome)
            outcome = Failure("cancelled", "operation cancelled", log=str(outcome.log_path))
        return self.rollback.failed(op, outcome, prev)

    def _resumed(self, op: Operation) -> bool:
        """A switch cancelled before its engine stopped: whether the serving engine serves
        on (every part is asked: each puts back what it held)."""
        return any([part.resume_after_cancel(op) for part in self.parts])

    # ------------------------------------------------------------------ engine lines
    def _on_line(self, h: EngineHandle, line: str, facts: LineFacts) -> None:
        self.verifiers.on_line(h, line, facts)  # a failure there ends the start
        self.ring.add(line)
        self.bus.publish(ev.EngineLine(line, facts.record))
        op = self.op
        if op is None:
            return
        standby = getattr(self.launcher, "standby_group", None)
        ours = self.current is h or (standby is not None and h is standby.member)
        if facts.progress is not None and ours:
            phase, pct, msg = facts.progress
            op.emit("progress", phase=phase, percent=pct, message=msg)
        if ours:
            op.emit("log", line=line, source="engine")

    # ------------------------------------------------------------------ shutdown
    def shutdown(self, timeout: float | None = None) -> None:
        """Cancel any operation, stop the engine group, wait for operation threads."""
        self.shutting_down.set()
        op = self.op
        if op is not None:
            op.request_cancel("shutdown")
        holder = self.slot.holder
        if holder is not None:
            holder.request_cancel("shutdown")
        budget = timeout if timeout is not None else self.cfg.restart.stop_grace_s + 15
        deadline = time.monotonic() + budget
        self.slot.wait_idle(max(0.1, budget / 2))
        h = self.current
        if h is not None:
            if self.state not in (State.STOPPING, State.STOPPED):
                with contextlib.suppress(Exception):
                    self.set_state(State.STOPPING, "shutdown")
            self.stop_engine(h, "stopped")  # engine.pid goes with it
        with contextlib.suppress(Exception):
            if self.state == State.STOPPING:
                self.set_state(State.STOPPED, "shutdown")
        for part in self.parts:
            part.shutdown()
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
