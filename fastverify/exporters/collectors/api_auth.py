"""The control API's TCP door (only when it is configured): refused attempts by reason and
the callers backing off now (a certificate's subject, else an address)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters.collectors.base import SourceCollector, one, rows


class ApiAuthCollector(SourceCollector):
    SOURCE = "api_auth"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        if s.get("auth_failures") is not None:
            yield rows("fastverify_api_auth_failures_total", s["auth_failures"])
        yield one("fastverify_api_auth_backoff_sources", s.get("auth_backoff_sources"))
