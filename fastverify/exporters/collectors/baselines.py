"""The recorded baselines (baseline-mode throughput per profile and concurrency) the
speculation verdict compares with: figures, age and time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import SourceCollector


class BaselinesCollector(SourceCollector):
    SOURCE = "baselines"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        if not s["baselines"]:
            return []
        now = s["now"]
        fams: dict[str, catalog.Family] = {}
        for b in sorted(s["baselines"].values(), key=lambda b: (b.profile, b.concurrency or 0)):
            conc = "unknown" if b.concurrency is None else str(b.concurrency)
            for name, value in (
                ("fastverify_baseline_tokens_per_second", b.tokens_per_second),
                ("fastverify_baseline_request_tokens_per_second", b.per_request_tokens_per_second),
                ("fastverify_baseline_age_seconds", max(0.0, float(int(now - b.measured_at)))),
                ("fastverify_baseline_timestamp_seconds", b.measured_at),
            ):
                if name not in fams:
                    fams[name] = catalog.family(name)
                fams[name].add_metric([b.profile, conc], value)
        return fams.values()
