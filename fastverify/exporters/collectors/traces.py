"""Profile windows (kineto traces of verify passes): the verify-cycle histogram, the last
window's all-reduce figures per verify pass and per rank, all-reduce calls (traces and the
NCCL inspector) and windows by result."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import SourceCollector, one, rows


class TracesCollector(SourceCollector):
    SOURCE = "traces"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        pm = (s["profile"], s["mode"])
        if s["verify_hist"]:
            hist = catalog.family("fastverify_verify_cycle_seconds")
            for key, h in sorted(s["verify_hist"].items()):
                hist.add_metric(list(key), h.cumulative(), h.total)
            yield hist
        tr = s["trace"]
        if tr is not None:
            yield one("fastverify_allreduce_per_verify", tr["allreduce_per_verify"], *pm)
            yield one("fastverify_allreduce_seconds_per_verify",
                      tr["allreduce_seconds_per_verify"], *pm)  # fmt: skip
            yield one("fastverify_allreduce_verify_share_ratio", tr["allreduce_share"], *pm)
            q = catalog.family("fastverify_verify_seconds")
            q.add_metric([*pm, "50"], tr["verify_seconds_p50"])
            q.add_metric([*pm, "90"], tr["verify_seconds_p90"])
            yield q
            rk = catalog.family("fastverify_rank_allreduce_seconds_per_verify")
            for rank, ar_s, _v in tr["ranks"]:
                rk.add_metric([*pm, str(rank)], ar_s)
            yield rk
            yield one("fastverify_trace_window_timestamp_seconds", tr["at"])
        if s["allreduce_calls"]:
            yield rows("fastverify_allreduce_calls_total", s["allreduce_calls"])
        if s["trace_windows"]:
            yield rows("fastverify_trace_windows_total", s["trace_windows"])
