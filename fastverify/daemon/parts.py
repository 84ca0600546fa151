"""A feature as a part of the daemon: what the supervisor and the control API ask of every
part, so that none of them names a feature.

A part owns its per-engine state (`EngineHandle.parts[NAME]`) and per-operation state
(`Operation.parts[NAME]`), what it adds to each start through the launcher's hooks (the
server's environment, readers of its log lines, flags set aside when argvs are compared),
its say in each start (`accepted`, `around_spawn`, `after_ready`, `after_failure`, which
the controller's start calls over every part), the fields it adds to an operation's result
and to the engine's status, its exporter source (added to the hub in `attach`, fed from what
the part hears on the bus), the labels it adds to the engine's settings, its section of
`status` (`STATUS`, declared by `SECTION`: its fields, the lines `fastverifyctl status` prints
and the modes whose loads it serves from shared memory; a part may have none), what
it takes over at start-up from a killed daemon (`adopt`), what a second engine would share
with the serving one through it (`sharing`, the front door's standby asks), its say in a
switch and around the serving engine (`plan_switch`, `before_stop`, `resume_after_cancel`,
`on_crash`, `on_serving`, `switch_figures`, `tick`: the controller's switch, crash and
start steps call them over every part), and what it does when the configuration is re-read
and when the daemon stops. docs/architecture.md ("Parts") says how to add one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from fastverify.api_models import PART_SHARED_LOAD_S, PART_SHARED_LOADS, PART_SUMMARY
from fastverify.config import Config
from fastverify.daemon.events import EventBus
from fastverify.daemon.failures import Failure
from fastverify.frontdoor.standby import Fit, Sharing

if TYPE_CHECKING:  # the parts' collaborators, which import this module
    from fastverify.daemon.launcher import EngineHandle, Launcher
    from fastverify.daemon.operations import Operation, StartOf
    from fastverify.daemon.statestore import StateStore
    from fastverify.engines.base import Engine
    from fastverify.exporters.hub import MetricsHub

__all__ = [
    "BasePart",
    "Fit",
    "Part",
    "PartCore",
    "Sharing",
    "Spawn",
    "section",
    "switch_figures",
    "switch_plan",
]

# argv -> the engine, or the failure that ends the start (the launcher's, or a part's around it)
Spawn = Callable[[list[str]], "EngineHandle | Failure"]


def section(
    fields: dict[str, Any],
    summary: list[str],
    shared_loads: list[str],
    shared_load_s: float | None = None,
) -> dict[str, Any]:
    """A part's status section: its own fields with the keys every section has."""
    return {
        **fields,
        PART_SUMMARY: summary,
        PART_SHARED_LOADS: shared_loads,
        PART_SHARED_LOAD_S: shared_load_s if shared_loads else None,
    }


class PartCore(Protocol):
    """What a part reads of the controller's core (core.Core is one): core.py imports the
    parts, so a part that needs no more than this names the core by what it reads."""

    launcher: Launcher
    store: StateStore
    current: EngineHandle | None  # the serving engine (None: none)
    active: dict[str, str | None]  # {"profile": ..., "mode": ...} asked of it
    _lock: threading.RLock  # guards `current` and `active`

    def say(self, message: str, level: int = ..., *, stream: bool = ...) -> None: ...


