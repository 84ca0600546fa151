"""Speculation as served: the active draft step count and the time at each, the accepted-
drafts histograms benches recorded (and the accept curve they give), live acceptance from
finished requests and whether the stored plan went stale (exporters.request_metrics)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import SourceCollector, one, rows
from fastverify.sglang.forced import MEASURED
from fastverify.speculation.curve import AcceptCurve


class SpeculationCollector(SourceCollector):
    SOURCE = "speculation"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        pm = (s["profile"], s["mode"])
        yield one("fastverify_spec_active_steps", s.get("spec_active_steps"), *pm)
        if s.get("spec_steps_seconds"):
            yield rows("fastverify_spec_steps_seconds_total", s["spec_steps_seconds"])
        if s.get("acceptance"):
            yield from _recorded(s["acceptance"])
        yield from _drift(s, pm)


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


def _drift(s: dict[str, Any], pm: tuple[str, str]) -> list[Metric | None]:
    drift = s.get("spec_drift")
    live_rows = s.get("spec_live") or {}
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
