"""The front door (absent with [frontdoor] mode off): up, the held, cut and refused counts,
the requests held now and the hold-time histogram, from its control socket's status. The
front door's part (daemon/frontdoor.py) adds this source to the hub when it runs one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import Hub, Source, one


class FrontDoorSource(Source):
    NAME = "frontdoor"

    def __init__(self, hub: Hub, status: Callable[[], dict[str, Any] | None]) -> None:
        """`status()`: the front door's control-socket status (None while it is down),
        asked once per scrape, outside the hub's lock."""
        super().__init__(hub)
        self._status = status
        self._last: dict[str, Any] | None = None

    def probe(self) -> None:
        self._last = self._status()

    def families(self, now: float) -> Iterable[Metric | None]:
        st = self._last
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
