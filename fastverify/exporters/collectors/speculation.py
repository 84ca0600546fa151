"""Speculation as served: the active draft step count and the time at each, the accepted-
drafts histograms benches recorded (and the accept curve they give), live acceptance from
finished requests and whether the stored plan went stale (exporters.request_metrics)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import Metric

from fastverify.config import SPEC_MODES
from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import EngineChange, Hub, Source, one, rows
from fastverify.exporters.request_metrics import Drift
from fastverify.sglang.forced import MEASURED
from fastverify.speculation.curve import AcceptCurve


class SpeculationSource(Source):
    NAME = "speculation"

    def __init__(self, hub: Hub) -> None:
        super().__init__(hub)
        # time at each active step count (profile, mode, steps) -> seconds, the last poll's
        # (time, steps, busy), and recorded acceptance by (profile, mode, steps)
        self._steps_seconds: dict[tuple[str, str, str], float] = {}
        self._steps_seen: tuple[float, int, bool] | None = None
        self._acceptance: dict[tuple[str, str, str], dict[str, Any]] = {}
        # live acceptance per active step count from finished requests, and the stored plan
        # it is compared with (exporters.request_metrics)
        self._drift = Drift()

    def _serving(self) -> bool:
        """A drafting mode on real weights: a trial on dummy weights (`spec costs` at k
        steps, a sweep's EAGLE-3 trial) shows its steps and never counts: its time is a
        measurement, not the profile's serving."""
        return self.hub.mode in SPEC_MODES and self.hub.settings.get("weights") != "dummy"

    # ------------------------------------------------------------------------- feed
    def track_steps(self, now: float, steps: float | None, running: float | None) -> None:
        """Decoding time at each active draft step count (SGLang's `spec_num_steps` gauge,
        from a poll, under the hub's lock), per profile and mode: the interval since the
        last poll counts at the step count seen then, when requests were running then (an
        idle server's gauge is stale)."""
        h = self.hub
        if h.mode not in SPEC_MODES or steps is None:
            self._steps_seen = None
            return
        self._drift.on_steps(now, int(steps))
        if self._steps_seen is not None:
            at, prev, busy = self._steps_seen
            if busy and self._serving():
                key = (h.profile or "", h.mode or "", str(prev))
                self._steps_seconds[key] = self._steps_seconds.get(key, 0.0) + max(0.0, now - at)
        self._steps_seen = (now, int(steps), bool(running))

    def on_requests(self, records: list[dict[str, Any]], _at: float | None = None) -> None:
        """Finished requests' histograms (exporters.request_metrics.RequestMetricsFollower)."""
        with self.hub.lock:
            if self._serving():
                self._drift.on_requests(records, self.hub.now())
                self.hub.changed()

    def set_plan(self, plan: Mapping[str, Any] | None) -> None:
        """The stored speculation plan (`spec-plan.json`) live acceptance is compared with."""
        with self.hub.lock:
            self._drift.plan = dict(plan) if plan else None
            self.hub.changed()

    def on_acceptance(self, record: Mapping[str, Any]) -> None:
        """An accepted-drafts histogram the daemon recorded (fastverify.daemon.acceptance)."""
        with self.hub.lock:
            key = (str(record["profile"]), str(record["mode"]), str(record["steps"]))
            self._acceptance[key] = dict(record)
            self.hub.changed()

    def engine_changed(self, change: EngineChange) -> None:
        if change.switched or change.came_up:
            self._drift.reset()
        if change.new_server:
            # the step count last seen belongs to the server before: its time never counts
            # under the new profile/mode's labels
            self._steps_seen = None

    # ---------------------------------------------------------------------- reading
    def reading(self) -> dict[str, Any]:
        """What status shows: the active steps, seconds at each step count by (profile,
        mode, steps), live acceptance by steps, and the plan's drift (None: not drafting)."""
        with self.hub.lock:
            drafting = self.hub.mode in SPEC_MODES
            live = self._drift.live() if drafting else {}
            return {
                "active_steps": self._steps_seen[1] if self._steps_seen else None,
                "steps_seconds": dict(self._steps_seconds),
                "live": live,
                "drift": self._drift.stale(live) if drafting else None,
            }

    def families(self, now: float) -> Iterable[Metric | None]:
        h = self.hub
        pm = (h.profile or "", h.mode or "")
        r = self.reading()
        yield one("fastverify_spec_active_steps", r["active_steps"], *pm)
        if self._steps_seconds:
            yield rows("fastverify_spec_steps_seconds_total", self._steps_seconds)
        if self._acceptance:
            yield from _recorded(self._acceptance)
        yield from _drift(r["drift"], r["live"], pm)


def _recorded(acceptance: dict[tuple[str, str, str], dict[str, Any]]) -> list[Metric]:
    ratio = catalog.family("fastverify_spec_accepted_drafts_ratio")
    length = catalog.family("fastverify_spec_recorded_accept_length")
    for (profile, mode, steps), rec in sorted(acceptance.items()):
        hist = rec.get("histogram") or []
        total = sum(hist) or 1
        usable = str(bool(rec.get("usable"))).lower()
        source = str(rec.get("acceptance_source") or MEASURED)  # forced by SGLang, or not
        lab = [profile, mode, steps, str(rec.get("weights")), usable, source]
        for j, n in enumerate(hist):
            ratio.add_metric([*lab, str(j)], n / total)
        if sum(hist) > 0:
            for k, lk in AcceptCurve.from_histogram(hist, int(steps)).curve().items():
                length.add_metric([*lab, k], lk)
    return [ratio, length]


def _drift(
    drift: dict[str, Any] | None, live_rows: dict[Any, Any], pm: tuple[str, str]
) -> list[Metric | None]:
    if drift is None or (not live_rows and not drift.get("plan")):
        return []
    out: list[Metric | None] = []
    if live_rows:
        live = catalog.family("fastverify_spec_live_accept_length")
        reqs = catalog.family("fastverify_spec_live_requests")
        for steps, row in sorted(live_rows.items()):
            reqs.add_metric([*pm, str(steps)], row["requests"])
            for k, lk in row["accept_length"].items():
                live.add_metric([*pm, str(steps), str(k)], lk)
        out += [live, reqs]
    stale = (1.0 if drift["stale"] else 0.0) if drift.get("plan") else None
    return [*out, one("fastverify_spec_plan_stale", stale, *pm)]
