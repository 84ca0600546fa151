"""SGLang-named Prometheus metrics of the sim engine (`--enable-metrics`, on the HTTP port).

Names, types and labels are SGLang 0.5.23's (`fastverify.sglang.metrics`, contract-tested):
scheduler gauges/counters labelled model_name, engine_type, tp_rank, pp_rank, moe_ep_rank;
tokenizer counters/histograms model_name, engine_type (+ is_streaming where SGLang has it).
Also `sglang:cuda_graph_passes_total{mode}`, `sglang:spec_verify_calls_total`,
`sglang:is_cuda_graph`, `sglang:startup_cuda_graph_time_seconds{phase}` and (declared,
set only by weight updates in SGLang) `sglang:weight_load_duration_seconds{source}`.
Uses a private registry, so only these series are exposed.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from fastverify.sglang import metrics as m

# SGLang's histogram buckets (seconds): time to first token and end-to-end latency share
# their first fifteen
_LATENCY_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0)
TTFT_BUCKETS = (*_LATENCY_BUCKETS, 120.0, 160.0)
E2E_BUCKETS = (*_LATENCY_BUCKETS, 100.0, 200.0, 400.0, 800.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
               0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0,
               8.0)  # fmt: skip
# SGLang runs prometheus_client in multiprocess mode, which exports no `_created` series.
disable_created_metrics()


class SimMetrics:
    """The metric objects, labelled as SGLang 0.5.23 labels them (`fastverify.sglang.metrics`:
    scheduler series for TP0, the scheduler that reports; tokenizer series without tp/pp).
    Per-request series take the request's `is_streaming` ("true"/"false")."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self,
        model_name: str,
        decode_graph: bool = True,
        prefill_graph: bool = True,
        sglang_version: str | None = None,
    ) -> None:
        from fastverify.sglang.facts import resolve

        self.registry = CollectorRegistry(auto_describe=True)
        # a series the played release does not declare is kept off the exposition
        self._absent = CollectorRegistry(auto_describe=True)
        facts = resolve(sglang_version) if sglang_version else None

        def reg(name: str) -> CollectorRegistry:
            return self.registry if facts is None or facts.has_metric(name) else self._absent

        def label_names(name: str) -> tuple[str, ...]:
            if facts is not None and facts.has_metric(name):
                return facts.metric_labels(name)
            return m.label_names(name)

        self.decode_graph = decode_graph
        self.prefill_graph = prefill_graph
        base = {"model_name": model_name, "engine_type": m.ENGINE_TYPE_UNIFIED}
        sched = {**base, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}

        def values(name: str) -> dict[str, str]:
            names = label_names(name)
            own = sched if "tp_rank" in names else base
            return {k: own.get(k, "") for k in names}

        def gauge(name: str, doc: str) -> Gauge:
            g = Gauge(
                name, doc, label_names(name), registry=reg(name), multiprocess_mode="mostrecent"
            )
            return g.labels(**values(name))

        def family(kind: type, name: str, doc: str, **kw: object) -> tuple[Any, dict[str, str]]:
            return kind(name, doc, label_names(name), registry=reg(name), **kw), values(name)

        self.num_running_reqs = gauge(m.NUM_RUNNING_REQS, "The number of running requests.")
        self.num_queue_reqs = gauge(
            m.NUM_QUEUE_REQS, "The number of requests in the waiting queue."
        )
        self.gen_throughput = gauge(m.GEN_THROUGHPUT, "The generation throughput (token/s).")
        self.token_usage = gauge(m.TOKEN_USAGE, "The token usage.")
        self.cache_hit_rate = gauge(m.CACHE_HIT_RATE, "The prefix cache hit rate.")
        self.spec_accept_length = gauge(
            m.SPEC_ACCEPT_LENGTH, "The average acceptance length of speculative decoding."
        )
        self.spec_accept_rate = gauge(
            m.SPEC_ACCEPT_RATE, "The average acceptance rate of speculative decoding."
        )
        self.spec_num_steps = gauge(m.SPEC_NUM_STEPS, "Currently active speculative_num_steps.")
        self.spec_num_draft_tokens = gauge(
            m.SPEC_NUM_DRAFT_TOKENS,
            "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
        )
        self.is_cuda_graph = gauge(m.IS_CUDA_GRAPH, "Whether the batch is using CUDA graph.")
        # edge-triggered in SGLang (weight updates only): declared, no sample at start-up
        self._weight_load = family(
            Gauge,
            m.WEIGHT_LOAD_DURATION_SECONDS,
            "Duration of the last weight load/update in seconds.",
            multiprocess_mode="mostrecent",
        )
        self._passes = family(
            Counter, m.CUDA_GRAPH_PASSES_TOTAL, "Forward passes by phase and CUDA-graph use."
        )
        self._startup_graph = family(
            Gauge,
            m.STARTUP_CUDA_GRAPH_TIME_SECONDS,
            "CUDA graph capture duration by phase in seconds.",
            multiprocess_mode="mostrecent",
        )
        self._prompt = family(Counter, m.PROMPT_TOKENS_TOTAL, "Number of prefill tokens processed.")
        self._generation = family(
            Counter, m.GENERATION_TOKENS_TOTAL, "Number of generation tokens processed."
        )
        self._requests = family(Counter, m.NUM_REQUESTS_TOTAL, "Number of requests processed.")
        spec = family(
            Counter, m.SPEC_VERIFY_CALLS_TOTAL, "Number of speculative decoding verification calls."
        )
        self._spec_verify = spec  # its series appears at the first verify, as in SGLang
        self._ttft = family(
            Histogram,
            m.TIME_TO_FIRST_TOKEN_SECONDS,
            "Histogram of time to first token in seconds.",
            buckets=TTFT_BUCKETS,
        )
        itl = family(
            Histogram,
            m.INTER_TOKEN_LATENCY_SECONDS,
            "Histogram of inter-token latency in seconds.",
            buckets=ITL_BUCKETS,
        )
        self.itl = itl[0].labels(**itl[1])
        e2e = family(
            Histogram,
            m.E2E_REQUEST_LATENCY_SECONDS,
            "Histogram of End-to-end request latency in seconds",
            buckets=E2E_BUCKETS,
        )
        self._e2e = e2e

    def count_verify(self, calls: int) -> None:
        """SGLang's tokenizer metrics add `spec_verify_ct` when it is > 0 (the series is
        created then: a baseline server exports none)."""
        if calls > 0:
            self._child(self._spec_verify).inc(calls)

    @staticmethod
    def _child(fam: tuple[Any, dict[str, str]], **extra: str) -> Any:
        metric, labels = fam
        merged = {k: v for k, v in {**labels, **extra}.items() if k in labels}
        return metric.labels(**merged)

    # per-request series (is_streaming)
    def prompt_tokens(self, stream: bool) -> Any:
        return self._child(self._prompt, is_streaming=_flag(stream))

    def generation_tokens(self, stream: bool) -> Any:
        return self._child(self._generation, is_streaming=_flag(stream))

    def num_requests(self, stream: bool) -> Any:
        return self._child(self._requests, is_streaming=_flag(stream))

    def ttft(self, stream: bool) -> Any:
        return self._child(self._ttft, is_streaming=_flag(stream))

    def e2e(self, stream: bool) -> Any:
        return self._child(self._e2e, is_streaming=_flag(stream))

    # forward passes and start-up
    def decode_pass(self) -> None:
        mode = "decode_cuda_graph" if self.decode_graph else "decode_none"
        self._child(self._passes, mode=mode).inc()
        self.is_cuda_graph.set(1 if self.decode_graph else 0)

    def prefill_pass(self) -> None:
        mode = "prefill_cuda_graph" if self.prefill_graph else "prefill_none"
        self._child(self._passes, mode=mode).inc()

    def startup_cuda_graph(self, phase: str, seconds: float) -> None:
        self._child(self._startup_graph, phase=phase).set(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _flag(value: bool) -> str:
    return "true" if value else "false"
