"""The exporter's collectors, one per metric source, each emitting exactly its share of the
catalog (`fastverify.exporters.catalog`) and describing itself from it; `register(registry,
hub)` puts them all on a registry in the catalog's order. They do no I/O and no parsing:
the hub's writers prepare the state, and one `hub.snapshot()` serves a scrape."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from fastverify.exporters import catalog
from fastverify.exporters.collectors.api_auth import ApiAuthCollector
from fastverify.exporters.collectors.base import Snapshots, SourceCollector
from fastverify.exporters.collectors.baselines import BaselinesCollector
from fastverify.exporters.collectors.daemon import DaemonCollector
from fastverify.exporters.collectors.decode import DecodeCollector
from fastverify.exporters.collectors.engine import EngineCollector, profile_labels
from fastverify.exporters.collectors.frontdoor import FrontDoorCollector
from fastverify.exporters.collectors.inspector import InspectorCollector
from fastverify.exporters.collectors.logs import LogsCollector
from fastverify.exporters.collectors.sources import SourcesCollector
from fastverify.exporters.collectors.speculation import SpeculationCollector
from fastverify.exporters.collectors.traces import TracesCollector
from fastverify.exporters.collectors.weight_cache import WeightCacheCollector
from fastverify.exporters.hub import MetricsHub

COLLECTORS: dict[str, type[SourceCollector]] = {
    c.SOURCE: c
    for c in (EngineCollector, DecodeCollector, BaselinesCollector, SpeculationCollector,
              TracesCollector, InspectorCollector, DaemonCollector, WeightCacheCollector,
              FrontDoorCollector,
              ApiAuthCollector, LogsCollector, SourcesCollector)
}  # fmt: skip


def collectors(hub: MetricsHub) -> list[SourceCollector]:
    """One collector per source, in the catalog's order, sharing one snapshot per scrape."""
    snapshots = Snapshots(hub)
    return [COLLECTORS[source](snapshots) for source in catalog.COLLECTOR_SOURCES]


def register(registry: CollectorRegistry, hub: MetricsHub) -> list[SourceCollector]:
    """Register every collector of `hub` (the registry checks their names from describe())."""
    out = collectors(hub)
    for c in out:
        registry.register(c)
    return out


__all__ = ["COLLECTORS", "Snapshots", "SourceCollector", "collectors", "profile_labels",
           "register"]  # fmt: skip
