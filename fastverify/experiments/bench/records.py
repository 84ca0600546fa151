"""What `fastverifyctl bench` runs with and what it measures: its config (validated), one
record per request as it streams, the result (load.py's module docstring defines each
figure), the milliseconds summary of a latency list and the window's timeline (each request
as it went)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from fastverify.experiments.common.stats import mean
from fastverify.percentiles import percentile
from fastverify.sglang import request_stamps


class BenchError(RuntimeError):
    """The benchmark could not produce a measurement (server unreachable, every request failed)."""


@dataclass(frozen=True)
class BenchConfig:
    url: str = "http://127.0.0.1:30000"
    concurrency: int = 1
    duration: float | None = 30.0  # seconds; None when `requests` bounds the run
    requests: int | None = None
    input_len: int = 128
    output_len: int = 256
    seed: int = 0
    warmup: int = 1  # requests per client, sent and discarded before measuring
    timeout: float = 600.0  # per request
    dataset: str | None = None  # a prompt set (datasets.load); None: random token ids
    temperature: float = 0.0
    top_p: float = 1.0

    def validate(self) -> None:
        if self.concurrency < 1:
            raise ValueError("--concurrency must be at least 1")
        if self.duration is None and self.requests is None:
            raise ValueError("give --duration or --requests")
        if self.duration is not None and self.duration <= 0:
            raise ValueError("--duration must be positive")
        if self.requests is not None and self.requests < 1:
            raise ValueError("--requests must be at least 1")
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError("--input-len and --output-len must be at least 1")
        if self.warmup < 0:
            raise ValueError("--warmup must be 0 or more")
        if self.temperature < 0:
            raise ValueError("--temperature must be 0 or more (0: greedy)")
        if not 0 < self.top_p <= 1:
            raise ValueError("--top-p must be in (0, 1]")

    @property
    def sampling(self) -> dict[str, float]:
        return {"temperature": self.temperature, "top_p": self.top_p}


@dataclass
class RequestRecord:
    start: float
    ttft: float | None = None
    latency: float | None = None
    tokens: int = 0
    chunk_times: list[float] = field(default_factory=list)  # absolute perf_counter times
    chunk_tokens: list[int] = field(default_factory=list)  # tokens added by each chunk
    error: str | None = None
    completed: bool = False
    cancelled: bool = False  # in flight at the deadline (not a failure)
    histogram: list[int] | None = None  # meta_info.spec_correct_drafts_histogram (finished)
    # SGLang's own stamps of it (wall clock; fastverify.sglang.request_stamps) and the
    # wall-clock time at perf_counter 0 taken when it was sent, to place them beside ours
    stamps: dict[str, float] = field(default_factory=dict)
    wall_offset: float = 0.0

    def first_token_split(self) -> dict[str, float] | None:
        """Seconds from its send to its first token in each of SGLang's stages (None when
        the server sent no stamps or the request got no token)."""
        if not self.chunk_times or not self.stamps:
            return None
        return request_stamps.first_token_split(
            self.start + self.wall_offset, self.chunk_times[0] + self.wall_offset, self.stamps
        )


@dataclass
class BenchResult:
    source: str  # "fastverify" | "sglang.bench_serving"
    url: str
    config: dict[str, Any]
    duration_s: float
    completed: int
    failed: int
    output_tokens: int
    output_tokens_per_second: float
    request_rate: float
    per_request_tokens_per_second: float | None
    ttft_ms: dict[str, float | None]
    itl_ms: dict[str, float | None]
    accept_length: float | None
    errors: list[str] = field(default_factory=list)
    weights: str | None = None  # "dummy" (trial server) | "real" | None (not reported)
    # where the accept length came from: "measured", or "forced (SGLANG_SIMULATE_ACC_LEN=L)"
    # when SGLang forced it (the daemon knows the server's environment; None: not known)
    acceptance_source: str | None = None
    # why the window measured no per-request rate, and what to change (None: it did)
    incomplete: str | None = None
    accept_histogram: list[int] | None = None  # index = accepted drafts per verify pass
    # each completed request's own histogram (passes of one request are correlated: the
    # plan's intervals resample requests, never passes)
    accept_requests: list[list[int]] | None = None
    accept_curve: dict[str, float] | None = None  # steps k -> accept length L(k)
    accept_steps: int | None = None  # the server's draft steps the histogram was measured at
    dataset: dict[str, Any] | None = None  # what the prompts were (datasets.Dataset.identity)
    # decode alone: tokens / time over the chunk gaps that hold no other request's first token
    # (no prefill forward ran inside them); the gaps left out for holding one
    decode_tokens_per_second: float | None = None
    gaps_with_prefill: int | None = None
    # the mean first token split into SGLang's stages (request_stamps.STAGES), over the
    # requests whose stamps the server sent (`--enable-metrics`); None when none did
    ttft_split_ms: dict[str, float] | None = None
    ttft_split_requests: int | None = None
    # the prefill forwards SGLang took the window's requests in, from the same stamps
    # (`prefill_forwards`); None when the server sent none
    prefill_forwards: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ms_summary(values: list[float]) -> dict[str, float | None]:
    """Mean, p50, p90 and p99 of `values` (seconds) in milliseconds (None: no values)."""

    def ms(v: float | None) -> float | None:
        return None if v is None else v * 1000.0

    return {
        "mean": ms(mean(values)) if values else None,
        "p50": ms(percentile(values, 50)),
        "p90": ms(percentile(values, 90)),
        "p99": ms(percentile(values, 99)),
    }


def ttft_split(records: list[RequestRecord]) -> tuple[dict[str, float] | None, int]:
    """The mean milliseconds of each stage of the first token over the requests that carry
    SGLang's stamps, and how many did."""
    splits = [sp for r in records if (sp := r.first_token_split()) is not None]
    if not splits:
        return None, 0
    return {k: mean([sp[k] for sp in splits]) * 1000.0 for k in request_stamps.STAGES}, len(splits)


