"""MetricsHub: the exporter's identity of the engine, its clock and version, and its sources.

The hub keeps what every source reads: whether the engine serves, which profile, mode,
settings and engine it runs (the daemon's word, `set_engine`; the standalone exporter's,
`set_labels`), the clock, and `version`, bumped by every write so that a scrape can be
cached until something changed. Everything else belongs to a source
(`fastverify.exporters.collectors`): each owns its state, its feed methods and its share of
the metric catalog, and hears from the hub when the engine changes (`Source.engine_changed`)
to drop what was about the previous one. Gauges describe the active (profile, mode) only;
counters and the verify-cycle histogram are kept per (profile, mode) for the life of the
process so that `rate()` stays correct across switches.

The hub builds the sources every exporter has; a part of the daemon adds its own
(`add(source)`: a part's, daemon/parts.py). Every public method is safe to call from any thread:
sources and hub share one lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from fastverify.exporters.collectors.api_auth import ApiAuthSource
from fastverify.exporters.collectors.base import EngineChange, Source
from fastverify.exporters.collectors.baselines import BaselinesSource
from fastverify.exporters.collectors.daemon import DaemonSource
from fastverify.exporters.collectors.decode import DecodeSource
from fastverify.exporters.collectors.engine import EngineSource
from fastverify.exporters.collectors.inspector import InspectorSource
from fastverify.exporters.collectors.logs import LogsSource
from fastverify.exporters.collectors.scrape import ScrapeSource
from fastverify.exporters.collectors.sources import HealthSource
from fastverify.exporters.collectors.speculation import SpeculationSource
from fastverify.exporters.collectors.traces import TracesSource

S = TypeVar("S", bound=Source)


class MetricsHub:
    """The engine's identity, the clock, the version and the sources (see the module doc)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        rate_window_s: float = 10.0,
        observation_ttl_s: float = 120.0,
        log_fresh_s: float = 30.0,
    ) -> None:
        """`clock` gives unix seconds (ages, freshness); `timer` times each source's collect."""
        self.lock = threading.RLock()
        self._clock = clock
        self.timer = timer
        self.version = 0
        self.engine_up: bool | None = None  # the daemon's word (None: the standalone's polls)
        self.profile: str | None = None
        self.mode: str | None = None
        self.settings: dict[str, str] = {}
        self.engine_kind: str | None = None
        self.url: str | None = None
        self.sources: dict[str, Source] = {}
        self.health = self.add(HealthSource(self))
        self.engine = self.add(EngineSource(self))
        self.baselines = self.add(BaselinesSource(self))
        self.speculation = self.add(SpeculationSource(self))
        self.decode = self.add(
            DecodeSource(self, self.health, self.speculation, self.baselines,
                         rate_window_s=rate_window_s, observation_ttl_s=observation_ttl_s,
                         log_fresh_s=log_fresh_s)
        )  # fmt: skip
        self.traces = self.add(TracesSource(self, self.health))
        self.inspector = self.add(InspectorSource(self, self.health, self.traces))
        self.daemon = self.add(DaemonSource(self))
        self.api_auth = self.add(ApiAuthSource(self))
        self.logs = self.add(LogsSource(self, self.health, self.decode))
        self.scrape = self.add(ScrapeSource(self))

    def add(self, source: S) -> S:
        """Publish `source` (its catalog share) from now on; returns it."""
        with self.lock:
            if source.NAME in self.sources:
                raise ValueError(f"the hub already has a {source.NAME!r} source")
            self.sources[source.NAME] = source
            self.changed()
        return source

    def now(self) -> float:
        """The hub's clock (unix seconds)."""
        return self._clock()

    def changed(self) -> None:
        """Something a scrape shows changed (called under `lock`)."""
        self.version += 1

    @property
    def up(self) -> bool:
        """Whether the engine serves: the daemon's word, else the last poll of its /metrics."""
        with self.lock:
            if self.engine_up is not None:
                return self.engine_up
            return bool(self.decode.poll_ok)

    # ----------------------------------------------------------------- identity
    def set_engine(
        self,
        up: bool,
        profile: str | None,
        mode: str | None,
        settings: Mapping[str, str] | None = None,
        engine: str | None = None,
        url: str | None = None,
    ) -> None:
        """The daemon's view of the engine: whether it serves, and which profile/mode it runs."""
        with self.lock:
            self._tell(
                EngineChange(
                    switched=(profile, mode) != (self.profile, self.mode),
                    came_up=bool(up) and not self.engine_up,
                    went_down=bool(self.engine_up) and not up,
                    up=bool(up),
                )
            )
            self.engine_up = bool(up)
            self._identify(profile, mode, settings, engine)
            self.url = url

    def set_labels(
        self,
        profile: str | None,
        mode: str | None,
        settings: Mapping[str, str] | None = None,
        engine: str | None = None,
    ) -> None:
        """Identity labels without an opinion on `up` (the standalone exporter: up = polls)."""
        with self.lock:
            switched = (profile, mode) != (self.profile, self.mode)
            self._tell(EngineChange(switched, False, False, None))
            self._identify(profile, mode, settings, engine)

    def _tell(self, change: EngineChange) -> None:
        for source in self.sources.values():
            source.engine_changed(change)

    def _identify(
        self,
        profile: str | None,
        mode: str | None,
        settings: Mapping[str, str] | None,
        engine: str | None,
    ) -> None:
        self.profile, self.mode = profile, mode
        self.settings = dict(settings or {})
        self.engine_kind = engine
        self.changed()
