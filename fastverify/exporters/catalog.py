"""The metric catalog: every series the exporter publishes, declared once.

Each `Series` is a name as Prometheus stores it (`_total` on counters, `_info` on info
metrics), its type, help text, label names and the collector (`source`) that emits it. The
collectors build their families from it (`family(name)`) and describe themselves with it
(`describe(source)`), the metrics table in docs/reference/exporter.md is generated from it
(`python -m fastverify.exporters.catalog --write docs/reference/exporter.md`), and the dashboard
tests check every series a dashboard query names against it. `SGLANG` lists the engine's own
`sglang:` series the exporter reads (declared in `fastverify.sglang.metrics`; Prometheus
scrapes them from the engine, the dashboards query them).

Naming: base units (seconds, bytes), `_total` counters, `_info` metadata; labels `profile`
and `mode` on every figure of the running engine so Grafana can compare profiles. Series
without fresh data are absent, never zero.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from fastverify.sglang import metrics as sglang_metrics

if TYPE_CHECKING:

    class Family(Metric):
        """A prometheus-client family of one series' type (Gauge/Counter/Info/Histogram
        MetricFamily): a Metric that takes samples. `add_metric`'s value is that type's (a
        float, an info's label dict, a histogram's buckets and sum): the collectors' tests
        check it, not this signature."""

        def add_metric(
            self, labels: Sequence[str], value: Any = None, *args: Any, **kw: Any
        ) -> None: ...

else:
    Family = Metric

PM = ("profile", "mode")
# Verify passes on the field box took ~30 ms; resolve 1-100 ms with detail around 20-40 ms.
# Client-visible downtime of a switch: from milliseconds (standby) through seconds (hold on
# the sim) to minutes (a real SGLang start behind a hold or without a front door).
DOWNTIME_BUCKETS: tuple[float, ...] = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                                       600.0)  # fmt: skip
SWITCH_DOOR_MODES = ("none", "hold", "standby")  # a switch's `switch.mode`
VERIFY_BUCKETS: tuple[float, ...] = (0.001, 0.002, 0.005, 0.0075, 0.01, 0.0125, 0.015,
                                     0.0175, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.06,
                                     0.075, 0.1)  # fmt: skip
_SUFFIX = {"counter": "_total", "info": "_info"}
_FAMILY = {
    "gauge": GaugeMetricFamily,
    "counter": CounterMetricFamily,
    "histogram": HistogramMetricFamily,
    "info": InfoMetricFamily,
}
# the sample suffixes of each type as the exposition writes them
_SAMPLES = {"histogram": ("_bucket", "_sum", "_count")}


@dataclass(frozen=True)
class Series:
    """One published series: `name` as queried; `label_note` says more of its labels for
    the docs; an `open` info carries labels beyond `labels` (one per profile setting)."""

    name: str
    type: str  # gauge | counter | histogram | info
    help: str
    labels: tuple[str, ...]
    source: str
    label_note: str = ""
    open: bool = False

    @property
    def family_name(self) -> str:
        """The name prometheus-client's families take (without `_total` / `_info`)."""
        return self.name.removesuffix(_SUFFIX.get(self.type, ""))

    @property
    def sample_names(self) -> tuple[str, ...]:
        return tuple(self.name + s for s in _SAMPLES.get(self.type, ("",)))

    @property
    def exposed_type(self) -> str:
        """The type the text exposition (format 0.0.4) declares: an info is a gauge."""
        return "gauge" if self.type == "info" else self.type

    def family(self) -> Family:
        """An empty family of this series, samples to be added in `labels` order (an open
        info takes its labels as one dict: `add_metric([], {...})`)."""
        labels = () if self.open else self.labels
        made = _FAMILY[self.type](self.family_name, self.help, labels=list(labels))
        return cast("Family", made)  # each of _FAMILY's classes takes samples


def _s(source: str, *rows: tuple[Any, ...]) -> list[Series]:
    return [Series(name, kind, doc, tuple(labels), source, *rest)
            for name, kind, doc, labels, *rest in rows]  # fmt: skip


