"""What every exporter source shares: the `Source` protocol (its own state under the hub's
lock, its feed methods, `families(now)` for exactly its share of the catalog, and what it
drops when the engine changes), the collector the registry holds for each catalog source
(describe() from the catalog; collect() timed and guarded, as node_exporter measures each
collector), and the few ways a family gets its samples (names, help, types and label names
all come from `fastverify.exporters.catalog`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from prometheus_client.core import Metric

from fastverify.exporters import catalog


class Hub(Protocol):
    """What a source reads of its hub (`fastverify.exporters.hub.MetricsHub`): the lock
    every source shares, the clock and the timer, the engine's identity, the version
    (`changed()`), and the sources by name. A source that feeds another gets it, typed,
    when it is built."""

    lock: threading.RLock
    timer: Callable[[], float]
    profile: str | None
    mode: str | None
    settings: dict[str, str]
    engine_kind: str | None
    sources: dict[str, Source]

    @property
    def up(self) -> bool: ...

    def now(self) -> float: ...

    def changed(self) -> None: ...


@dataclass(frozen=True)
class EngineChange:
    """What changed about the engine (`MetricsHub.set_engine` / `set_labels`): another
    (profile, mode), up again, down now; `up` the daemon's word (None: labels only)."""

    switched: bool
    came_up: bool
    went_down: bool
    up: bool | None

    @property
    def new_server(self) -> bool:
        """Figures of the running server belong to the one before: another profile or mode,
        or the engine went down."""
        return self.switched or self.went_down


class Source:
    """One metric source: its state (read and written under `hub.lock`), its feed methods
    (each bumps `hub.version` through `hub.changed()`), and `families(now)`, exactly the
    catalog's series of `NAME` (None: a family without data, left out)."""

    NAME: ClassVar[str]

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def engine_changed(self, change: EngineChange) -> None:
        """Drop what belonged to the engine before `change` (nothing, by default)."""

    def probe(self) -> None:
        """Ask what the scrape shows of a process outside the exporter (a socket), before
        `families` and outside the hub's lock (nothing, by default)."""

    def families(self, now: float) -> Iterable[Metric | None]:
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
