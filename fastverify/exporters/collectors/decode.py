"""Decode figures of the serving engine, from SGLang's /metrics poll or its decode log lines:
tokens/s, generated tokens, accept length and rate, requests, KV usage, the spec cycle and
the speculation verdict against a baseline of the same concurrency."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters.collectors.base import SourceCollector, one, rows


class DecodeCollector(SourceCollector):
    SOURCE = "decode"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        pm = (s["profile"], s["mode"])
        yield one("fastverify_generation_tokens_per_second", s["tokens_per_second"], *pm)
        yield one("fastverify_spec_accept_length", s["spec_accept_length"], *pm)
        yield one("fastverify_spec_accept_rate", s["spec_accept_rate"], *pm)
        if s["generation_tokens_total"]:
            yield rows("fastverify_generation_tokens_total", s["generation_tokens_total"])
        req = s["requests"]
        if req is not None:
            yield one("fastverify_running_requests", req.running_reqs, *pm)
            yield one("fastverify_queued_requests", req.queue_reqs, *pm)
            yield one("fastverify_kv_token_usage_ratio", req.token_usage, *pm)
        yield one("fastverify_spec_cycle_seconds", s["spec_cycle_seconds"], *pm)
        v = s["verdict"]
        if v is not None:  # only against a baseline of this profile at the reading's concurrency
            conc = str(v.concurrency)
            yield one("fastverify_spec_breakeven_accept_length", v.breakeven_accept_length,
                      *pm, conc)  # fmt: skip
            yield one("fastverify_spec_speedup_estimate", v.speedup_estimate, *pm, conc)
