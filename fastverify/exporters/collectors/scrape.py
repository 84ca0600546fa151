"""Each source's own scrape, as node_exporter reports its collectors: whether its last
collect() worked (a source that raises publishes nothing that scrape; the others still do)
and how long it took. Registered last, so it reports the scrape it ends."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import Hub, Source

log = logging.getLogger("fastverify.exporter")


class ScrapeSource(Source):
    NAME = "scrape"

    def __init__(self, hub: Hub) -> None:
        super().__init__(hub)
        self._last: dict[str, tuple[bool, float]] = {}  # source -> (success, seconds)

    def run(self, name: str) -> list[Metric]:
        """The families of the hub's source `name` (none when the hub has no such source),
        timed by the hub's timer; a failure is logged and counted, never raised."""
        source = self.hub.sources.get(name)
        if source is None:
            return []
        if source is self:
            with self.hub.lock:
                return [f for f in self.families(self.hub.now()) if f is not None]
        t0 = self.hub.timer()
        try:
            source.probe()
            with self.hub.lock:
                fams = [f for f in source.families(self.hub.now()) if f is not None]
            ok = True
        except Exception:
            log.exception("exporter source %s failed; its series are left out of this scrape",
                          name)  # fmt: skip
            fams, ok = [], False
        seconds = max(0.0, self.hub.timer() - t0)
        with self.hub.lock:
            self._last[name] = (ok, seconds)
        return fams

    def families(self, now: float) -> Iterable[Metric | None]:
        if not self._last:
            return
        ok = catalog.family("fastverify_scrape_collector_success")
        took = catalog.family("fastverify_scrape_collector_duration_seconds")
        for name, (good, seconds) in sorted(self._last.items()):
            ok.add_metric([name], 1.0 if good else 0.0)
            took.add_metric([name], seconds)
        yield from (took, ok)


class SourceCollector(Collector):
    """The registry's handle on catalog source `SOURCE` of a hub: describe() from the catalog
    (registering never collects); collect() runs the hub's source of that name, if it has
    one (a part adds its own when it is configured), through the hub's `ScrapeSource`,
    which times it and keeps its failure to itself."""

    def __init__(self, scrape: ScrapeSource, source: str) -> None:
        self.scrape = scrape
        self.SOURCE = source

    def describe(self) -> list[Metric]:
        return catalog.describe(self.SOURCE)

    def collect(self) -> Iterator[Metric]:
        yield from self.scrape.run(self.SOURCE)
