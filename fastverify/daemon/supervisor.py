"""The supervisor: wires the daemon's layers together for one run of fastverifyd.

    Launcher (engine I/O) <- Controller (states, steps, slot) -> EventBus -> observers
                                   ^                                 (journal, sd_notify,
                            ControlFacade <- api.py                   exporter feed, status)

`Supervisor(cfg, engine, reason, store, notifier, hub)` builds the launcher, resolver,
controller and observers; `startup()` (reconcile.start_up), `tick()`, `reconfigure()`,
`shutdown()` are what main.py drives; `api` is the facade the control API talks to.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from fastverify.api_answers import StatusBody
from fastverify.config import Config
from fastverify.daemon.baselines import baseline_records
from fastverify.daemon.controller import Controller
from fastverify.daemon.events import (
    BaselineRecorded,
    DecisionRecorded,
    EventBus,
)
from fastverify.daemon.facade import ControlFacade
from fastverify.daemon.launcher import Launcher
from fastverify.daemon.logs import LogRing
from fastverify.daemon.notify import Notifier
from fastverify.daemon.observers import ExporterFeed, Journal, LiveFigures, SdNotify
from fastverify.daemon.reconcile import start_up
from fastverify.daemon.resolve import RequestError, Resolver
from fastverify.daemon.restart import RestartPolicy
from fastverify.daemon.statestore import StateStore
from fastverify.daemon.watch import quiet as watch_quiet
from fastverify.frontdoor import layout

if TYPE_CHECKING:
    from fastverify.daemon.events import EventBus
    from fastverify.engines.base import Engine
    from fastverify.exporters.hub import MetricsHub
    from fastverify.exporters.runtime import ExporterRuntime
    from fastverify.profiles.store import ProfileStore

__all__ = ["RequestError", "Supervisor"]


class Supervisor:
    def __init__(
        self,
        cfg: Config,
        engine: Engine,
        engine_reason: str,
        store: StateStore,
        notifier: Notifier | None = None,
        hub: MetricsHub | None = None,
        profile_store: ProfileStore | None = None,
    ) -> None:
        cfg = layout.engine_side(cfg)  # the engine on its internal port behind a front door
        self.cfg = cfg
        self.store = store
        self.notifier = notifier or Notifier(None)
        self.hub = hub
        self.bus = EventBus()
        self.ring = LogRing()
        self.resolver = Resolver(cfg, engine, profile_store)
        self.launcher = Launcher(cfg, engine, store)
        self.ctl = Controller(cfg, engine, self.launcher, self.resolver, store, self.bus, self.ring)
        self.launcher.say = self.ctl.say
        self.figures = LiveFigures()
        self.feed = ExporterFeed(hub) if hub is not None else None
        self.api = ControlFacade(self.ctl, engine_reason, self.figures, self.feed)
        self.bus.subscribe(Journal(store))
        self.bus.subscribe(self.figures)
        if self.feed is not None:
            self.bus.subscribe(self.feed)
        self.bus.subscribe(SdNotify(self.notifier, self.api.status_line))
        for part in self.ctl.parts:
            part.attach(self.bus, hub)

    # ------------------------------------------------------------------ main.py's handles
    @property
    def runtime(self) -> Any:
        return self.feed.runtime if self.feed is not None else None

    def attach_runtime(self, runtime: ExporterRuntime | None) -> None:
        if self.feed is not None and runtime is not None:
            # the periodic profile windows' idle check: the watch's checks are not traffic
            runtime.traffic_quiet = watch_quiet
            self.feed.attach_runtime(runtime)

    @property
    def config_error(self) -> str | None:
        return self.api.config_error

    @config_error.setter
    def config_error(self, value: str | None) -> None:
        self.api.config_error = value

    def add_finding(self, key: str, message: str) -> None:
        """A finding status shows for this run (e.g. the exporter could not listen)."""
        self.ctl.set_finding(key, message)

    def daemon_log(self, message: str, level: int = logging.INFO) -> None:
        self.ctl.say(message, level)

    def status_line(self) -> str:
        return self.api.status_line()

    def status(self) -> StatusBody:
        return self.api.status()

    def startup(self) -> None:
        """Baselines and the last tuning decision to the exporter, then restore, reconcile
        and start (reconcile.py)."""
        for rec in baseline_records(self.store.load_baselines()):
            with contextlib.suppress(KeyError, TypeError, ValueError):
                conc = rec.get("concurrency")
                self.bus.publish(
                    BaselineRecorded(
                        rec["profile"],
                        float(rec["tokens_per_second"]),
                        float(rec["per_request_tokens_per_second"]),
                        float(rec["measured_at"]),
                        int(conc) if isinstance(conc, int) and not isinstance(conc, bool) else None,
                    )
                )
        decision = self.store.load_json("decision.json")
        with contextlib.suppress(KeyError, TypeError):
            if decision:
                self.bus.publish(DecisionRecorded(decision["profile"], decision["mode"],
                                                  decision["backend"],
                                                  bool(decision["applied"])))  # fmt: skip
        start_up(self.ctl)  # each part adopts what earlier runs left (speculation_part.py:
        # the acceptance records and the plan, for live acceptance to be compared with)

    def tick(self) -> None:
        self.ctl.tick()
        self.ctl.recovery_tick()

    def exit_code(self) -> int | None:
        """Non-None when the daemon should exit with it (recovery.py: a declarative daemon
        under systemd whose FAILED retries are spent)."""
        return self.ctl.recovery_exit_code()

    def reconfigure(self, cfg: Config, engine: Engine) -> None:
        """Adopt a re-read configuration (SIGHUP): profile dirs, engine settings (used from
        the next start on), restart and timeout policy."""
        cfg = layout.engine_side(cfg)
        with self.ctl._lock:
            self.cfg = cfg
            self.ctl.cfg = cfg
            self.launcher.cfg = cfg
            self.resolver.reconfigure(cfg, engine)
            if engine.name == self.ctl.engine.name:
                self.ctl.engine = engine
                self.launcher.engine = engine
            for part in self.ctl.parts:
                part.reconfigure(cfg, self.ctl.engine)
            self.ctl.crashes.retune(RestartPolicy.from_config(cfg.restart))

    def shutdown(self, timeout: float | None = None) -> None:
        self.ctl.shutdown(timeout)
