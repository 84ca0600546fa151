"""Observers of the controller's events: journal, sd_notify, exporter feed, status figures.

Each observer is a callable subscribed to the EventBus (events.py); none of them is
called by name from the controller, and none can stop it (the bus logs their errors).

- `Journal(store)`: transitions, crashes and finished operations -> journal.jsonl.
- `SdNotify(notifier, status_line)`: STATUS= on every state, EXTEND_TIMEOUT_USEC= while an
  engine loads, READY=1 at the first READY.
- `ExporterFeed(hub)`: the exporter hub's typed feed (engine identity, parsed log records,
  restarts, switch results, baselines) and the runtime's engine URL (SGLang /metrics poll,
  profile windows): set at EngineUp, cleared whenever the state leaves READY.
- `LiveFigures()`: the decode throughput shown by `status`, only while READY and fresh.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastverify.daemon import events as ev
from fastverify.daemon.failures import REASONS
from fastverify.daemon.notify import Notifier
from fastverify.daemon.states import State
from fastverify.daemon.statestore import StateStore

if TYPE_CHECKING:
    from fastverify.exporters.hub import MetricsHub
    from fastverify.exporters.runtime import ExporterRuntime

log = logging.getLogger("fastverifyd.observers")

# Operations counted as profile switches by the exporter (start-up and crash restarts are not).
SWITCH_KINDS = ("switch", "mode")
# Operations counted as engine restarts by their kind.
RESTART_KINDS = ("switch", "mode", "restart")
DOWNTIME_KINDS = (*RESTART_KINDS, "crash_restart")  # their result's `switch.downtime_s`
# `reason` values of fastverify_engine_restarts_total known in advance: the operations that
# restart the engine, and the crash reasons of failures.py (an unrecognised exit is
# `exited(CODE)`, which cannot be known before it happens)
RESTART_REASONS = (*RESTART_KINDS, *REASONS)
EXTEND_S = 30.0


class Journal:
    def __init__(self, store: StateStore) -> None:
        self.store = store

    def __call__(self, e: ev.Event) -> None:
        rec: dict[str, Any] | None = None
        if isinstance(e, ev.StateChanged):
            rec = {"type": "transition", "from": str(e.old), "to": str(e.new), "ts": e.ts}
            if e.why:
                rec["why"] = e.why
            if e.op_id:
                rec["op"] = e.op_id
        elif isinstance(e, ev.Crashed):
            rec = {
                "type": "crash",
                "ts": e.ts,
                "reason": e.reason,
                "message": e.message,
                "line": e.line,
                "log": e.log,
                "exit_code": e.exit_code,
            }
        elif isinstance(e, ev.OperationStarted):  # before it acts: see interrupted.py
            rec = {"type": "request", "id": e.op_id, "kind": e.kind, "profile": e.profile,
                   "mode": e.mode, "by": e.by, "caller": e.caller, "previous": e.previous,
                   "ts": e.ts}  # fmt: skip
        elif isinstance(e, ev.OperationFinished):
            rec = {
                "type": "switch",
                **{k: v for k, v in e.record.items() if k not in ("verify", "log_tail")},
                "started_at": e.started_at,
                "finished_at": e.ts,
            }
        if rec is None:
            return
        try:
            self.store.append_journal(rec)
        except OSError as exc:
            log.error("cannot append to the journal: %s", exc)


class SdNotify:
    def __init__(self, notifier: Notifier, status_line: Callable[[], str]) -> None:
        self.notifier = notifier
        self.status_line = status_line

    def __call__(self, e: ev.Event) -> None:
        if isinstance(e, ev.EngineWaiting):
            self.notifier.extend_timeout(EXTEND_S)
        elif isinstance(e, ev.StateChanged):
            if e.new in (State.STARTING, State.ROLLING_BACK):
                self.notifier.extend_timeout(EXTEND_S)
            self.notifier.status(self.status_line())
            if e.new == State.READY and not self.notifier.ready_sent:
                self.notifier.ready(self.status_line())


class ExporterFeed:
    """Typed feed of the exporter hub (see the module docstring)."""

    def __init__(self, hub: MetricsHub) -> None:
        self.hub = hub
        # every restart reason the daemon can report, at 0 before the first restart
        hub.daemon.declare_restart_reasons(RESTART_REASONS)
        self.runtime: ExporterRuntime | None = None  # ExporterRuntime once started
        self._url: str | None = None

    def _set_url(self, url: str | None) -> None:
        self._url = url
        if self.runtime is not None:
            self.runtime.set_server_url(url)

    def attach_runtime(self, runtime: ExporterRuntime | None) -> None:
        self.runtime = runtime
        self._set_url(self._url)

    def __call__(self, e: ev.Event) -> None:
        hub = self.hub
        if isinstance(e, ev.EngineLine):
            hub.logs.on_record(e.record, live=e.live)
        elif isinstance(e, ev.StateChanged):
            if e.new != State.READY and self._url is not None:
                self._set_url(None)
        elif isinstance(e, ev.EngineStarting):
            hub.set_engine(False, e.profile, e.mode, e.settings, e.engine, None)
        elif isinstance(e, ev.EngineUp):
            hub.set_engine(True, e.profile, e.mode, e.settings, e.engine, e.url)
            hub.daemon.set_start_seconds(e.start_seconds)
            self._set_url(e.url)
        elif isinstance(e, ev.EngineDown):
            hub.set_engine(False, e.profile, e.mode, e.settings, e.engine, None)
            self._set_url(None)
        elif isinstance(e, ev.Crashed):
            hub.daemon.on_restart(e.reason)
        elif isinstance(e, ev.OperationStarted):
            if e.kind in RESTART_KINDS:
                hub.daemon.on_restart(e.kind)
        elif isinstance(e, ev.OperationFinished):
            if e.kind in SWITCH_KINDS:
                hub.daemon.on_switch(e.result)
            door = e.record.get("switch") or {}
            # an engine that served was stopped (a first start takes nothing down)
            if e.kind in DOWNTIME_KINDS and door.get("downtime_s") is not None:
                last = {"kind": e.kind, "profile": str(e.record.get("profile") or ""),
                        "result": e.result}  # fmt: skip
                hub.daemon.on_downtime(door.get("mode") or "none", door["downtime_s"], last)
        elif isinstance(e, ev.BaselineRecorded):
            hub.baselines.set(
                e.profile,
                e.tokens_per_second,
                e.per_request_tokens_per_second,
                e.measured_at,
                e.concurrency,
            )
        elif isinstance(e, ev.DecisionRecorded):
            hub.daemon.set_decision(e.profile, e.mode, e.backend, e.applied)
        elif isinstance(e, ev.WeightsLoaded):
            hub.daemon.set_start_phases(e.weights.get("phases"))


class LiveFigures:
    """Decode throughput for `status`: from decode records while READY, dropped as soon as
    the state leaves READY and after `fresh_s` without a decode line."""

    def __init__(self, fresh_s: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.fresh_s = fresh_s
        self.clock = clock
        self._ready = False
        self._tps: tuple[float, float] | None = None  # (value, at)
        self._lock = threading.Lock()

    def __call__(self, e: ev.Event) -> None:
        with self._lock:
            if isinstance(e, ev.StateChanged):
                self._ready = e.new == State.READY
                if not self._ready:
                    self._tps = None
            elif isinstance(e, ev.EngineLine) and self._ready and e.live and e.record:
                value = e.record.get("gen_throughput")
                if e.record.get("kind") == "decode" and value is not None:
                    with contextlib.suppress(TypeError, ValueError):
                        self._tps = (float(value), self.clock())

    def tokens_per_second(self) -> float | None:
        with self._lock:
            if self._tps is None or not self._ready:
                return None
            value, at = self._tps
            return value if self.clock() - at <= self.fresh_s else None
