"""Typed events the controller publishes, and the bus that hands them to observers.

Observers (journal, sd_notify, exporter feed, status; see daemon/observers.py) subscribe
with `EventBus.subscribe(fn)`; `publish(event)` calls each one in order on the publishing
thread. An observer that raises is logged and skipped: it never stops the controller.

Events
------
StateChanged       old -> new state, why, the operation in flight (id) if any.
EngineStarting     a new engine process was spawned for (profile, mode): pid, log path.
EngineWaiting      still waiting for the starting engine (every ~10 s of a long load).
EngineUp           the engine is verified and serving: url, identity, profile settings.
EngineDown         the engine stopped serving (stopped, crashed, failed to start).
EngineLine         one masked line of the engine's output with its parsed record (parsed
                   once, by the launcher; observers never parse the line again).
Crashed            the engine died (or lost a worker) after READY; counted by reason.
OperationStarted   an operation (switch, mode, restart, ...) took the slot: who asked, what
                   served; journaled before it acts (a kill -9 cannot lose it).
OperationFinished  an operation ended: its result record (as answered to the client).
BaselineRecorded   a baseline measurement was stored.
DecisionRecorded   a tuning decision was stored (fastverifyctl tune).
AcceptanceRecorded an accepted-drafts histogram was stored (fastverify.daemon.acceptance).
PlanStored         a speculation plan was stored (`POST /v1/spec/plan`).
WeightsLoaded      a start came up: where its weights came from (the cache or disk, why),
                   how long they took and the start's split (daemon/weights.py).

Every event but the three *Recorded ones and PlanStored carries `ts`, when it happened
(keyword-only).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastverify.daemon.states import State

log = logging.getLogger("fastverifyd.events")


def _now() -> float:
    return time.time()


@dataclass(frozen=True)
class _Stamped:
    """An event that carries when it happened (`ts`, keyword-only: set when it is made)."""

    ts: float = field(default_factory=_now, kw_only=True)


@dataclass(frozen=True)
class StateChanged(_Stamped):
    old: State
    new: State
    why: str = ""
    op_id: str | None = None


@dataclass(frozen=True)
class EngineStarting(_Stamped):
    profile: str
    mode: str
    engine: str
    settings: Mapping[str, str]
    pid: int
    log: str


@dataclass(frozen=True)
class EngineWaiting(_Stamped):
    """Still waiting for a starting engine (published every ~10 s of a long load)."""

    profile: str
    mode: str


@dataclass(frozen=True)
class EngineUp(_Stamped):
    profile: str
    mode: str
    engine: str
    url: str
    settings: Mapping[str, str]
    pid: int
    engine_id: str
    start_seconds: float
    adopted: bool = False
    engine_env: Mapping[str, Any] | None = None  # variables the engine adds (EngineEnv.to_dict)
    # what each part keeps of this engine, by its name (part.engine_fields: parts.py)
    parts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineDown(_Stamped):
    profile: str | None
    mode: str | None
    engine: str
    settings: Mapping[str, str]
    why: str  # "stopped" | "crashed" | "failed"


@dataclass(frozen=True)
class EngineLine(_Stamped):
    line: str
    record: Mapping[str, Any] | None
    live: bool = True


@dataclass(frozen=True)
class Crashed(_Stamped):
    reason: str
    message: str
    profile: str
    mode: str
    log: str | None = None
    line: str | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class OperationStarted(_Stamped):
    op_id: str
    kind: str
    profile: str
    mode: str
    by: str = "fastverifyd"  # who asked (auth.Caller.by)
    caller: Mapping[str, Any] | None = None
    previous: Mapping[str, Any] | None = None  # what served when it was asked


@dataclass(frozen=True)
class OperationFinished(_Stamped):
    op_id: str
    kind: str
    result: str  # "ok" | "rolled_back" | "failed" | "cancelled"
    record: Mapping[str, Any]
    started_at: float


@dataclass(frozen=True)
class BaselineRecorded:
    profile: str
    tokens_per_second: float
    per_request_tokens_per_second: float
    measured_at: float
    concurrency: int | None = None  # concurrent requests it was measured at


@dataclass(frozen=True)
class DecisionRecorded:
    profile: str
    mode: str
    backend: str
    applied: bool


@dataclass(frozen=True)
class AcceptanceRecorded:
    record: Mapping[str, Any]  # profile, mode, steps, weights, histogram, usable, ...


@dataclass(frozen=True)
class PlanStored:
    plan: Mapping[str, Any]  # acceptance.save_plan's record


@dataclass(frozen=True)
class WeightsLoaded(_Stamped):
    profile: str
    mode: str
    weights: Mapping[str, Any]  # source, seconds, bytes, reason, text, phases, fallback


Event = (
    StateChanged
    | EngineStarting
    | EngineWaiting
    | EngineUp
    | EngineDown
    | EngineLine
    | Crashed
    | OperationStarted
    | OperationFinished
    | BaselineRecorded
    | DecisionRecorded
    | AcceptanceRecorded
    | PlanStored
    | WeightsLoaded
)


class EventBus:
    """Synchronous publish/subscribe; safe to publish from any thread."""

    def __init__(self) -> None:
        self._subs: list[Callable[[Event], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, fn: Callable[[Event], None]) -> None:
        with self._lock:
            self._subs.append(fn)

    def unsubscribe(self, fn: Callable[[Event], None]) -> None:
        with self._lock:
            if fn in self._subs:
                self._subs.remove(fn)

    def publish(self, event: Event) -> None:
        with self._lock:
            subs = list(self._subs)
        for fn in subs:
            try:
                fn(event)
            except Exception:
                log.exception("event observer %r failed on %s", fn, type(event).__name__)
