"""NCCL's inspector plugin (GPU-timed collective records): mean all-reduce time, bus
bandwidth and message size of the last window."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters.collectors.base import SourceCollector, one


class InspectorCollector(SourceCollector):
    SOURCE = "inspector"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        ins = s["inspector"]
        if ins is None:
            return
        pm = (s["profile"], s["mode"])
        yield one("fastverify_inspector_allreduce_seconds", ins.get("mean_exec_seconds"), *pm)
        yield one("fastverify_inspector_allreduce_bus_bandwidth_bytes_per_second",
                  ins.get("mean_busbw_bytes_per_second"), *pm)  # fmt: skip
        yield one("fastverify_inspector_allreduce_message_bytes",
                  ins.get("mean_message_bytes"), *pm)  # fmt: skip
