"""The TP all-reduce backend as a part of the daemon (parts.py): what one engine start keeps
of it (`AllreduceStart` under `h.parts["allreduce"]`: the watch of its start, made from the
environment it was started with, and what verify confirmed), its verifier (`Backend`:
refused before the load when it cannot serve, SGLang's lines read while loading, confirmed
per rank after READY), the notes a start gets, its exporter source
(collectors/allreduce.py), its field of a result and of the engine's status, and its
status section. The rules it applies are allreduce_check.py's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastverify.daemon import allreduce_check
from fastverify.daemon.allreduce_check import AllreduceWatch
from fastverify.daemon.events import EngineUp, Event, EventBus
from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle, Launcher
from fastverify.daemon.logs import LineFacts
from fastverify.daemon.parts import BasePart, PartCore, Spawn, section
from fastverify.daemon.verifier import Check, Context, Finding, Plan, Problem

if TYPE_CHECKING:
    from fastverify.daemon.operations import Operation, StartOf
    from fastverify.exporters.hub import MetricsHub
    from fastverify.profiles.model import Profile

log = logging.getLogger("fastverifyd.allreduce")

PART = "allreduce"  # its key on an engine handle, its status section, its result field


@dataclass
class AllreduceStart:
    """What one engine start keeps of its all-reduce backend."""

    watch: AllreduceWatch | None = None  # None: adopted, its environment unreadable
    confirmed: dict[str, Any] | None = None  # allreduce_check's details(), once verified


def of(h: EngineHandle) -> AllreduceStart:
    """The all-reduce part of engine handle `h` (an empty one when it has none yet)."""
    part: AllreduceStart = h.parts.setdefault(PART, AllreduceStart())
    return part


def confirmed(h: EngineHandle | None) -> dict[str, Any] | None:
    """The backend verify confirmed for `h` (None: not verified, or no engine)."""
    part = h.parts.get(PART) if h is not None else None
    return part.confirmed if part is not None else None


def has_nvlink(launcher: Launcher) -> bool | None:
    if launcher.engine.simulated:
        return False  # the sim is a PCIe-only box
    from fastverify.profiles.topology import detect_cached

    return detect_cached().has_nvlink


def host_of(launcher: Launcher, argv: list[str]) -> Any:
    """The engine's all-reduce capabilities for `argv` (None: the engine cannot say)."""
    try:
        return launcher.engine.allreduce_host(argv)
    except Exception as exc:  # a probe that fails must not stop a start
        log.warning("cannot tell the engine's all-reduce capabilities: %s", exc)
        return None


def refusal(launcher: Launcher, profile: Profile, argv: list[str]) -> str | None:
    """Why `profile` with `argv` asks for an all-reduce backend this engine will not serve
    (or that cannot be confirmed), known before anything is stopped; None: fine."""
    env = launcher.engine_env(profile, "-", None)
    host = host_of(launcher, argv)
    return allreduce_check.refusal(env, argv, has_nvlink(launcher), host=host)


