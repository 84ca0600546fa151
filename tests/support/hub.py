"""Reading a MetricsHub as Prometheus would: a fixed clock, one scrape parsed back with
prometheus-client's own text parser, a sample by name and labels."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fastverify.exporters.collector import HubCollector
from fastverify.exporters.hub import MetricsHub


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def scrape(hub: MetricsHub) -> dict[tuple[str, tuple], float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HubCollector(hub))
    text = generate_latest(reg).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def names(samples: dict) -> set[str]:
    return {k[0] for k in samples}