ENGINE = _s(
    "engine",
    ("fastverify_up", "gauge", "1 when the engine answers, else 0", ()),
    ("fastverify_profile_info", "info",
     "Active NCCL profile, decoding mode and the profile's settings",
     ("profile", "mode", "engine", "nccl_algo", "nccl_proto", "weights"),
     "+ one per non-secret profile setting, lower-cased", True),
    ("fastverify_engine_info", "info",
     "The server's SGLang version, the release whose facts serve it and whether it is in "
     "fastverify's supported range (false: newer, running on the newest facts)",
     ("version", "facts_version", "supported")),
    ("fastverify_spec_acceptance_source_info", "info",
     "Where a drafting server's accept length comes from: `forced "
     "(SGLANG_SIMULATE_ACC_LEN=L)` when its environment makes SGLang force it (every "
     "acceptance figure is then SGLang's choice, not the drafter's), else `measured`",
     (*PM, "source")),
)  # fmt: skip
ALLREDUCE = _s(
    "allreduce",
    ("fastverify_allreduce_backend_info", "info",
     "TP all-reduce backend SGLang serves decode/verify sizes with (confirmed from its log at "
     "verify) and its size bound in bytes (empty: unbounded)",
     (*PM, "backend", "max_bytes")),
)  # fmt: skip
DECODE = _s(
    "decode",
    ("fastverify_generation_tokens_per_second", "gauge",
     "Decode throughput (tokens/s), from SGLang's generation token counter over the rate "
     "window, else its last reported gen throughput", PM),
    ("fastverify_spec_accept_length", "gauge",
     "Accepted tokens per verify pass, bonus token included", PM),
    ("fastverify_spec_accept_rate", "gauge", "Accepted share of drafted tokens", PM),
    ("fastverify_generation_tokens_total", "counter",
     "Generated tokens per profile and mode (from SGLang's counter, across restarts)", PM),
    ("fastverify_running_requests", "gauge", "Requests decoding", PM),
    ("fastverify_queued_requests", "gauge", "Requests waiting", PM),
    ("fastverify_kv_token_usage_ratio", "gauge", "KV cache token usage (0-1)", PM),
    ("fastverify_spec_cycle_seconds", "gauge",
     "Whole draft+verify cycle per request = accept_len x SGLang's inter-token latency since "
     "the last poll (else running_reqs * accept_len / gen_throughput)", PM),
    ("fastverify_spec_breakeven_accept_length", "gauge",
     "Accept length at which EAGLE-3 matches the profile's baseline recorded at the same "
     "concurrency = spec cycle seconds x baseline tokens/s per request", (*PM, "concurrency")),
    ("fastverify_spec_speedup_estimate", "gauge",
     "EAGLE-3 tokens/s per request over the profile's baseline at the same concurrency = "
     "accept length / break-even (> 1: speculation pays)", (*PM, "concurrency")),
)  # fmt: skip
BASELINES = _s(
    "baselines",
    *((name, "gauge", doc, ("profile", "concurrency")) for name, doc in (
        ("fastverify_baseline_tokens_per_second",
         "Last recorded baseline-mode throughput of each profile and concurrency"),
        ("fastverify_baseline_request_tokens_per_second",
         "Last recorded baseline-mode tokens/s per request of each profile and concurrency"),
        ("fastverify_baseline_age_seconds",
         "Age of the recorded baseline of each profile and concurrency"),
        ("fastverify_baseline_timestamp_seconds",
         "Unix time of the recorded baseline of each profile and concurrency"),
    )),
)  # fmt: skip
SPECULATION = _s(
    "speculation",
    ("fastverify_spec_active_steps", "gauge",
     "Draft steps SGLang runs now (sglang:spec_num_steps; moves under adaptive)", PM),
    ("fastverify_spec_steps_seconds_total", "counter",
     "Seconds served at each active draft step count (0 = no drafting)", (*PM, "steps")),
    ("fastverify_spec_accepted_drafts_ratio", "gauge",
     "Share of verify passes that accepted `drafts` drafts (bonus excluded), from the "
     "histogram a bench recorded at `steps` steps; usable=false: dummy weights, an "
     "adaptive server or acceptance SGLang forced (never planned with unless --allow-forced); "
     "source: `measured` or `forced (SGLANG_SIMULATE_ACC_LEN=L)`",
     (*PM, "steps", "weights", "usable", "source", "drafts")),
    ("fastverify_spec_recorded_accept_length", "gauge",
     "Accept length L(k) at k draft steps from the recorded histogram (topk 1: a chain)",
     (*PM, "steps", "weights", "usable", "source", "k")),
    ("fastverify_spec_live_accept_length", "gauge",
     "Accept length L(k) from the histograms of requests finished while SGLang ran `steps` "
     "draft steps their whole life (SGLang's --export-metrics-to-file records)",
     (*PM, "steps", "k")),
    ("fastverify_spec_live_requests", "gauge",
     "Finished requests behind fastverify_spec_live_accept_length (newest kept)",
     (*PM, "steps")),
    ("fastverify_spec_plan_stale", "gauge",
     "1 when live acceptance fell below a drafting tier's break-even or below the lower "
     "acceptance the stored plan was made to survive: re-plan (fastverifyctl bench "
     "--dataset FILE, then fastverifyctl spec plan)", PM),
)  # fmt: skip
TRACES = _s(
    "traces",
    ("fastverify_verify_cycle_seconds", "histogram",
     "One TARGET_VERIFY forward on the GPU, from profile windows", PM),
    ("fastverify_allreduce_per_verify", "gauge",
     "All-reduce kernels in one verify pass (GPU kernel records)", PM),
    ("fastverify_allreduce_seconds_per_verify", "gauge",
     "GPU time of those all-reduce kernels per verify pass", PM),
    ("fastverify_allreduce_verify_share_ratio", "gauge",
     "Share of verify time spent in all-reduce kernels (0-1)", PM),
    # `percentile`, not `quantile`: that label belongs to summaries (promtool check metrics)
    ("fastverify_verify_seconds", "gauge",
     "Verify pass time percentiles (50, 90) of the last profile window", (*PM, "percentile")),
    ("fastverify_rank_allreduce_seconds_per_verify", "gauge",
     "All-reduce GPU time per verify pass on each TP rank", (*PM, "rank")),
    ("fastverify_trace_window_timestamp_seconds", "gauge",
     "Unix time of the last analysed profile window", ()),
    ("fastverify_allreduce_calls_total", "counter",
     "All-reduces observed on the GPU (trace kernels of rank 0, or NCCL inspector records); "
     "never from host-side NCCL logs", (*PM, "source")),
    ("fastverify_trace_windows_total", "counter", "Profile windows by result", ("result",)),
)  # fmt: skip
INSPECTOR = _s(
    "inspector",
    ("fastverify_inspector_allreduce_seconds", "gauge",
     "Mean all-reduce execution time (NCCL inspector, GPU-timed)", PM),
    ("fastverify_inspector_allreduce_bus_bandwidth_bytes_per_second", "gauge",
     "Mean all-reduce bus bandwidth (NCCL inspector)", PM),
    ("fastverify_inspector_allreduce_message_bytes", "gauge",
     "Mean all-reduce message size (NCCL inspector)", PM),
)  # fmt: skip
DAEMON = _s(
    "daemon",
    ("fastverify_decision_info", "info",
     "The last tuning decision (fastverifyctl tune): profile, mode, all-reduce backend, "
     "applied by tune, serving now", (*PM, "backend", "applied", "serving")),
    ("fastverify_engine_restarts_total", "counter", "Engine restarts by reason", ("reason",)),
    ("fastverify_profile_switches_total", "counter", "Profile switches by result", ("result",)),
    ("fastverify_switch_downtime_seconds", "histogram",
     "Client-visible downtime of each switch, restart or crash restart that stopped the "
     "engine (the front door's hold, or without it the engine's stop, to the next engine "
     "serving), by the switch's front door mode: none, hold, standby", ("mode",)),
    ("fastverify_switch_last_info", "info",
     "The last switch, restart or crash restart that stopped the engine: its kind, target, "
     "result, front door mode and client-visible downtime in seconds (one decimal; a new "
     "series per switch, for the dashboard's annotation text)",
     ("kind", "profile", "result", "mode", "downtime_s")),
    ("fastverify_engine_start_seconds", "gauge", "Last engine time-to-ready", ("phase",),
     "the total has none; its split: weights, cuda_graph, rest"),
)  # fmt: skip
WEIGHT_CACHE = _s(
    "weight_cache",
    ("fastverify_weight_cache_up", "gauge", "1 while the weight cache's daemon is ready", ()),
    ("fastverify_weight_cache_bytes", "gauge",
     "GPU memory the weight cache's processes hold (0 while it is down)", ()),
    ("fastverify_weight_cache_hits_total", "counter",
     "Engine starts whose weights came from the weight cache", ()),
    ("fastverify_weight_cache_fallbacks_total", "counter",
     "Engine starts the weight cache should have served that loaded from disk, by reason",
     ("reason",)),
)  # fmt: skip
FRONTDOOR = _s(
    "frontdoor",
    ("fastverify_frontdoor_up", "gauge",
     "1 while the front door answers its control socket (absent with [frontdoor] mode off)", ()),
    ("fastverify_frontdoor_held_requests_total", "counter",
     "Requests the front door held while the engine was replaced", ()),
    ("fastverify_frontdoor_cut_requests_total", "counter",
     "Answers the engine broke off mid-way (a drain timeout, a crash)", ()),
    ("fastverify_frontdoor_refused_requests_total", "counter",
     "Held requests answered 503 + Retry-After (queue full, or held longer than max_wait_s)",
     ()),
    ("fastverify_frontdoor_waiting_requests", "gauge", "Requests held now", ()),
    ("fastverify_frontdoor_hold_seconds", "histogram", "How long each held request waited", ()),
)  # fmt: skip
API_AUTH = _s(
    "api_auth",
    ("fastverify_api_auth_failures_total", "counter",
     "Refused attempts on the TCP control door: token (missing/wrong), tls (failed "
     "handshake), plaintext (HTTP to the TLS port), backoff (refused while the caller backs "
     "off)", ("reason",)),
    ("fastverify_api_auth_backoff_sources", "gauge",
     "Callers (a client certificate's subject, else an address) refused now after repeated "
     "failed tokens on the TCP control door", ()),
)  # fmt: skip
LOGS = _s(
    "logs",
    ("fastverify_nccl_info", "info", "NCCL version reported by the engine", ("version",)),
    ("fastverify_nccl_env_info", "info", "Settings NCCL confirmed as 'set by environment'",
     ("var", "value")),
    ("fastverify_nccl_tuning_info", "info",
     "NCCL's algorithm/protocol choice per collective and size (TUNING lines)",
     ("collective", "bytes", "algo", "proto", "channels")),
    ("fastverify_nccl_warnings_total", "counter", "NCCL WARN lines in the engine's log", ()),
    ("fastverify_log_lines_total", "counter", "Engine log lines read", ()),
)  # fmt: skip
SOURCES = _s(
    "sources",
    ("fastverify_source_up", "gauge",
     "1 when the source's last attempt worked (poll answered, window analysed, line read, "
     "daemon feed), else 0; absent for a source never used", ("source",)),
    ("fastverify_source_last_success_timestamp_seconds", "gauge",
     "Unix time the source last delivered data", ("source",)),
)  # fmt: skip

