"""The controller: the daemon's state machine and the switch / rollback / cancel / crash steps.

It owns the state (states.py), the active and last good (profile, mode), the engine handle
and the last failure, and runs one operation at a time through the `Slot`
(operations.py). Engine I/O is the launcher's (launcher.py); the restart policy is
restart.py's; what the daemon persists, journals, notifies and exports is done by
observers of the typed events it publishes (events.py, observers.py).

Steps
-----
switch/mode/restart: stop the engine -> STARTING -> ready -> VERIFYING -> READY; on failure
  FAILED -> ROLLING_BACK to the last good (profile, mode) -> READY (or FAILED): rollback.py.
cancel (POST /v1/cancel): the operation in flight stops where it is (a model load in
  STARTING: the new engine's group is stopped) and the previous (profile, mode) is put
  back; the result is `cancelled`.
crash: the engine died, lost a verified worker or stopped answering SGLang's
  /health_generate (watch.py) after READY -> BACKOFF (restart policy) -> STARTING ... READY;
  too many crashes in the window -> FAILED: crashes.py. An explicit operation pre-empts a
  crash restart waiting out its backoff.
recover: FAILED -> STARTING the last good (declared) profile after a backoff, up to
  daemon.recover_retries times: recovery.py.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from fastverify.config import weights_label
from fastverify.daemon import adaptive_check
from fastverify.daemon import events as ev
from fastverify.daemon.crashes import CrashSteps
from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle, Launcher
from fastverify.daemon.logs import LineFacts, LogRing
from fastverify.daemon.operations import Claim, Operation, OpResult, Slot
from fastverify.daemon.recovery import RecoverySteps
from fastverify.daemon.resolve import RequestError, Resolver
from fastverify.daemon.restart import CrashWindow, RestartPolicy
from fastverify.daemon.rollback import RollbackSteps
from fastverify.daemon.states import State, check_transition
from fastverify.daemon.statestore import StateStore
from fastverify.daemon.weights import WeightSteps
from fastverify.engines.sglang import load_format_of
from fastverify.redact import mask_argv

log = logging.getLogger("fastverifyd.controller")

# Operations counted as profile switches by the exporter (start-up and crash restarts are not).
SWITCH_KINDS = ("switch", "mode")
# Operations answered `unchanged` when they ask for what already serves (unless restart).
NOOP_KINDS = ("switch", "mode")
# Operations a client may cancel.
CANCELLABLE = ("switch", "mode", "restart", "start")
FAILED_TAIL_LINES = 12  # a failed engine's last log lines in the result (`log_tail`)


def _now() -> float:
    return time.time()


def _steps(op: Operation) -> dict[str, Any]:
    """A timing trial's draft steps (`eagle3_steps`) when the operation overrode them."""
    steps = getattr(op, "eagle3_steps", None)
    return {} if steps is None else {"eagle3_steps": steps}


def _callers(op: Operation) -> dict[str, Any]:
    """Who asked for `op` (`by`: a short text, `caller`: its fields; "fastverifyd" for the
    daemon's own start-up and crash restarts) and who cancelled it."""
    out: dict[str, Any] = {"by": op.caller.by if op.caller else "fastverifyd"}
    if op.caller:
        out["caller"] = op.caller.to_dict()
    if op.cancelled_by is not None:
        out["cancelled_by"] = op.cancelled_by.by
    return out


