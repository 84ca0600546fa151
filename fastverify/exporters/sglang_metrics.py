"""Poll SGLang's own /metrics (`--enable-metrics`) and reduce it to the figures the hub needs.

`fetch(url)` GETs `{url}/metrics`; `reduce(text)` parses it with prometheus-client's text
parser and returns `{"gen_throughput", "num_running_reqs", "num_queue_reqs",
"spec_accept_length", "spec_accept_rate", "token_usage", "generation_tokens_total", ...}`;
from 0.5.23 also `spec_verify_calls_total`, `is_cuda_graph` (min over schedulers),
`startup_cuda_graph_seconds` (sum over phases), `weight_load_duration_seconds` and
`cuda_graph_passes_total_<mode>` (`decode_cuda_graph`, `decode_none`, `prefill_...`), and
`itl_seconds_sum` / `itl_count` (the inter-token latency histogram, every label set).
Other labels (`moe_ep_rank`, `is_streaming`, ...) split groups that are then combined.
SGLang labels scheduler series by `tp_rank` (and `dp_rank`/`pp_rank`): only the lowest
tp_rank is read (the ranks of one TP group report the same batch), and gauges that are
per-scheduler sums (throughput, requests, tokens) are summed over the remaining groups.
`activity(values)` keeps the counters that move only while the server serves
(`fastverify.sglang.metrics.ACTIVITY_COUNTERS`: forward passes, tokens, finished requests).
`SGLangPoller(hub, url, interval_s)` runs this in a daemon thread and feeds
`hub.on_sglang_metrics(values | None)`.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fastverify.exporters.hub import MetricsHub
from fastverify.sglang import client
from fastverify.sglang import metrics as sglang_names

if TYPE_CHECKING:
    from prometheus_client.core import Metric

# sglang metric (without the `sglang:` prefix and without `_total`) -> (our key, how to combine)
_WANTED: dict[str, tuple[str, str]] = {
    "gen_throughput": ("gen_throughput", "sum"),
    "num_running_reqs": ("num_running_reqs", "sum"),
    "num_queue_reqs": ("num_queue_reqs", "sum"),
    "token_usage": ("token_usage", "max"),
    "spec_accept_length": ("spec_accept_length", "mean"),
    "spec_accept_rate": ("spec_accept_rate", "mean"),
    # the active draft step count (moves under --speculative-adaptive)
    "spec_num_steps": ("spec_num_steps", "max"),
    "spec_num_draft_tokens": ("spec_num_draft_tokens", "max"),
    "cache_hit_rate": ("cache_hit_rate", "mean"),
    "generation_tokens": ("generation_tokens_total", "sum"),
    "prompt_tokens": ("prompt_tokens_total", "sum"),
    "num_requests": ("num_requests_total", "sum"),
    # 0.5.23 series (fastverify.sglang.metrics)
    "spec_verify_calls": ("spec_verify_calls_total", "sum"),
    "is_cuda_graph": ("is_cuda_graph", "min"),
    "startup_cuda_graph_time_seconds": ("startup_cuda_graph_seconds", "sum"),
    "weight_load_duration_seconds": ("weight_load_duration_seconds", "max"),
    # one key per `mode` label: cuda_graph_passes_total_decode_cuda_graph, ..._decode_none
    "cuda_graph_passes": ("cuda_graph_passes_total", "sum"),
}
_SPLIT_BY = {"cuda_graph_passes": "mode"}  # series reported per value of one label


def _itl_totals(families: list[Metric]) -> dict[str, float]:
    """`itl_seconds_sum` / `itl_count`: SGLang's inter-token latency histogram summed over
    its label sets (0.5.23 `observe_inter_token_latency`: the sum grows by each decode
    interval, the count by the tokens it brought), so their deltas between two polls are
    the decode seconds per token one request saw, prefill (TTFT) excluded."""
    out: dict[str, float] = {}
    name = sglang_names.INTER_TOKEN_LATENCY_SECONDS
    for fam in families:
        if fam.name != name:
            continue
        for sample in fam.samples:
            key = {name + "_sum": "itl_seconds_sum", name + "_count": "itl_count"}.get(sample.name)
            if key is not None:
                out[key] = out.get(key, 0.0) + float(sample.value)
    return out


class MetricsFetchError(RuntimeError):
    """SGLang's /metrics could not be read (connection, status or format)."""