# node_exporter's node_scrape_collector_* for each source of this exporter; last in the
# exposition, so it reports the scrape it ends.
SCRAPE = _s(
    "scrape",
    ("fastverify_scrape_collector_duration_seconds", "gauge",
     "Seconds the source's collect took in the last scrape", ("collector",)),
    ("fastverify_scrape_collector_success", "gauge",
     "1 when the source's collect worked in the last scrape, else 0 (its series are left "
     "out; the other sources still publish)", ("collector",)),
)  # fmt: skip

# In exposition order: the collectors are registered in this order.
CATALOG: tuple[Series, ...] = (*ENGINE, *ALLREDUCE, *DECODE, *BASELINES, *SPECULATION, *TRACES,
                               *INSPECTOR, *DAEMON, *WEIGHT_CACHE, *FRONTDOOR, *API_AUTH, *LOGS,
                               *SOURCES, *SCRAPE)  # fmt: skip
BY_NAME: dict[str, Series] = {s.name: s for s in CATALOG}
COLLECTOR_SOURCES: tuple[str, ...] = tuple(dict.fromkeys(s.source for s in CATALOG))


def _sglang_series() -> tuple[Series, ...]:
    m = sglang_metrics
    kinds = [*((n, "gauge") for n in (*m.SCHEDULER_GAUGES, *m.TOKENIZER_GAUGES)),
             *((n, "counter") for n in (*m.SCHEDULER_COUNTERS, *m.TOKENIZER_COUNTERS)),
             *((n, "histogram") for n in m.HISTOGRAMS)]  # fmt: skip
    return tuple(
        Series(name, kind, "SGLang's own series (read from the engine's /metrics)",
               m.label_names(name), "sglang")
        for name, kind in kinds
    )  # fmt: skip


