"""Every data source's own health: whether its last attempt worked (poll answered, window
analysed, line read, daemon feed) and when it last delivered data."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import EngineChange, Hub, Source

# the data sources, in the order their health is published
DATA_SOURCES = ("daemon", "sglang_metrics", "logs", "traces", "inspector")


class HealthSource(Source):
    NAME = "sources"

    def __init__(self, hub: Hub) -> None:
        super().__init__(hub)
        self._up: dict[str, bool] = {}
        self._last: dict[str, float] = {}

    def mark(self, source: str, ok: bool) -> None:
        """An attempt of data source `source` (under the hub's lock): whether it worked,
        and when it last did."""
        self._up[source] = ok
        if ok:
            self._last[source] = self.hub.now()

    def engine_changed(self, change: EngineChange) -> None:
        if change.up is not None:
            self.mark("daemon", True)
        if change.up is False:
            self._up.pop("logs", None)

    def families(self, now: float) -> Iterable[Metric | None]:
        if not self._up:
            return
        up = catalog.family("fastverify_source_up")
        last = catalog.family("fastverify_source_last_success_timestamp_seconds")
        for src in sorted(s for s in DATA_SOURCES if s in self._up):
            up.add_metric([src], 1.0 if self._up[src] else 0.0)
            if (at := self._last.get(src)) is not None:
                last.add_metric([src], at)
        yield from (up, last)
