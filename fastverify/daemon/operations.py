"""Operations and the one slot that runs them: at most one operation owns the engine.

`Operation`: identity (id, kind, profile, mode), an append-only event list that clients
stream, a cancel flag and, once finished, a typed `OpResult`.

`Slot`: the only lock around the engine. `claim(op)` takes it when free (or when its
holder has already answered and is about to let go); `wait_claim(op, withdrawn, stop)`
queues (FIFO) until it is free, giving up when the client goes away (`withdrawn()`) or
the daemon stops; a holder marked `preemptible` (a crash restart waiting out its backoff,
or given up) is asked to cancel and yields. `release(op)` is called by the holder's own
operation, whichever thread runs it. Every claim returns a typed `Claim`.
"""

from __future__ import annotations

import enum
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from fastverify import api_answers as a

if TYPE_CHECKING:
    from fastverify.daemon.auth import Caller


def _now() -> float:
    return time.time()


RESULTS = ("ok", "rolled_back", "failed", "cancelled", "unchanged")


@dataclass
class OpResult:
    """The answer to one operation (`to_dict()` is what clients and the journal get)."""

    id: str
    kind: str
    result: str  # one of RESULTS
    profile: str
    mode: str
    duration_s: float
    serving: dict[str, str | None]
    reason: str | None = None
    message: str | None = None
    log: str | None = None
    line: str | None = None
    weights: str = "real"  # "dummy": a timing trial
    by: str = "fastverifyd"  # who asked
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> a.OperationResult:
        out: a.OperationResult = {
            "id": self.id,
            "kind": self.kind,
            "result": self.result,
            "profile": self.profile,
            "mode": self.mode,
            "reason": self.reason,
            "message": self.message,
            "log": self.log,
            "line": self.line,
            "duration_s": self.duration_s,
            "serving": {"profile": self.serving.get("profile"), "mode": self.serving.get("mode")},
            "weights": self.weights,
            "by": self.by,
        }
        cast(dict[str, Any], out).update(self.extra)  # its NotRequired fields
        return out


class StartOf(Protocol):
    """What a start reads and keeps of what it runs for: an Operation, or a rollback's step
    inside one (rollback.Step), which streams into its operation."""

    kind: str
    profile: str
    mode: str
    phases: dict[str, float]
    verify: dict[str, Any] | None
    parts: dict[str, Any]  # a feature's own state for this start, by name

    def emit(self, event: str, **data: Any) -> None: ...