# The engine's series the exporter reads and the dashboards query (not re-published).
SGLANG: tuple[Series, ...] = _sglang_series()


def family(name: str) -> Family:
    """An empty family of catalog series `name` (KeyError: not in the catalog)."""
    return BY_NAME[name].family()


def of_source(source: str) -> tuple[Series, ...]:
    return tuple(s for s in CATALOG if s.source == source)


def describe(source: str) -> list[Metric]:
    """What a collector emits, as prometheus-client's `describe()` wants it (no samples)."""
    return [s.family() for s in of_source(source)]


def sample_names(series: Iterable[Series] = CATALOG) -> set[str]:
    """Every sample name a scrape may hold (histograms: _bucket, _sum, _count)."""
    return {n for s in series for n in s.sample_names}


# --- the docs table -----------------------------------------------------------------------
BEGIN = "<!-- metrics catalog: generated by fastverify.exporters.catalog; do not edit -->"
END = "<!-- end of metrics catalog -->"
WRITE_COMMAND = "python -m fastverify.exporters.catalog --write docs/reference/exporter.md"


def markdown_table() -> str:
    rows = ["| metric | type | labels | source | meaning |", "|---|---|---|---|---|"]
    for s in CATALOG:
        labels = ", ".join(f"`{lab}`" for lab in s.labels) or "-"
        if s.label_note:
            labels += f" ({s.label_note})"
        meaning = s.help.replace("|", "\\|")
        rows.append(f"| `{s.name}` | {s.type} | {labels} | {s.source} | {meaning} |")
    read = ", ".join(f"`{s.name}` ({s.type})" for s in SGLANG)
    rows += ["", f"Read from the engine's own /metrics (not re-published): {read}."]
    return "\n".join(rows) + "\n"


def with_table(doc: str) -> str:
    """`doc` with the text between the catalog markers replaced by `markdown_table()`."""
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"the document has no {BEGIN!r} ... {END!r} markers")
    return f"{head}{BEGIN}\n{markdown_table()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the exporter's metric catalog")
    p.add_argument("--write", type=Path, metavar="DOC", help="regenerate DOC's metrics table")
    ns = p.parse_args(argv)
    if ns.write is None:
        sys.stdout.write(markdown_table())
        return 0
    text = ns.write.read_text(encoding="utf-8")
    ns.write.write_text(with_table(text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
