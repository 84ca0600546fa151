"""The recorded baselines (baseline-mode throughput per profile and concurrency) the
speculation verdict compares with: figures, age and time. The daemon persists them; this
source only holds them."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import Hub, Source
from fastverify.exporters.readings import Baseline


class BaselinesSource(Source):
    NAME = "baselines"

    def __init__(self, hub: Hub) -> None:
        super().__init__(hub)
        self._baselines: dict[tuple[str, int | None], Baseline] = {}

    def set(
        self,
        profile: str,
        tokens_per_second: float,
        per_request_tokens_per_second: float,
        measured_at: float,
        concurrency: int | None = None,
    ) -> None:
        """Record the last baseline-mode measurement of `profile` at `concurrency`
        concurrent requests (time: unix seconds). A baseline without a concurrency is
        published but never compared with (nothing says which batch size it matches)."""
        if tokens_per_second <= 0 or per_request_tokens_per_second <= 0:
            raise ValueError("baseline figures must be positive tokens per second")
        if concurrency is not None and (isinstance(concurrency, bool) or int(concurrency) < 1):
            raise ValueError("a baseline's concurrency must be a positive number of requests")
        conc = None if concurrency is None else int(concurrency)
        with self.hub.lock:
            self._baselines[(profile, conc)] = Baseline(
                profile,
                float(tokens_per_second),
                float(per_request_tokens_per_second),
                float(measured_at),
                conc,
            )
            self.hub.changed()

    def rates(self, profile: str) -> dict[int, float]:
        """Tokens/s per request of `profile`'s baselines, by concurrency (under the lock)."""
        return {
            conc: b.per_request_tokens_per_second
            for (name, conc), b in self._baselines.items()
            if name == profile and conc is not None
        }

    def families(self, now: float) -> Iterable[Metric | None]:
        fams: dict[str, catalog.Family] = {}
        for b in sorted(self._baselines.values(), key=lambda b: (b.profile, b.concurrency or 0)):
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
