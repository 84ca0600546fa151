"""The daemon's history: engine restarts by reason, profile switches by result and their
client-visible downtime, the last time-to-ready and its split, and the last tuning decision
(persisted by the daemon)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.catalog import DOWNTIME_BUCKETS, SWITCH_DOOR_MODES
from fastverify.exporters.collectors.base import Hub, Source, info, rows
from fastverify.exporters.readings import Histogram

SWITCH_RESULTS = ("ok", "rolled_back", "failed", "cancelled")


class DaemonSource(Source):
    NAME = "daemon"

    def __init__(self, hub: Hub) -> None:
        super().__init__(hub)
        self._restarts: Counter[str] = Counter()
        self._restart_reasons: tuple[str, ...] = ()  # published at 0 before any restart
        self._switches: Counter[str] = Counter()
        self._start_seconds: float | None = None
        self._start_phases: dict[str, float] | None = None  # weights, cuda_graph, rest
        self._decision: dict[str, str] | None = None
        # every mode from 0, so that the first switch is an increase Prometheus sees
        self._downtime = {m: Histogram(DOWNTIME_BUCKETS) for m in SWITCH_DOOR_MODES}
        self._last_switch: dict[str, str] | None = None

    def on_switch(self, result: str) -> None:
        """Count a profile switch outcome: ok | rolled_back | failed | cancelled."""
        if result not in SWITCH_RESULTS:
            raise ValueError(f"switch result {result!r} is not one of {SWITCH_RESULTS}")
        with self.hub.lock:
            self._switches[result] += 1
            self.hub.changed()

    def on_downtime(self, mode: str, seconds: float, last: Mapping[str, str]) -> None:
        """A switch's client-visible downtime (its result's `switch`); `last`: the labels
        of fastverify_switch_last_info but mode and downtime_s (kind, profile, result)."""
        if mode not in SWITCH_DOOR_MODES:
            raise ValueError(f"switch mode {mode!r} is not one of {SWITCH_DOOR_MODES}")
        with self.hub.lock:
            self._downtime[mode].observe(float(seconds))
            self._last_switch = {**last, "mode": mode, "downtime_s": f"{float(seconds):.1f}"}
            self.hub.changed()

    def declare_restart_reasons(self, reasons: Iterable[str]) -> None:
        """The `reason` values of fastverify_engine_restarts_total known in advance: each is
        published at 0 from now on, so the first restart of a reason is an increase that
        Prometheus' increase()/offset see (a series born at 1 looks like 1 -> 1; Prometheus'
        guidance: initialise the label sets you know). Switch results are always published."""
        with self.hub.lock:
            self._restart_reasons = tuple(dict.fromkeys([*self._restart_reasons, *reasons]))
            self.hub.changed()

    def on_restart(self, reason: str) -> None:
        """Count an engine restart (crash, switch, mode, manual, ...)."""
        with self.hub.lock:
            self._restarts[str(reason)] += 1
            self.hub.changed()

    def set_start_seconds(self, seconds: float) -> None:
        """Last time-to-ready of the engine (spawn to serving)."""
        with self.hub.lock:
            self._start_seconds = float(seconds)
            self.hub.changed()

    def set_start_phases(self, phases: Mapping[str, float] | None) -> None:
        """The last start's split (weights, cuda_graph, rest) from SGLang's own lines."""
        with self.hub.lock:
            self._start_phases = dict(phases) if isinstance(phases, Mapping) else None
            self.hub.changed()

    def set_decision(self, profile: str, mode: str, backend: str, applied: bool) -> None:
        """The newest tuning decision (`fastverify_decision_info`)."""
        with self.hub.lock:
            self._decision = {"profile": profile, "mode": mode, "backend": backend,
                              "applied": "true" if applied else "false"}  # fmt: skip
            self.hub.changed()

    def families(self, now: float) -> Iterable[Metric | None]:
        h = self.hub
        if (d := self._decision) is not None:
            # serving: whether its profile and mode serve now (a manual switch away from it
            # turns it "false"; switching back, "true")
            serving = h.up and (h.profile, h.mode) == (d["profile"], d["mode"])
            yield info("fastverify_decision_info", {**d, "serving": str(serving).lower()})
        yield rows("fastverify_engine_restarts_total",
                   {**dict.fromkeys(self._restart_reasons, 0), **self._restarts})  # fmt: skip
        yield rows("fastverify_profile_switches_total",
                   {r: self._switches.get(r, 0) for r in SWITCH_RESULTS})  # fmt: skip
        downtime = catalog.family("fastverify_switch_downtime_seconds")
        for mode, hist in self._downtime.items():
            downtime.add_metric([mode], hist.cumulative(), hist.total)
        yield downtime
        if self._last_switch:
            yield info("fastverify_switch_last_info", self._last_switch)
        if self._start_seconds is not None:
            # the last time-to-ready, and (labelled `phase`) its split, which sums to it
            g = catalog.family("fastverify_engine_start_seconds")
            g.add_metric([], self._start_seconds)
            for phase, seconds in (self._start_phases or {}).items():
                g.add_metric([phase], float(seconds))
            yield g