class Controller(CrashSteps, RollbackSteps, RecoverySteps, WeightSteps):
    """See the module docstring. Public methods are thread-safe."""

    def __init__(
        self,
        cfg: Any,
        engine: Any,
        launcher: Launcher,
        resolver: Resolver,
        store: StateStore,
        bus: ev.EventBus,
        ring: LogRing | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.engine = engine
        self.launcher = launcher
        self.resolver = resolver
        self.store = store
        self.bus = bus
        self.ring = ring or LogRing()
        self.clock = clock
        self.slot = Slot()
        self.crashes = CrashWindow(RestartPolicy.from_config(cfg.daemon))
        self._lock = threading.RLock()
        self.state = State.STOPPED
        self.since = _now()
        self.current: EngineHandle | None = None
        self.active: dict[str, str | None] = {"profile": None, "mode": None}
        self.last_good: dict[str, str] | None = None
        self.last_failure: dict[str, Any] | None = None
        self.restarts: collections.Counter[str] = collections.Counter()
        # Findings that hold while their cause does (status `findings`), by key.
        self.findings: dict[str, str] = {}
        self.shutting_down = threading.Event()
        self._threads: list[threading.Thread] = []
        self._wire_weight_cache(launcher)  # weights.py: the second process group
        launcher.on_line = self._on_line
        launcher.on_exit = self._on_exit

    # ------------------------------------------------------------------ plumbing
    @property
    def op(self) -> Operation | None:
        """The operation in flight (not yet answered), else None."""
        return self.slot.in_flight()

    def say(self, message: str, level: int = logging.INFO, *, stream: bool = True) -> None:
        """A daemon message: the log, the ring (`fastverifyctl logs`), the operation's stream
        (not with `stream=False`: a structured event or the result already says it)."""
        log.log(level, message)
        self.ring.add(message, source="daemon")
        op = self.op
        if op is not None and stream:
            op.emit("log", line=message, source="daemon")

    def set_state(self, new: State, why: str = "") -> None:
        with self._lock:
            old = self.state
            check_transition(old, new)
            if old == new:
                return
            self.state = new
            self.since = _now()
        op = self.op
        if op is not None:
            op.emit("state", state=str(new), previous=str(old), why=why)
        log.info("state %s -> %s%s", old, new, f" ({why})" if why else "")
        self.bus.publish(ev.StateChanged(old, new, why, op.id if op else None))

    def _spawn_thread(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=f"op-{target.__name__}", daemon=True)
        self._threads = [x for x in self._threads if x.is_alive()]
        self._threads.append(t)
        t.start()

    def _settings(self, h: EngineHandle | None) -> dict[str, str]:
        """The profile's settings + `weights` ("dummy" for a trial, read from the argv)."""
        if h is None:
            return {}
        return dict(h.expected_nccl, weights=weights_label(load_format_of(h.argv)))

    def _op_weights(self, op: Operation) -> str:
        """ "dummy" when the operation runs a trial (--load-format dummy), else "real"."""
        fmt = op.load_format
        return weights_label(fmt if fmt is not None else self.cfg.server.load_format)

    def _result(self, op: Operation, result: str, **kw: Any) -> OpResult:
        fields = {k: kw.pop(k) for k in ("reason", "message", "log", "line") if k in kw}
        return OpResult(
            id=op.id,
            kind=op.kind,
            result=result,
            profile=op.profile,
            mode=op.mode,
            duration_s=op.elapsed(),
            serving={"profile": self.active.get("profile"), "mode": self.active.get("mode")},
            extra={"weights": self._op_weights(op), **_steps(op), **_callers(op), **kw},
            **fields,
        )

    def _finish(self, op: Operation, outcome: OpResult, journal: bool = True) -> None:
        """Announce the result (journal, exporter) before the client sees it, then let go."""
        if journal:
            record = outcome.to_dict()
            self.bus.publish(
                ev.OperationFinished(op.id, op.kind, outcome.result, record, op.started_at)
            )
        op.finish(outcome)
        self.slot.release(op)

    def save_state(self) -> None:
        with self._lock:
            data = {
                "profile": self.active.get("profile"),
                "mode": self.active.get("mode"),
                "last_good": dict(self.last_good) if self.last_good else None,
                "last_failure": self.last_failure,
            }
        try:
            self.store.save_state(data)
        except OSError as exc:
            self.say(f"cannot save state: {exc}", logging.ERROR)

    def set_finding(self, key: str, message: str) -> None:
        """A finding shown by status until `clear_finding(key)` (its cause went away)."""
        with self._lock:
            self.findings[key] = message

    def clear_finding(self, key: str) -> None:
        with self._lock:
            self.findings.pop(key, None)

    def record_failure(self, failure: Failure, during: Operation | None, **extra: Any) -> None:
        drift = _possible_drift(self.engine)
        with self._lock:
            self.last_failure = dict(failure.to_dict(), at=_now(), **extra)
            if drift:  # an SGLang newer than its facts: the failure may be fastverify's
                self.last_failure["possible_drift"] = drift
                self.last_failure["message"] = f"{failure.message} (possible drift: {drift})"
            if during is not None:
                self.last_failure.update(profile=during.profile, mode=during.mode, op=during.kind)

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
        caller: Any = None,
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
        Raises RequestError: 409 busy, 422 invalid, 503 shutting down, 507 state dir."""
        if self.shutting_down.is_set():
            raise RequestError(503, "fastverifyd is shutting down")
        name, mode = self.resolver.defaults(name, mode, self.active)
        if not queue:
            self._refuse_if_busy()
        t0 = time.monotonic()
        profile, argv = self.resolver.resolve(
            name, mode, force, load_format=load_format, eagle3_steps=eagle3_steps
        )
        verdict = self.resolver.check_argv(argv)
        validate_s = time.monotonic() - t0
        if verdict.ok is False:
            raise RequestError(
                422,
                f"argv rejected for {name}/{mode}: {verdict.message}",
                argv=mask_argv(argv),
                reason="argv_rejected",
            )
        if not force:
            self.resolver.require_direct_p2p(profile)
        why = None if force else self.launcher.allreduce_refusal(profile, argv)
        if why:  # known before the load: nothing running is stopped for it
            raise RequestError(
                422,
                f"{why}; {kind} to {name}/{mode} refused, nothing was stopped or changed "
                "(--force starts it anyway)",
                reason="allreduce_backend_unavailable",
            )
        if kind in NOOP_KINDS and not restart:
            same = self._unchanged(kind, name, mode, profile, argv, caller)
            if same is not None:
                return same
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
            claim = self.slot.wait_claim(op, withdrawn=withdrawn, stopping=self.shutting_down)
        else:
            claim = self.slot.claim(op)
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
        notice = op.weights_notice = self._weights_notice(kind, mode, load_format)
        op.emit("accepted", op=op.describe(), argv=mask_argv(argv), check=verdict.to_dict(),
                weights_notice=notice)  # fmt: skip
        self._say_notice(notice)  # before anything stops
        self.bus.publish(ev.OperationStarted(op.id, kind, name, mode))
        self._spawn_thread(self._run_op, op, profile, argv, timeout_s)
        return op

    def _unchanged(
        self, kind: str, name: str, mode: str, profile: Any, argv: list[str], caller: Any
    ) -> Operation | None:
        """An answered operation (`unchanged`) when the request asks for what serves now."""
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
        message = (
            f"{name}/{mode} is already serving (engine pid {h.pid}); nothing changed"
            " (to restart it anyway: `profile set --restart`, or `fastverifyctl restart`)"
        )
        op.finish(self._result(op, "unchanged", message=message, pid=h.pid))
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

    def cancel(self, caller: Any = None) -> Operation | None:
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
        self, op: Operation, profile: Any, argv: list[str], timeout_s: float | None
    ) -> None:
        try:
            outcome = self._switch(op, profile, argv, timeout_s)
        except Exception as exc:  # never leave a caller without an answer
            log.exception("operation %s failed unexpectedly", op.id)
            outcome = self._result(op, "failed", reason="internal_error", message=str(exc))
        self._finish(op, outcome)

    # ------------------------------------------------------------------ the switch
    def _switch(
        self, op: Operation, profile: Any, argv: list[str], timeout_s: float | None
    ) -> OpResult:
        prev = dict(self.active)
        self.say(f"{op.kind}: {prev.get('profile')}/{prev.get('mode')} -> {op.profile}/{op.mode}")
        t0 = time.monotonic()
        self._stop_current(f"{op.kind} to {op.profile}/{op.mode}")
        op.phases["stop"] = round(time.monotonic() - t0, 4)
        if op.cancel.is_set():
            failure = Failure("cancelled", "cancelled before the new engine started")
            return self._failed(op, failure, prev)
        self.set_state(State.STARTING, f"{op.kind} {op.profile}/{op.mode}")
        with self._lock:
            self.active = {"profile": op.profile, "mode": op.mode}
        outcome = self._start(op, profile, argv, timeout_s, op.cancel)
        if isinstance(outcome, EngineHandle):
            # The point of no return: a cancel accepted until now is honoured, a later one
            # is refused (409) instead of being acknowledged and ignored.
            with self._lock:
                late = op.cancel.is_set()
                op.committed = not late
            if not late:
                return self._succeeded(op, outcome, prev)
            self.stop_engine(outcome, "failed")
            self._keep_failed_tail(op, outcome)
            outcome = Failure("cancelled", "operation cancelled", log=str(outcome.log_path))
        return self._failed(op, outcome, prev)

    def _stop_current(self, why: str) -> None:
        h = self.current
        if h is None:
            return
        if h.alive():
            self.set_state(State.STOPPING, why)
        self.stop_engine(h, "stopped")

    def stop_engine(self, h: EngineHandle, why: str) -> None:
        mine = self.current is h
        self.launcher.stop(h, forget=mine)
        if mine:
            self.bus.publish(
                ev.EngineDown(h.profile, h.mode, self.engine.name, self._settings(h), why)
            )

    def _start(
        self,
        op: Operation,
        profile: Any,
        argv: list[str],
        timeout_s: float | None,
        cancel: threading.Event,
        adopt: EngineHandle | None = None,
    ) -> EngineHandle | Failure:
        """Spawn (or adopt), wait for readiness, verify. The engine is stopped on failure."""
        timeout = timeout_s or self.cfg.daemon.readiness_timeout_s
        if adopt is None and (taken := self.launcher.port_in_use(argv)) is not None:
            self.say(f"{op.kind} {op.profile}/{op.mode}: {taken.message}", logging.WARNING)
            return taken  # said before a load that would fail only once it is over
        if adopt is None:
            h = self._spawn_engine(op, profile, argv, cancel)  # weights.py: the cache's gate
            if isinstance(h, Failure):
                return h
        else:
            h = adopt
        with self._lock:
            self.current = h
        op.emit("engine", pid=h.pid, log=str(h.log_path), argv=mask_argv(h.argv))
        self.bus.publish(
            ev.EngineStarting(
                h.profile, h.mode, self.engine.name, self._settings(h), h.pid, str(h.log_path)
            )
        )
        beat = lambda: self.bus.publish(ev.EngineWaiting(h.profile, h.mode))  # noqa: E731
        failure = self.launcher.await_ready(h, timeout, cancel, heartbeat=beat)
        if failure is None:
            op.phases.setdefault("engine_ready", round(h.ready_s or 0.0, 4))
            self.set_state(State.VERIFYING, f"engine ready after {h.ready_s or 0.0:.2f} s")
            t0 = time.monotonic()
            failure, details = self.launcher.verify(h)
            op.emit("verify", ok=failure is None, message=details["env"].get("message", ""))
            op.phases.setdefault("verify", round(time.monotonic() - t0, 4))
            if failure is None and cancel.is_set():
                failure = Failure("cancelled", "operation cancelled", log=str(h.log_path))
            if failure is None and adopt is None:
                failure = self._weights_done(op, h)
            if failure is None:
                op.verify = details
                return h
        level = logging.INFO if failure.reason == "cancelled" else logging.WARNING
        self.say(
            f"{op.kind} {h.profile}/{h.mode} failed: {failure.message} (log: {h.log_path})", level
        )
        self.stop_engine(h, "failed")  # stops its tail: every line it wrote has been read
        self._keep_failed_tail(op, h)
        failure = self._weights_refused(h, failure)
        if self._again_from_disk(op, h, failure, cancel):
            return self._start(op, profile, argv, timeout_s, cancel)
        return failure

    def _keep_failed_tail(self, op: Operation, h: EngineHandle) -> None:
        """The first engine of `op` that failed: its log file and last lines (masked), for
        the result's excerpt. A rollback's start (a `_Step`) never replaces it."""
        if isinstance(op, Operation) and op.failed_engine is None:
            op.failed_engine = {
                "log": str(h.log_path),
                "lines": h.recent_lines()[-FAILED_TAIL_LINES:],
            }

    def _serving(self, h: EngineHandle, why: str) -> None:
        h.serving = True
        with self._lock:
            self.active = {"profile": h.profile, "mode": h.mode}
            self.last_good = {"profile": h.profile, "mode": h.mode}
        self.save_state()
        self.launcher.mark_verified(h)
        self.set_state(State.READY, why)
        self.bus.publish(
            ev.EngineUp(
                h.profile,
                h.mode,
                self.engine.name,
                h.url,
                self._settings(h),
                h.pid,
                h.engine_id,
                h.ready_s or 0.0,
                h.adopted,
                h.engine_env,
                h.allreduce,
            )
        )

    def _succeeded(self, op: Operation, h: EngineHandle, prev: dict[str, Any]) -> OpResult:
        t0 = time.monotonic()
        if op.kind != "crash_restart":
            self.crashes.clear()
        if op.kind not in ("crash_restart", "recover"):
            self.recovery.forget()  # an operator's start: FAILED's retries count afresh
        if op.kind == "switch":
            self.clear_finding("profile_fallback")  # the operator chose a profile
        self._serving(h, f"{h.profile}/{h.mode} verified")
        op.phases["persist"] = round(time.monotonic() - t0, 4)
        trial = weights_label(load_format_of(h.argv)) == "dummy"
        message = (
            f"{h.profile}/{h.mode} is serving"
            + (" on dummy weights (a trial: random output, timings only)" if trial else "")
            + f" (ready in {h.ready_s or 0.0:.2f} s, verified)"
            + (f"; {h.weights['text']}" if h.weights else "")
        )
        self.say(message, stream=False)  # the result says it
        return self._result(
            op,
            "ok",
            log=str(h.log_path),
            message=message,
            engine_ready_s=round(h.ready_s or 0.0, 3),
            verify=op.verify,
            engine_env=h.engine_env,  # what the engine added to its workers' NCCL env
            tuner=h.tuner,  # what NCCL's INFO output confirmed (None: no tuner profile)
            allreduce=h.allreduce,  # the TP all-reduce backend SGLang confirmed per rank
            speculation=adaptive_check.summary(list(h.argv)),  # mode adaptive: its plan
            pid=h.pid,
            previous={"profile": prev.get("profile"), "mode": prev.get("mode")},
            phases=dict(op.phases),
            weight_load=h.weights,  # where the weights came from (daemon/weights.py)
            weights_notice=op.weights_notice,
        )

    # ------------------------------------------------------------------ crashes
    def _on_line(self, h: EngineHandle, line: str, facts: LineFacts) -> None:
        self.ring.add(line)
        self.bus.publish(ev.EngineLine(line, facts.record))
        op = self.op
        if op is None:
            return
        if facts.progress is not None and self.current is h:
            phase, pct, msg = facts.progress
            op.emit("progress", phase=phase, percent=pct, message=msg)
        if self.current is h:
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
        budget = timeout if timeout is not None else self.cfg.daemon.stop_grace_s + 15
        deadline = time.monotonic() + budget
        self.slot.wait_idle(max(0.1, budget / 2))
        h = self.current
        if h is not None:
            if self.state not in (State.STOPPING, State.STOPPED):
                with contextlib.suppress(Exception):
                    self.set_state(State.STOPPING, "shutdown")
            self.stop_engine(h, "stopped")
            self.store.clear_pid()
        with contextlib.suppress(Exception):
            if self.state == State.STOPPING:
                self.set_state(State.STOPPED, "shutdown")
        self.cache.shutdown()
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))


def _possible_drift(engine: Any) -> str | None:
    """The facts' warning when the server's SGLang is newer than the newest known release
    (log lines, flags or metrics may have changed under fastverify), else None."""
    try:
        return engine.facts().warning
    except (AttributeError, ValueError):
        return None