class Backend(Check):
    """The verifier (verifier.py): refuse, on_line, verify over the start's watch."""

    name = "allreduce"

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher

    def refuse(self, plan: Plan) -> Problem | None:
        why = None if plan.force else refusal(self.launcher, plan.profile, plan.argv)
        if not why:  # known before the load: nothing running is stopped for it
            return None
        return Problem(
            422,
            f"{why}; {plan.kind} to {plan.name}/{plan.mode} refused, nothing was stopped or "
            "changed (--force starts it anyway)",
            {"reason": "allreduce_backend_unavailable"},
        )

    def on_line(self, h: EngineHandle, line: str, facts: LineFacts) -> Failure | None:
        watch = of(h).watch
        if watch is None:
            return None
        rec = facts.record
        if rec is not None and rec.get("kind") == "allreduce":
            if watch.on_record(rec, line):  # a fallback the start fails on
                return watch.fallback_failure(str(h.log_path))
        elif watch.wants_pcie_ipc and "[Autotuner]" in line:
            note = watch.on_autotuner_line(line)
            if note:
                self.launcher.say(note, logging.WARNING)
        return None

    def verify(self, h: EngineHandle, ctx: Context) -> Finding:
        part = of(h)
        watch = part.watch
        if watch is None:
            return self.skipped("adopted engine: its environment could not be read")
        # an adopted engine was verified by the daemon that started it: its log is still
        # being replayed, so missing confirmations are not held against it
        env = ctx.details.get("env") or {}
        watch.note_maps([c["pid"] for c in env.get("processes", [])])
        if watch.wants_pcie_ipc:
            watch.note_tactics()
        failure = watch.verify(str(h.log_path), strict=not h.adopted)
        details = ctx.details[PART] = part.confirmed = watch.details()
        evidence = {
            k: details.get(k) for k in ("requested", "backend", "confirmed_ranks", "evidence")
        }
        if failure is not None:
            return self.failed(failure, **evidence)
        ctx.say(f"verify: all-reduce backend: {details['description']}")
        return self.ok(str(details["description"]), **evidence)


class AllreducePart(BasePart):
    """The part (parts.py) over the controller's core: the watch of each start, made from
    the environment it was started with (the launcher's `started_with`), the notes a
    start gets, the exporter source fed at each verified start."""

    NAME = PART
    STATUS = PART
    SECTION = (
        "the serving engine's TP all-reduce backend as verify confirmed it "
        "(`engine.allreduce`'s fields; none before)"
    )

    def __init__(self, core: PartCore) -> None:
        super().__init__(core)
        core.launcher.started_with.append(self._begin)

    def _begin(self, h: EngineHandle, env: Mapping[str, str] | None) -> None:
        launcher = self.c.launcher
        of(h).watch = (
            None
            if env is None
            else AllreduceWatch(env, h.argv, has_nvlink(launcher), host=host_of(launcher, h.argv))
        )

    def around_spawn(
        self, op: StartOf, argv: list[str], cancel: threading.Event, spawn: Spawn
    ) -> EngineHandle | Failure:
        """The spawn, then what the start's watch says up front."""
        h = spawn(argv)
        watch = of(h).watch if isinstance(h, EngineHandle) else None
        if watch is None:
            return h
        lines = watch.lines_expected
        if not lines:  # said up front: what depends on SGLang's INFO lines will not come
            self.c.say(
                f"SGLang's INFO lines will not come ({lines.why}): readiness is asked of "
                "/model_info and /health_generate, PCIe-IPC is confirmed by the processes' "
                "mapped pcie_ipc_comm.so; load progress and log-derived figures (decode "
                "batch lines) stay empty"
            )
        if watch.wants_pcie_ipc:
            for note in allreduce_check.start_notes(watch):
                self.c.say(note)
        return h

    def result_fields(self, op: Operation, h: EngineHandle) -> dict[str, Any]:
        return {PART: confirmed(h)}  # the TP all-reduce backend SGLang confirmed per rank

    def engine_fields(self, h: EngineHandle | None) -> dict[str, Any]:
        return {PART: confirmed(h)}  # confirmed at verify

    def attach(self, bus: EventBus, hub: MetricsHub | None) -> None:
        """Its exporter source, told the serving backend at each verified start."""
        if hub is None:
            return
        from fastverify.exporters.collectors.allreduce import AllreduceSource

        source = hub.add(AllreduceSource(hub))

        def up(e: Event) -> None:
            if isinstance(e, EngineUp):
                ar = (e.parts.get(PART) or {}).get(PART) or {}
                source.set_backend(ar.get("backend"), ar.get("max_bytes"))

        bus.subscribe(up)

    def status(self) -> dict[str, Any]:
        """The serving engine's backend as verify confirmed it (empty before)."""
        return section(dict(confirmed(self.c.current) or {}), [], [])
