"""Profile windows (kineto traces of verify passes): the verify-cycle histogram, the last
window's all-reduce figures per verify pass and per rank, all-reduce calls (traces and the
NCCL inspector) and windows by result. Counters and the histogram are kept per (profile,
mode) for the life of the process, so that `rate()` stays correct across switches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import EngineChange, Hub, Source, one, rows
from fastverify.exporters.collectors.sources import HealthSource
from fastverify.exporters.readings import Histogram, trace_reading


class TracesSource(Source):
    NAME = "traces"

    def __init__(self, hub: Hub, health: HealthSource) -> None:
        super().__init__(hub)
        self.health = health
        self._verify_hist: dict[tuple[str, str], Histogram] = {}
        self._calls: Counter[tuple[str, str, str]] = Counter()  # (profile, mode, source)
        self._windows: Counter[str] = Counter()
        self._trace: dict[str, Any] | None = None

    def on_analysis(self, analysis: Mapping[str, Any]) -> None:
        """Feed the result of one profile window (`traces.analyze_*(...)` dict)."""
        ranks = [r for r in analysis.get("ranks", []) if r.get("verify_passes")]
        h = self.hub
        with h.lock:
            h.changed()
            if not ranks:
                self._windows["empty"] += 1
                self.health.mark("traces", False)
                return
            ref = min(ranks, key=lambda r: r.get("rank", 0))
            key = (h.profile or "", h.mode or "")
            hist = self._verify_hist.setdefault(key, Histogram())
            for ms in ref.get("verify_ms_samples") or ():
                hist.observe(ms / 1000.0)
            calls = ref.get("allreduce_calls")
            if calls is None:
                calls = round(ref["allreduce_per_verify"] * ref["verify_passes"])
            self.count_calls("trace", int(calls))
            at = float(analysis.get("captured_at") or h.now())
            self._trace = trace_reading(ref, ranks, at)
            self._windows["ok"] += 1
            self.health.mark("traces", True)

    def on_failure(self) -> None:
        """Count a profile window that produced no analysis."""
        with self.hub.lock:
            self._windows["failed"] += 1
            self.health.mark("traces", False)
            self.hub.changed()

    def count_calls(self, source: str, calls: int) -> None:
        """All-reduces seen on the GPU under the active profile and mode (under the lock):
        a window's trace kernels, or NCCL inspector records."""
        self._calls[(self.hub.profile or "", self.hub.mode or "", source)] += calls

    def engine_changed(self, change: EngineChange) -> None:
        if change.new_server:
            self._trace = None

    def windows(self) -> dict[str, int]:
        """Profile windows by result (ok, empty, failed)."""
        with self.hub.lock:
            return dict(self._windows)

    def calls(self) -> dict[tuple[str, str, str], int]:
        """All-reduce calls by (profile, mode, source)."""
        with self.hub.lock:
            return dict(self._calls)

    def families(self, now: float) -> Iterable[Metric | None]:
        pm = (self.hub.profile or "", self.hub.mode or "")
        if self._verify_hist:
            hist = catalog.family("fastverify_verify_cycle_seconds")
            for key, h in sorted(self._verify_hist.items()):
                hist.add_metric(list(key), h.cumulative(), h.total)
            yield hist
        tr = self._trace
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
        if self._calls:
            yield rows("fastverify_allreduce_calls_total", self._calls)
        if self._windows:
            yield rows("fastverify_trace_windows_total", self._windows)
