"""What every per-source collector shares: one hub snapshot per scrape, `describe()` from
the catalog, and the few ways a family gets its samples (names, help, types and label
names all come from `fastverify.exporters.catalog`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from fastverify.exporters import catalog
from fastverify.exporters.hub import MetricsHub


class Snapshots:
    """`hub.snapshot()` shared by the collectors of one scrape: taken again when the hub
    changed (its version) or the wall-clock second did (ages, freshness), as the /metrics
    renderer caches its output."""

    def __init__(self, hub: MetricsHub) -> None:
        self.hub = hub
        self._lock = threading.Lock()
        self._key: tuple[int, int] | None = None
        self._snap: dict[str, Any] = {}

    def get(self) -> dict[str, Any]:
        key = (self.hub.version, int(self.hub.now()))
        with self._lock:
            if key != self._key:
                self._snap, self._key = self.hub.snapshot(), key
            return self._snap


class SourceCollector(Collector):
    """One metric source: emits exactly the catalog's series of `SOURCE`."""

    SOURCE: ClassVar[str]

    def __init__(self, snapshots: Snapshots) -> None:
        self.snapshots = snapshots

    def describe(self) -> list[Metric]:
        return catalog.describe(self.SOURCE)

    def collect(self) -> Iterator[Metric]:
        for fam in self.families(self.snapshots.get()):
            if fam is not None:
                yield fam

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        raise NotImplementedError


def one(name: str, value: float | None, *labels: str) -> Metric | None:
    """A family of one sample (absent, None, when there is no value)."""
    if value is None:
        return None
    fam = catalog.family(name)
    fam.add_metric(list(labels), float(value))
    return fam


def rows(name: str, values: Mapping[Any, float]) -> Metric:
    """A family with one sample per key (a label value, or a tuple of them), sorted."""
    fam = catalog.family(name)
    for key, value in sorted(values.items()):
        fam.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return fam


def info(name: str, labels: Mapping[str, Any]) -> Metric:
    """An info family of one sample: its catalog labels from `labels` (an open info takes
    every key)."""
    series = catalog.BY_NAME[name]
    fam = series.family()
    if series.open:
        fam.add_metric([], {k: str(v) for k, v in labels.items()})
    else:
        fam.add_metric([str(labels[k]) for k in series.labels], {})
    return fam
