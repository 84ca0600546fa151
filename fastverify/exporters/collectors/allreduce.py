"""The TP all-reduce backend the engine serves with, confirmed at verify, and its size
bound. The all-reduce part (daemon/allreduce_part.py) adds this source to the hub and
feeds it at each verified start (absent from an exporter without the daemon)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters.collectors.base import EngineChange, Source, info


class AllreduceSource(Source):
    NAME = "allreduce"
    _serving: dict[str, Any] | None = None  # {backend, max_bytes} of the serving engine

    def set_backend(self, backend: str | None, max_bytes: int | None = None) -> None:
        """The backend the engine serves with and its size bound in bytes (None:
        unbounded); `backend` None clears it."""
        with self.hub.lock:
            self._serving = (
                None if backend is None else {"backend": backend, "max_bytes": max_bytes}
            )
            self.hub.changed()

    def engine_changed(self, change: EngineChange) -> None:
        if change.up is False:
            self._serving = None

    def families(self, now: float) -> Iterable[Metric | None]:
        h, ar = self.hub, self._serving
        if ar and h.up:
            bound = ar.get("max_bytes")
            yield info(
                "fastverify_allreduce_backend_info",
                {"profile": h.profile or "", "mode": h.mode or "", "backend": ar["backend"],
                 "max_bytes": "" if bound is None else int(bound)},
            )  # fmt: skip
