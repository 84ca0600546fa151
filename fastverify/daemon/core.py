"""The controller's typed core: the state every step reads and writes, and the plumbing they
share (messages, state transitions, results, findings, the saved state).

`Core` holds the daemon state (states.py), the active and last good (profile, mode), the
engine handle, the last failure, the slot (operations.py), the verifiers (verifier.py) and
the collaborators (launcher, resolver, state store, event bus). The steps (starting.py,
crashes.py, rollback.py, recovery.py, weights.py) each receive the core they act on;
`Controller` (controller.py) is the core with its steps composed (`compose`) and the public
requests on top.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastverify.config import Config, weights_label
from fastverify.daemon import events as ev
from fastverify.daemon.checks import default_checks
from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle, Launcher
from fastverify.daemon.logs import LogRing
from fastverify.daemon.operations import Operation, OpResult, Slot
from fastverify.daemon.parts import Part, switch_figures
from fastverify.daemon.resolve import Resolver
from fastverify.daemon.restart import CrashWindow, RestartPolicy
from fastverify.daemon.states import State, check_transition
from fastverify.daemon.statestore import StateStore
from fastverify.daemon.verifier import Verifier, Verifiers
from fastverify.engines.base import Engine
from fastverify.engines.sglang import load_format_of

if TYPE_CHECKING:
    pass

log = logging.getLogger("fastverifyd.controller")

Target = dict[str, str | None]  # {"profile": ..., "mode": ...}


def now() -> float:
    return time.time()


def _steps(op: Operation) -> dict[str, Any]:
    """A timing trial's draft steps (`eagle3_steps`) when the operation overrode them."""
    steps = getattr(op, "eagle3_steps", None)
    return {} if steps is None else {"eagle3_steps": steps}


def _callers(op: Operation) -> dict[str, Any]:
    """Who asked for `op` (`caller`: its fields; `by`, a short text, is the result's own)
    and who cancelled it."""
    out: dict[str, Any] = {}
    if op.caller:
        out["caller"] = op.caller.to_dict()
    if op.cancelled_by is not None:
        out["cancelled_by"] = op.cancelled_by.by
    return out


@dataclass
class RecoveryBudget:
    """Retries of the last good profile out of FAILED (recovery.py; under the core's lock)."""

    attempts: int = 0  # retries since the count was last forgotten
    next_at: float | None = None  # clock time of the scheduled retry
    running: bool = False
    spent: bool = False
    last: str | None = None  # the last retry's outcome, for status
    ready_at: float | None = None  # clock time READY was first seen by the tick

    def forget(self) -> None:
        self.attempts, self.next_at, self.spent, self.last = 0, None, False, None


