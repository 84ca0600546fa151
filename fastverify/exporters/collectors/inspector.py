"""NCCL's inspector plugin (GPU-timed collective records): mean all-reduce time, bus
bandwidth and message size of the last window (its calls count with the traces')."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters.collectors.base import EngineChange, Hub, Source, one
from fastverify.exporters.collectors.sources import HealthSource
from fastverify.exporters.collectors.traces import TracesSource


class InspectorSource(Source):
    NAME = "inspector"

    def __init__(self, hub: Hub, health: HealthSource, traces: TracesSource) -> None:
        super().__init__(hub)
        self.health, self.traces = health, traces
        self._window: dict[str, Any] | None = None

    def on_window(self, summary: Mapping[str, Any]) -> None:
        """A window of NCCL inspector records, reduced by `inspector.summarize`."""
        h = self.hub
        with h.lock:
            self.traces.count_calls("inspector", int(summary.get("allreduce_calls", 0)))
            self._window = dict(summary)
            self.health.mark("inspector", True)
            h.changed()

    def engine_changed(self, change: EngineChange) -> None:
        if change.new_server:
            self._window = None

    def families(self, now: float) -> Iterable[Metric | None]:
        ins = self._window
        if ins is None:
            return
        pm = (self.hub.profile or "", self.hub.mode or "")
        yield one("fastverify_inspector_allreduce_seconds", ins.get("mean_exec_seconds"), *pm)
        yield one("fastverify_inspector_allreduce_bus_bandwidth_bytes_per_second",
                  ins.get("mean_busbw_bytes_per_second"), *pm)  # fmt: skip
        yield one("fastverify_inspector_allreduce_message_bytes",
                  ins.get("mean_message_bytes"), *pm)  # fmt: skip