def fetch(url: str, timeout: float = 2.0) -> str:
    """GET `{url}/metrics` (through `fastverify.sglang.client`) and return the body text."""
    where = f"GET {url.rstrip('/')}{client.METRICS}"
    try:
        return client.metrics_text(url, timeout=timeout)
    except client.EngineHTTPError as exc:
        raise MetricsFetchError(
            f"{where}: HTTP {exc.status} (was the server started with --enable-metrics?)"
        ) from None
    except (OSError, ValueError) as exc:
        raise MetricsFetchError(f"{where}: {exc}") from None


def reduce(text: str) -> dict[str, float]:
    """SGLang exposition text -> our figures (absent keys: SGLang did not publish them)."""
    from prometheus_client.parser import text_string_to_metric_families

    # key -> group labels (without tp_rank) -> (tp_rank, value) with the lowest tp_rank
    groups: dict[str, dict[tuple[Any, ...], tuple[int, float]]] = defaultdict(dict)
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise MetricsFetchError(f"unparseable /metrics text: {exc}") from None
    for fam in families:
        if not fam.name.startswith("sglang:"):
            continue
        base = fam.name[7:]
        spec = _WANTED.get(base)
        if spec is None:
            continue
        for sample in fam.samples:
            if sample.name not in (fam.name, fam.name + "_total"):
                continue  # _created etc.
            labels = dict(sample.labels)
            try:
                tp = int(labels.pop("tp_rank", "0"))
            except ValueError:
                tp = 0
            key = tuple(sorted(labels.items()))
            split = _SPLIT_BY.get(base)
            slot = f"{base}:{labels.get(split, '')}" if split else base
            prev = groups[slot].get(key)
            if prev is None or tp < prev[0]:
                groups[slot][key] = (tp, float(sample.value))
    out: dict[str, float] = _itl_totals(families)
    for slot, per_group in groups.items():
        base, _, part = slot.partition(":")
        ours, how = _WANTED[base]
        if part:
            ours = f"{ours}_{part}"
        values = [v for _, v in per_group.values()]
        if not values:
            continue
        if how == "sum":
            out[ours] = sum(values)
        elif how == "max":
            out[ours] = max(values)
        elif how == "min":
            out[ours] = min(values)
        else:
            out[ours] = sum(values) / len(values)
    return out


def _activity_keys() -> tuple[str, ...]:
    keys = []
    for name in sglang_names.ACTIVITY_COUNTERS:
        base = name.removeprefix(sglang_names.PREFIX).removesuffix("_total")
        keys.append(_WANTED[base][0])  # per-mode series get a suffix: a prefix test
    return tuple(keys)


_ACTIVITY_KEYS = _activity_keys()


def activity(values: Mapping[str, float]) -> dict[str, float]:
    """The counters among `reduce()`'s figures that move only while requests are served."""
    return {k: v for k, v in values.items() if k.startswith(_ACTIVITY_KEYS)}


class SGLangPoller:
    """Background thread: every `interval_s`, fetch + reduce + `hub.on_sglang_metrics`."""

    def __init__(
        self,
        hub: MetricsHub,
        url: str | None,
        interval_s: float = 1.0,
        *,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.hub, self._url, self.interval_s = hub, url, interval_s
        self._on_error = on_error
        self._stop, self._wake = threading.Event(), threading.Event()  # stop; poll now
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.polls = 0

    def set_url(self, url: str | None) -> None:
        self._url = url
        self._wake.set()

    def poll_once(self) -> dict[str, float] | None:
        url = self._url
        if not url:
            return None
        try:
            values = reduce(fetch(url, timeout=max(0.5, self.interval_s * 2)))
        except MetricsFetchError as exc:
            msg = str(exc)
            if msg != self.last_error and self._on_error is not None:
                self._on_error(msg)
            self.last_error = msg
            if self._url == url:
                self.hub.on_sglang_metrics(None)
            return None
        self.last_error = None
        self.polls += 1
        if self._url == url:
            self.hub.on_sglang_metrics(values)
        return values

    def start(self) -> SGLangPoller:
        self._thread = threading.Thread(
            target=self._run, name="fastverify-sglang-poll", daemon=True
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