class Core:
    """See the module docstring. Fields guarded by `_lock` are read and written under it."""

    def __init__(
        self,
        cfg: Config,
        engine: Engine,
        launcher: Launcher,
        resolver: Resolver,
        store: StateStore,
        bus: ev.EventBus,
        ring: LogRing | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        checks: Iterable[Verifier] | None = None,
    ) -> None:
        """`checks`: the verifiers, in order (None: checks.default_checks)."""
        self.cfg = cfg
        self.engine = engine
        self.launcher = launcher
        self.resolver = resolver
        self.store = store
        self.bus = bus
        self.ring: LogRing = ring or LogRing()
        self.clock = clock
        self.slot = Slot()
        self.crashes = CrashWindow(RestartPolicy.from_config(cfg.restart))
        self._lock = threading.RLock()
        self.state: State = State.STOPPED
        self.since: float = now()
        self.current: EngineHandle | None = None
        self.active: Target = {"profile": None, "mode": None}
        self.last_good: dict[str, str] | None = None
        self.last_failure: dict[str, Any] | None = None
        self.restarts: collections.Counter[str] = collections.Counter()
        self.recovery = RecoveryBudget()  # FAILED's retries (recovery.py)
        # Findings that hold while their cause does (status `findings`), by key.
        self.findings: dict[str, str] = {}
        self.shutting_down = threading.Event()
        self._threads: list[threading.Thread] = []
        if checks is None:
            checks = default_checks(launcher, resolver)
        self.verifiers = Verifiers(checks, say=self.say)
        # the features that ride along every start (parts.py), composed by the controller
        self.parts: list[Part] = []
        self.compose()

    def compose(self) -> None:
        """Build the steps that act on this core (the controller's; none for a bare core)."""

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
            self.since = now()
        op = self.op
        if op is not None:
            op.emit("state", state=str(new), previous=str(old), why=why)
        log.info("state %s -> %s%s", old, new, f" ({why})" if why else "")
        self.bus.publish(ev.StateChanged(old, new, why, op.id if op else None))

    def spawn_thread(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=f"op-{target.__name__}", daemon=True)
        self._threads = [x for x in self._threads if x.is_alive()]
        self._threads.append(t)
        t.start()

    def settings(self, h: EngineHandle | None) -> dict[str, str]:
        """The profile's settings + `weights` ("dummy" for a trial, read from the argv) +
        what the parts add (the speculation part: a drafting server's `acceptance_source`)."""
        if h is None:
            return {}
        out = dict(h.expected_nccl, weights=weights_label(load_format_of(h.argv)))
        for part in self.parts:
            out.update(part.settings(h))
        return out

    def op_weights(self, op: Operation) -> str:
        """ "dummy" when the operation runs a trial (--load-format dummy), else "real"."""
        fmt = op.load_format
        return weights_label(fmt if fmt is not None else self.cfg.server.load_format)

    def result(self, op: Operation, result: str, **kw: Any) -> OpResult:
        fields = {k: kw.pop(k) for k in ("reason", "message", "log", "line") if k in kw}
        switch = switch_figures(self.parts, op)  # the front door's, when it stopped one
        if switch is not None:
            kw["switch"] = switch
        return OpResult(
            id=op.id,
            kind=op.kind,
            result=result,
            profile=op.profile,
            mode=op.mode,
            duration_s=op.elapsed(),
            serving={"profile": self.active.get("profile"), "mode": self.active.get("mode")},
            weights=self.op_weights(op),
            by=op.caller.by if op.caller else "fastverifyd",
            extra={**_steps(op), **_callers(op), **kw},
            **fields,
        )

    def finish(self, op: Operation, outcome: OpResult, journal: bool = True) -> None:
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

    def record_failure(self, failure: Failure, during: Any = None, **extra: Any) -> None:
        drift = _possible_drift(self.engine)
        with self._lock:
            self.last_failure = dict(failure.to_dict(), at=now(), **extra)
            if drift:  # an SGLang newer than its facts: the failure may be fastverify's
                self.last_failure["possible_drift"] = drift
                self.last_failure["message"] = f"{failure.message} (possible drift: {drift})"
            if during is not None:
                self.last_failure.update(profile=during.profile, mode=during.mode, op=during.kind)

    def stop_engine(self, h: EngineHandle, why: str) -> None:
        mine = self.current is h
        self.launcher.stop(h, forget=mine)
        if mine:
            self.bus.publish(
                ev.EngineDown(h.profile, h.mode, self.engine.name, self.settings(h), why)
            )

    def stop_current(self, why: str) -> None:
        h = self.current
        if h is None:
            return
        if h.alive():
            self.set_state(State.STOPPING, why)
        self.stop_engine(h, "stopped")

    def wait_state_dir(
        self,
        waiting: str,
        then: str,
        pause: Callable[[float], bool],
        tell: Callable[[str, int], None],
    ) -> bool:
        """Wait until the state dir takes a start's writes (pid file, engine log): a start
        on a full disk would only fail again. Each try (the wait grows to the restart
        policy's cap) sets the `state_dir` finding and `tell(message, attempt)`s it;
        `pause(delay)` waits, True: give up (the result is then False). `waiting` names
        who waits ("rollback to p/m"), `then` what follows once the dir works again."""
        attempt = 0
        try:
            while (problem := self.store.check_writable()) is not None:
                attempt += 1
                delay = self.crashes.policy.delay(attempt)
                msg = f"{waiting} waits for the state dir: {problem}; retrying in {delay:.1f} s"
                self.set_finding("state_dir", msg)
                tell(msg, attempt)
                if pause(delay):
                    return False
            if attempt:
                self.say(f"state dir {self.store.dir} is writable again; {then}")
            return True
        finally:
            self.clear_finding("state_dir")

    def slot_preemptible(self, op: Operation, flag: bool) -> None:
        """Let an explicit request pre-empt `op` (a crash restart waiting out its backoff)."""
        with self.slot._cond:
            op.preemptible = flag


def _possible_drift(engine: Engine) -> str | None:
    """The facts' warning when the server's SGLang is newer than the newest known release
    (log lines, flags or metrics may have changed under fastverify), else None."""
    try:
        warning: str | None = engine.facts().warning
        return warning
    except (AttributeError, ValueError):
        return None
