"""SGLang's Prometheus series (`srt/observability/metrics_collector.py`, 0.5.23).

Scheduler gauges carry `SCHEDULER_LABELS` (+ `dp_rank` with data parallelism);
the tokenizer's token/request counters carry `TOKENIZER_LABELS` (+ their own extra
label, e.g. `is_streaming`). A few series add one label of their own (`EXTRA_LABELS`).
"""

from __future__ import annotations

PREFIX = "sglang:"
SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
SCHEDULER_LABELS_DP = (*SCHEDULER_LABELS, "dp_rank")
TOKENIZER_LABELS = ("model_name", "engine_type")
ENGINE_TYPE_UNIFIED = "unified"  # a server that is neither PD-prefill nor PD-decode

# scheduler gauges
NUM_RUNNING_REQS = "sglang:num_running_reqs"
NUM_QUEUE_REQS = "sglang:num_queue_reqs"
GEN_THROUGHPUT = "sglang:gen_throughput"
TOKEN_USAGE = "sglang:token_usage"
CACHE_HIT_RATE = "sglang:cache_hit_rate"
SPEC_ACCEPT_LENGTH = "sglang:spec_accept_length"
SPEC_ACCEPT_RATE = "sglang:spec_accept_rate"
# the active step count (moves under --speculative-adaptive; fastverify.sglang.adaptive)
SPEC_NUM_STEPS = "sglang:spec_num_steps"
SPEC_NUM_DRAFT_TOKENS = "sglang:spec_num_draft_tokens"
IS_CUDA_GRAPH = "sglang:is_cuda_graph"
WEIGHT_LOAD_DURATION_SECONDS = "sglang:weight_load_duration_seconds"
# scheduler counter
CUDA_GRAPH_PASSES_TOTAL = "sglang:cuda_graph_passes_total"
# tokenizer side
PROMPT_TOKENS_TOTAL = "sglang:prompt_tokens_total"
GENERATION_TOKENS_TOTAL = "sglang:generation_tokens_total"
NUM_REQUESTS_TOTAL = "sglang:num_requests_total"
SPEC_VERIFY_CALLS_TOTAL = "sglang:spec_verify_calls_total"
STARTUP_CUDA_GRAPH_TIME_SECONDS = "sglang:startup_cuda_graph_time_seconds"
TIME_TO_FIRST_TOKEN_SECONDS = "sglang:time_to_first_token_seconds"
INTER_TOKEN_LATENCY_SECONDS = "sglang:inter_token_latency_seconds"
E2E_REQUEST_LATENCY_SECONDS = "sglang:e2e_request_latency_seconds"

SCHEDULER_GAUGES = (
    NUM_RUNNING_REQS,
    NUM_QUEUE_REQS,
    GEN_THROUGHPUT,
    TOKEN_USAGE,
    CACHE_HIT_RATE,
    SPEC_ACCEPT_LENGTH,
    SPEC_ACCEPT_RATE,
    SPEC_NUM_STEPS,
    SPEC_NUM_DRAFT_TOKENS,
    IS_CUDA_GRAPH,
    WEIGHT_LOAD_DURATION_SECONDS,
)
SCHEDULER_COUNTERS = (CUDA_GRAPH_PASSES_TOTAL,)
TOKENIZER_COUNTERS = (
    PROMPT_TOKENS_TOTAL,
    GENERATION_TOKENS_TOTAL,
    NUM_REQUESTS_TOTAL,
    SPEC_VERIFY_CALLS_TOTAL,
)
TOKENIZER_GAUGES = (STARTUP_CUDA_GRAPH_TIME_SECONDS,)
HISTOGRAMS = (
    TIME_TO_FIRST_TOKEN_SECONDS,
    INTER_TOKEN_LATENCY_SECONDS,
    E2E_REQUEST_LATENCY_SECONDS,
)
# a series' own label beyond the collector's common ones
EXTRA_LABELS: dict[str, tuple[str, ...]] = {
    CUDA_GRAPH_PASSES_TOTAL: ("mode",),
    WEIGHT_LOAD_DURATION_SECONDS: ("source",),
    STARTUP_CUDA_GRAPH_TIME_SECONDS: ("phase",),
    PROMPT_TOKENS_TOTAL: ("is_streaming",),
    GENERATION_TOKENS_TOTAL: ("is_streaming",),
    NUM_REQUESTS_TOTAL: ("is_streaming",),
    TIME_TO_FIRST_TOKEN_SECONDS: ("is_streaming",),
    # 0.5.23 metrics_collector.py:2070 (found by the per-release facts, which read it)
    E2E_REQUEST_LATENCY_SECONDS: ("is_streaming",),
}
# Counters that move only while the server serves requests, read twice by the trace-capture
# traffic check (gauges are refreshed at log intervals and one sample can miss a batch).
# 0.5.23: cuda_graph_passes_total{mode} +1 per decode batch (batch_result_processor) and per
# prefill batch (metrics_reporter); the tokenizer's token/request counters and
# spec_verify_calls_total move when a request finishes (observe_one_finished_request).
ACTIVITY_COUNTERS = (
    CUDA_GRAPH_PASSES_TOTAL,
    GENERATION_TOKENS_TOTAL,
    PROMPT_TOKENS_TOTAL,
    NUM_REQUESTS_TOTAL,
    SPEC_VERIFY_CALLS_TOTAL,
)
# values of `mode` on sglang:cuda_graph_passes_total
CUDA_GRAPH_PASS_MODES = ("decode_cuda_graph", "decode_none", "prefill_cuda_graph", "prefill_none")


def label_names(name: str, dp: bool = False) -> tuple[str, ...]:
    """All label names of series `name` (as SGLang 0.5.23 declares them)."""
    base: tuple[str, ...]
    if name in SCHEDULER_GAUGES or name in SCHEDULER_COUNTERS:
        base = SCHEDULER_LABELS_DP if dp else SCHEDULER_LABELS
    else:
        base = TOKENIZER_LABELS
    return (*base, *EXTRA_LABELS.get(name, ()))