class Operation:
    """One operation: identity, event list, cancel flag and result."""

    def __init__(self, kind: str, profile: str, mode: str):
        self.id = secrets.token_hex(4)
        self.kind = kind
        self.profile = profile
        self.mode = mode
        self.started_at = _now()
        self.t0 = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self.result: a.OperationResult | None = None
        self.outcome: OpResult | None = None
        self.cancel = threading.Event()
        self.cancel_reason: str | None = None  # "cancelled" (client) | "preempted" | "shutdown"
        self.preemptible = False
        self.committed = False  # past the point where a cancel can still undo it
        self.verify: dict[str, Any] | None = None
        self.phases: dict[str, float] = {}
        self.load_format: str | None = None  # SGLang --load-format for it and its rollback
        self.eagle3_steps: int | None = None  # a timing trial's draft steps (this start only)
        self.parts: dict[str, Any] = {}  # a feature's own state for this operation, by name
        self.caller: Caller | None = None  # auth.Caller who asked (None: the daemon itself)
        self.cancelled_by: Caller | None = None  # auth.Caller who cancelled it
        # The engine this operation started and that failed: its own log file and last lines
        # (a failure's excerpt; never the rollback server's start-up).
        self.failed_engine: dict[str, Any] | None = None
        self._cond = threading.Condition()

    def restart_clock(self) -> None:
        """It starts now (a queued operation waited before it could run)."""
        self.started_at, self.t0 = _now(), time.monotonic()

    def elapsed(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def describe(self) -> a.OperationInFlight:
        return {
            "id": self.id,
            "kind": self.kind,
            "profile": self.profile,
            "mode": self.mode,
            "started_at": self.started_at,
            "elapsed_s": self.elapsed(),
            "by": self.caller.by if self.caller is not None else "fastverifyd",
        }

    def request_cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.cancel.set()

    @property
    def done(self) -> bool:
        return self.result is not None

    def moved(self) -> bool:
        """True once the operation has changed the daemon's state (it is past its start)."""
        with self._cond:
            return any(e["event"] == "state" for e in self.events)

    def emit(self, event: str, **data: Any) -> None:
        with self._cond:
            if self.result is None:
                self.events.append({"event": event, "ts": _now(), **data})
                self._cond.notify_all()

    def finish(self, outcome: OpResult) -> None:
        with self._cond:
            self.outcome = outcome
            self.result = outcome.to_dict()
            self.events.append({"event": "result", "ts": _now(), **self.result})
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> a.OperationResult | None:
        with self._cond:
            self._cond.wait_for(lambda: self.result is not None, timeout)
            return self.result

    def iter_events(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Every event from the first, blocking for new ones, ending with the result."""
        i = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._cond:
                while i >= len(self.events):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return
                    self._cond.wait(remaining if remaining is not None else 1.0)
                batch = self.events[i:]
                i = len(self.events)
            for ev in batch:
                yield ev
                if ev["event"] == "result":
                    return


class Claim(enum.Enum):
    TAKEN = "taken"
    BUSY = "busy"  # another operation holds the slot (not queued)
    WITHDRAWN = "withdrawn"  # the queued client went away
    STOPPING = "stopping"  # the daemon is shutting down


class Slot:
    """The one lock around the engine; see the module docstring."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holder: Operation | None = None
        self._queue: list[Operation] = []
        self.last: Operation | None = None  # the latest operation that held the slot

    @property
    def holder(self) -> Operation | None:
        return self._holder

    def in_flight(self) -> Operation | None:
        """The operation holding the slot that has not answered yet (None when idle)."""
        h = self._holder
        return h if h is not None and not h.done else None

    def queued(self) -> list[Operation]:
        with self._cond:
            return list(self._queue)

    def _take(self, op: Operation) -> None:
        self._holder = op
        self.last = op

    def claim(self, op: Operation, settle_s: float = 1.0) -> Claim:
        """Take the slot now if free, after asking a preemptible holder to yield, or once a
        holder that has already answered lets go (within `settle_s`). Of two claims at
        once exactly one wins."""
        deadline = time.monotonic() + settle_s
        with self._cond:
            while True:
                h = self._holder
                if h is None and not self._queue:
                    self._take(op)
                    return Claim.TAKEN
                if h is not None and h.preemptible:
                    h.request_cancel("preempted")
                    deadline = max(deadline, time.monotonic() + 10.0)
                elif h is not None and not h.done:
                    return Claim.BUSY
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return Claim.BUSY
                self._cond.wait(min(remaining, 0.05))

    def enqueue(self, op: Operation) -> None:
        """Take `op`'s place in the queue now; `wait_claim(op)` then waits from there."""
        with self._cond:
            self._queue.append(op)

    def wait_claim(
        self,
        op: Operation,
        *,
        withdrawn: Callable[[], bool] | None = None,
        stopping: threading.Event | None = None,
        poll_s: float = 0.2,
    ) -> Claim:
        """Queue until the slot is ours (FIFO, from `enqueue` when it was called), the client
        withdraws, or the daemon stops."""
        with self._cond:
            if op not in self._queue:
                self._queue.append(op)
            try:
                while True:
                    h = self._holder
                    if h is None and self._queue[0] is op:
                        self._take(op)
                        return Claim.TAKEN
                    if h is not None and h.preemptible:
                        h.request_cancel("preempted")
                    if stopping is not None and stopping.is_set():
                        return Claim.STOPPING
                    if op.cancel.is_set() or (withdrawn is not None and withdrawn()):
                        return Claim.WITHDRAWN
                    self._cond.wait(poll_s)
            finally:
                self._queue.remove(op)
                self._cond.notify_all()

    def release(self, op: Operation) -> None:
        """The holder lets go (a no-op for an operation that does not hold the slot)."""
        with self._cond:
            if self._holder is op:
                self._holder = None
                self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nobody holds the slot; True when idle."""
        with self._cond:
            return self._cond.wait_for(lambda: self._holder is None, timeout)