class Part(Protocol):
    NAME: str  # its key in handle.parts and op.parts
    STATUS: str | None  # its section of status (`GET /v1/status`); None: it has none
    SECTION: str  # what its section holds (docs/reference/api.md's status body)

    def accepted(
        self, kind: str, mode: str, load_format: str | None, op: Operation
    ) -> dict[str, Any]:
        """An operation took the slot: the part's notices as fields of its `accepted`
        progress event (None: nothing to say); each one is warned before anything stops."""

    def around_spawn(
        self, op: StartOf, argv: list[str], cancel: threading.Event, spawn: Spawn
    ) -> EngineHandle | Failure:
        """Spawn the engine for `op` with `spawn` (the next part's, or the launcher's), with
        whatever the part needs around it: the EngineHandle, or the Failure that ends the
        start (nothing spawned)."""

    def after_ready(self, op: StartOf, h: EngineHandle) -> Failure | None:
        """A start came up and verified (not an adopted one): its record, or the failure."""

    def after_failure(
        self, op: StartOf, h: EngineHandle, failure: Failure, cancel: threading.Event
    ) -> tuple[Failure, bool]:
        """A start failed (its engine stopped): the failure as the part reads it, and whether
        to start the same again."""

    def result_fields(self, op: Operation, h: EngineHandle) -> dict[str, Any]:
        """What the part adds to a successful operation's result."""

    def engine_fields(self, h: EngineHandle | None) -> dict[str, Any]:
        """What the part adds to the engine's status (`h` None: no engine)."""

    def settings(self, h: EngineHandle) -> dict[str, str]:
        """What the part adds to engine `h`'s settings (the labels its EngineUp and
        EngineDown events carry to the exporter)."""

    def attach(self, bus: EventBus, hub: MetricsHub | None) -> None:
        """Subscribe to the bus; with an exporter (`hub` not None), add its source to it."""

    def status(self) -> dict[str, Any] | None:
        """Its status section (`section`; None: nothing to say now; may ask the system:
        called outside the controller's lock)."""

    def adopt(self) -> str | None:
        """At start-up, before the engine is adopted or started: take over (or stop) what a
        killed daemon's part left running, start what it runs; what to say (None: nothing)."""

    def sharing(self, mode: str, load_format: str | None = None) -> Sharing | None:
        """What a second engine of `mode` (`load_format`: "dummy" for a trial) would share
        with the serving one through this part (None: it shares nothing)."""

    def plan_switch(self, op: Operation) -> Fit | None:
        """How switch `op` may go, said before anything stops: a plan (standby: its new
        engine beside the serving one; hold: why not), or None (the part has no say). At
        most one part answers with a plan (`switch_plan`)."""

    def before_stop(self, op: Operation) -> None:
        """A switch is about to stop the serving engine (returns early on `op.cancel`)."""

    def resume_after_cancel(self, op: Operation) -> bool:
        """The switch was cancelled before its engine stopped: whether the serving engine
        serves on through this part (False: the part has nothing to put back)."""

    def on_crash(self) -> None:
        """The serving engine died; the crash step restarts it."""

    def on_serving(self, h: EngineHandle) -> None:
        """Engine `h` serves READY (a switch's, a rollback's, a restart's, an adopted one)."""

    def switch_figures(self, op: Operation) -> dict[str, Any] | None:
        """The result's `switch` section for `op` (None: the part has none to give). At
        most one part gives it."""

    def tick(self) -> None:
        """From the daemon's main loop (~1/s)."""

    def reconfigure(self, cfg: Config, engine: Engine) -> None:
        """A re-read configuration (SIGHUP); `engine` is the same kind as before."""

    def shutdown(self) -> None:
        """The daemon stops: stop what the part runs."""


class BasePart:
    """A part's neutral answers (as verifier.Check's no-ops for a verifier): a part
    overrides the hooks it uses."""

    NAME = "part"
    STATUS: str | None = None
    SECTION = ""

    def __init__(self, core: PartCore) -> None:
        self.c = core  # the controller's core (core.py)

    def accepted(
        self, kind: str, mode: str, load_format: str | None, op: Operation
    ) -> dict[str, Any]:
        return {}

    def around_spawn(
        self, op: StartOf, argv: list[str], cancel: threading.Event, spawn: Spawn
    ) -> EngineHandle | Failure:
        return spawn(argv)

    def after_ready(self, op: StartOf, h: EngineHandle) -> Failure | None:
        return None

    def after_failure(
        self, op: StartOf, h: EngineHandle, failure: Failure, cancel: threading.Event
    ) -> tuple[Failure, bool]:
        return failure, False

    def result_fields(self, op: Operation, h: EngineHandle) -> dict[str, Any]:
        return {}

    def engine_fields(self, h: EngineHandle | None) -> dict[str, Any]:
        return {}

    def settings(self, h: EngineHandle) -> dict[str, str]:
        return {}

    def attach(self, bus: EventBus, hub: MetricsHub | None) -> None:
        """No exporter source, nothing heard on the bus."""

    def status(self) -> dict[str, Any] | None:
        return None

    def adopt(self) -> str | None:
        return None  # it runs nothing of its own

    def sharing(self, mode: str, load_format: str | None = None) -> Sharing | None:
        return None  # it shares no engine's memory

    def plan_switch(self, op: Operation) -> Fit | None:
        return None  # no say in how a switch goes

    def before_stop(self, op: Operation) -> None:
        """Nothing to hold or drain."""

    def resume_after_cancel(self, op: Operation) -> bool:
        return False

    def on_crash(self) -> None:
        """Nothing to hold for the restart."""

    def on_serving(self, h: EngineHandle) -> None:
        """Nothing to send to the engine."""

    def switch_figures(self, op: Operation) -> dict[str, Any] | None:
        return None

    def tick(self) -> None:
        """Nothing to watch."""

    def reconfigure(self, cfg: Config, engine: Engine) -> None:
        """Nothing of the configuration is its own."""

    def shutdown(self) -> None:
        """Nothing of its own to stop."""


def switch_plan(parts: Iterable[Part], op: Operation) -> tuple[Part, Fit] | None:
    """The one part's plan for switch `op` and that part (None: no part has a say).
    Two parts that both plan the same switch are a wiring error: it is raised."""
    plans = [(part, fit) for part in parts if (fit := part.plan_switch(op)) is not None]
    if len(plans) > 1:
        names = ", ".join(part.NAME for part, _ in plans)
        raise RuntimeError(f"more than one part planned the {op.kind} (at most one may): {names}")
    return plans[0] if plans else None


def switch_figures(parts: Iterable[Part], op: Operation) -> dict[str, Any] | None:
    """The result's `switch` section: the one part's that gives it (None: none does)."""
    given = [figures for part in parts if (figures := part.switch_figures(op)) is not None]
    if len(given) > 1:
        raise RuntimeError(f"more than one part gave the {op.kind}'s switch figures")
    return given[0] if given else None
