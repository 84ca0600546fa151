"""The front door (absent with [frontdoor] mode off): up, the held, cut and refused counts,
the requests held now and the hold-time histogram, from its control socket's status."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import SourceCollector, one


class FrontDoorCollector(SourceCollector):
    SOURCE = "frontdoor"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        door = s.get("frontdoor")
        if door is None:
            return
        st = door["status"]
        yield one("fastverify_frontdoor_up", 0.0 if st is None else 1.0)
        if st is None:
            return
        totals = st["totals"]
        yield one("fastverify_frontdoor_held_requests_total", totals["held"])
        yield one("fastverify_frontdoor_cut_requests_total", totals["cut"])
        yield one("fastverify_frontdoor_refused_requests_total", totals["refused"])
        yield one("fastverify_frontdoor_waiting_requests", st["waiting"])
        hist = st["hold_seconds"]
        fam = catalog.family("fastverify_frontdoor_hold_seconds")
        running, buckets = 0, []
        for le, count in zip([*hist["buckets"], float("inf")], hist["counts"], strict=True):
            running += count
            buckets.append(("+Inf" if le == float("inf") else repr(float(le)), running))
        fam.add_metric([], buckets=buckets, sum_value=hist["sum"])
        yield fam