def prefill_forwards(records: list[RequestRecord]) -> dict[str, float] | None:
    """How SGLang's scheduler batched the requests' prompts, from their stamps: how many
    prefill forwards took them in, the mean prompts (of these requests) per forward and the
    forwards' mean and longest milliseconds; None without stamps."""
    forwards = request_stamps.prefill_forwards(r.stamps for r in records)
    if not forwards:
        return None
    ms = [f.seconds * 1000.0 for f in forwards]
    return {
        "count": len(forwards),
        "prompts_mean": sum(f.prompts for f in forwards) / len(forwards),
        "ms_mean": mean(ms),
        "ms_max": max(ms),
    }


def timeline(records: list[RequestRecord], t0: float) -> list[dict[str, Any]]:
    """Each measured request as it went, in seconds from the window's start: when it was
    sent, its first token, every streamed chunk as [seconds, tokens], and how it ended. It
    shows where a window's time went: first tokens of several requests that arrive together
    came out of one prefill forward, and a chunk gap that holds another request's first
    token held that prefill. SGLang's own stamps of the request, when it sent them, go in
    `server_s` (each stamp's meta_info key -> seconds from the window's start)."""

    def s(t: float) -> float:
        return round(t - t0, 6)

    def outcome(r: RequestRecord) -> str:
        if r.completed:
            return "completed"
        return "cancelled" if r.cancelled else "failed" if r.error else "open"

    def server(r: RequestRecord) -> dict[str, Any]:
        return {"server_s": {k: s(v - r.wall_offset) for k, v in r.stamps.items()}}

    return [
        {
            "start_s": s(r.start),
            "first_token_s": s(r.chunk_times[0]) if r.chunk_times else None,
            "chunks": [[s(t), n] for t, n in zip(r.chunk_times, r.chunk_tokens, strict=True)],
            "tokens": r.tokens,
            "outcome": outcome(r),
            **(server(r) if r.stamps else {}),
        }
        for r in records
    ]
