"""The exporter's sources, one per share of the metric catalog
(`fastverify.exporters.catalog`): each owns its state and feed (base.Source) and emits
exactly its share. `register(registry, hub)` puts one collector per catalog source on a
registry, in the catalog's order: it describes itself from the catalog and, per scrape,
runs the hub's source of that name, timed and guarded (the `scrape` source reports each)."""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import EngineChange, Source
from fastverify.exporters.collectors.engine import profile_labels
from fastverify.exporters.collectors.scrape import ScrapeSource, SourceCollector


class Scraped(Protocol):
    """A hub as the registry needs it (`fastverify.exporters.hub.MetricsHub`)."""

    scrape: ScrapeSource


def collectors(hub: Scraped) -> list[SourceCollector]:
    """One collector per catalog source, in the catalog's order."""
    return [SourceCollector(hub.scrape, source) for source in catalog.COLLECTOR_SOURCES]


def register(registry: CollectorRegistry, hub: Scraped) -> list[SourceCollector]:
    """Register every collector of `hub` (the registry checks their names from describe())."""
    out = collectors(hub)
    for c in out:
        registry.register(c)
    return out


__all__ = ["EngineChange", "Source", "SourceCollector", "collectors", "profile_labels",
           "register"]  # fmt: skip
