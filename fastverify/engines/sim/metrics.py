"""SGLang-named Prometheus metrics of the sim engine (`--enable-metrics`, on the HTTP port).

Names, types and labels follow SGLang's metrics collector (scheduler gauges and
tokenizer-manager counters/histograms, labelled model_name, engine_type, tp_rank,
pp_rank): `sglang:gen_throughput`, `sglang:spec_accept_length`, `sglang:num_running_reqs`,
`sglang:generation_tokens_total`, `sglang:time_to_first_token_seconds`, ...
Uses a private registry, so only these series are exposed.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank")
TTFT_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    120.0,
    160.0,
)
ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
)
# SGLang runs prometheus_client in multiprocess mode, which exports no `_created` series.
disable_created_metrics()

E2E_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
    800.0,
)


class SimMetrics:
    """The metric objects, pre-labelled for TP0 (the scheduler that reports)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        lv = {"model_name": model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=r, multiprocess_mode="mostrecent").labels(**lv)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=r).labels(**lv)

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=r).labels(**lv)

        self.num_running_reqs = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.num_queue_reqs = gauge(
            "sglang:num_queue_reqs", "The number of requests in the waiting queue."
        )
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.spec_accept_length = gauge(
            "sglang:spec_accept_length", "The average acceptance length of speculative decoding."
        )
        self.spec_accept_rate = gauge(
            "sglang:spec_accept_rate", "The average acceptance rate of speculative decoding."
        )
        self.prompt_tokens = counter("sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "sglang:generation_tokens", "Number of generation tokens processed."
        )
        self.num_requests = counter("sglang:num_requests", "Number of requests processed.")
        self.ttft = hist(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = hist(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.e2e = hist(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            E2E_BUCKETS,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
