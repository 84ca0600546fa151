"""The control API's TCP door (only when it is configured): refused attempts by reason and
the callers backing off now (a certificate's subject, else an address)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from prometheus_client.core import Metric

from fastverify.exporters.collectors.base import Source, one, rows


class ApiAuthSource(Source):
    NAME = "api_auth"
    _failures: Counter[str] | None = None
    _backoff: Callable[[], int] | None = None

    def watch(self, reasons: Iterable[str], backoff_sources: Callable[[], int]) -> None:
        """Publish the TCP door's failed attempts (each reason from 0) and the number of
        sources backing off now (`backoff_sources()`, called per scrape: in memory only)."""
        with self.hub.lock:
            self._failures = Counter(dict.fromkeys(reasons, 0))
            self._backoff = backoff_sources
            self.hub.changed()

    def on_failure(self, reason: str) -> None:
        """Count a refused attempt on the TCP door (token, tls, plaintext, backoff)."""
        with self.hub.lock:
            if self._failures is not None:
                self._failures[reason] += 1
                self.hub.changed()

    def families(self, now: float) -> Iterable[Metric | None]:
        if self._failures is not None:
            yield rows("fastverify_api_auth_failures_total", self._failures)
        yield one("fastverify_api_auth_backoff_sources", self._backoff() if self._backoff else None)
