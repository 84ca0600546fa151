"""The hub's records: a verify-cycle histogram, one consistent reading of the decode loop
(a decode log line or one /metrics poll), a recorded baseline, and one profile window
reduced to what the exporter publishes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastverify.exporters.catalog import VERIFY_BUCKETS


@dataclass
class Histogram:
    """Cumulative-on-export histogram state: per-bucket counts (non-cumulative), sum, count."""

    buckets: tuple[float, ...] = VERIFY_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        out, acc = [], 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts, strict=True):
            acc += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), acc))
        return out

    def copy(self) -> Histogram:
        return Histogram(self.buckets, list(self.counts), self.total, self.count)


# Observation field <- the decode log record's key, the /metrics poll's key
_FIELDS = {
    "gen_throughput": ("gen_throughput", "gen_throughput"),
    "running_reqs": ("running_reqs", "num_running_reqs"),
    "queue_reqs": ("queue_reqs", "num_queue_reqs"),
    "accept_len": ("accept_len", "spec_accept_length"),
    "accept_rate": ("accept_rate", "spec_accept_rate"),
    "token_usage": ("token_usage", "token_usage"),
    "cuda_graph": ("cuda_graph", None),
}


@dataclass
class Observation:
    """One consistent reading of the decode loop (a decode log line or one /metrics poll)."""

    at: float
    source: str  # "log" | "sglang_metrics"
    gen_throughput: float | None = None
    running_reqs: float | None = None
    queue_reqs: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    token_usage: float | None = None
    cuda_graph: bool | None = None

    @classmethod
    def read(cls, at: float, source: str, values: Mapping[str, Any]) -> Observation:
        """From a decode log record (`source="log"`) or a reduced poll ("sglang_metrics")."""
        col = 0 if source == "log" else 1
        fields = {f: values.get(key) for f, keys in _FIELDS.items() if (key := keys[col])}
        return cls(at, source, **fields)


def newest(obs: list[Observation | None], now: float, ttl_s: float) -> Observation | None:
    """The newest of `obs` no older than `ttl_s`, else None."""
    fresh = [o for o in obs if o is not None and now - o.at <= ttl_s]
    return max(fresh, key=lambda o: o.at) if fresh else None


@dataclass
class Baseline:
    profile: str
    tokens_per_second: float
    per_request_tokens_per_second: float
    measured_at: float
    concurrency: int | None = None  # None: recorded without one (never matched)


def trace_reading(
    ref: Mapping[str, Any], ranks: list[Mapping[str, Any]], at: float
) -> dict[str, Any]:
    """One profile window as published: the reference rank's figures (seconds) and each
    rank's all-reduce time and median verify time."""
    return {
        "at": at,
        "rank": ref.get("rank", 0),
        "verify_passes": ref["verify_passes"],
        "verify_seconds_p50": ref["verify_ms_p50"] / 1000.0,
        "verify_seconds_p90": ref["verify_ms_p90"] / 1000.0,
        "allreduce_per_verify": ref["allreduce_per_verify"],
        "allreduce_seconds_per_verify": ref["allreduce_ms_per_verify"] / 1000.0,
        "allreduce_share": ref["allreduce_share"],
        "ranks": [
            (r.get("rank", 0), r["allreduce_ms_per_verify"] / 1000.0, r["verify_ms_p50"] / 1000.0)
            for r in ranks
        ],
    }
