"""Every source's own health: whether its last attempt worked (poll answered, window
analysed, line read, daemon feed) and when it last delivered data."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import SourceCollector


class SourcesCollector(SourceCollector):
    SOURCE = "sources"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        if not s["sources"]:
            return
        up = catalog.family("fastverify_source_up")
        last = catalog.family("fastverify_source_last_success_timestamp_seconds")
        for src, (ok, at) in sorted(s["sources"].items()):
            up.add_metric([src], 1.0 if ok else 0.0)
            if at is not None:
                last.add_metric([src], at)
        yield from (up, last)
