"""The daemon's history: engine restarts by reason, profile switches by result and their
client-visible downtime, the last time-to-ready and its split, and the last tuning decision."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import SourceCollector, info, rows


class DaemonCollector(SourceCollector):
    SOURCE = "daemon"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        if s.get("decision"):
            yield info("fastverify_decision_info", s["decision"])
        yield rows("fastverify_engine_restarts_total", s["restarts"])
        yield rows("fastverify_profile_switches_total", s["switches"])
        downtime = catalog.family("fastverify_switch_downtime_seconds")
        for mode, h in s["downtime"].items():
            downtime.add_metric([mode], h.cumulative(), h.total)
        yield downtime
        if s["last_switch"]:
            yield info("fastverify_switch_last_info", s["last_switch"])
        yield _start_seconds(s)


def _start_seconds(s: dict[str, Any]) -> Metric | None:
    """The last engine time-to-ready, and (labelled `phase`) its split into weights,
    cuda_graph and the rest, from SGLang's own lines (they sum to the unlabelled total)."""
    total = s["engine_start_seconds"]
    if total is None:
        return None
    g = catalog.family("fastverify_engine_start_seconds")
    g.add_metric([], float(total))
    for phase, seconds in (s.get("start_phases") or {}).items():
        g.add_metric([phase], float(seconds))
    return g
