"""HubCollector: one prometheus-client custom collector that builds fresh metric families
from a `MetricsHub.snapshot()` on every collect. No I/O, no parsing: state is prepared by
the hub's writers.

Naming: base units (seconds, bytes), `_total` counters, `_info` metadata; labels `profile`
and `mode` on every figure of the running engine so Grafana can compare profiles. Series
without data are absent, never zero (e.g. the break-even gauges without a baseline).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from fastverify.exporters.hub import MetricsHub
from fastverify.redact import is_secret_name

_LABEL_BAD = re.compile(r"[^a-z0-9_]")
_RESERVED = {"profile", "mode", "engine"}


def profile_labels(
    profile: str, mode: str, engine: str, settings: dict[str, str]
) -> dict[str, str]:
    """Labels of fastverify_profile_info: identity + every non-secret profile setting,
    lower-cased (`NCCL_ALGO` -> `nccl_algo`); algo/proto always present ("unset")."""
    labels = {"profile": profile, "mode": mode, "engine": engine}
    for name, value in settings.items():
        if is_secret_name(name):
            continue
        label = _LABEL_BAD.sub("_", name.lower())
        if not label or label[0].isdigit() or label.startswith("__") or label in _RESERVED:
            continue
        labels[label] = str(value)
    labels.setdefault("nccl_algo", "unset")
    labels.setdefault("nccl_proto", "unset")
    return labels


def _gauge(
    name: str, doc: str, value: float | None, keys: list[str], vals: list[str]
) -> Metric | None:
    if value is None:
        return None
    g = GaugeMetricFamily(name, doc, labels=keys)
    g.add_metric(vals, float(value))
    return g


class HubCollector(Collector):
    """Publishes a MetricsHub. Register it on a CollectorRegistry(auto_describe=False)."""

    def __init__(self, hub: MetricsHub) -> None:
        self.hub = hub

    def describe(self) -> list[Metric]:
        return []  # names vary with state; skip the registry's duplicate check

    def collect(self) -> Iterator[Metric]:
        yield from build_families(self.hub.snapshot())


def build_families(s: dict[str, Any]) -> list[Metric]:
    """Every metric family for one snapshot (see the module docstring for conventions)."""
    out: list[Metric | None] = []
    pm_keys = ["profile", "mode"]
    pm = [s["profile"], s["mode"]]

    up = GaugeMetricFamily("fastverify_up", "1 when the engine answers, else 0")
    up.add_metric([], 1.0 if s["up"] else 0.0)
    out.append(up)

    if s["profile"] or s["mode"]:
        info = InfoMetricFamily(
            "fastverify_profile", "Active NCCL profile, decoding mode and the profile's settings"
        )
        info.add_metric([], profile_labels(s["profile"], s["mode"], s["engine"], s["settings"]))
        out.append(info)

    obs = s["observation"]
    out.append(
        _gauge(
            "fastverify_generation_tokens_per_second",
            "Decode throughput (tokens/s), from SGLang's generation token counter "
            "over the rate window, else its last reported gen throughput",
            s["tokens_per_second"],
            pm_keys,
            pm,
        )
    )
    if s["generation_tokens_total"]:
        c = CounterMetricFamily(
            "fastverify_generation_tokens",
            "Generated tokens per profile and mode (from SGLang's counter, across restarts)",
            labels=pm_keys,
        )
        for (profile, mode), total in sorted(s["generation_tokens_total"].items()):
            c.add_metric([profile, mode], total)
        out.append(c)
    if obs is not None:
        if s["eagle"] and obs.accept_len is not None:
            out.append(
                _gauge(
                    "fastverify_spec_accept_length",
                    "Accepted tokens per verify pass, bonus token included",
                    obs.accept_len,
                    pm_keys,
                    pm,
                )
            )
            out.append(
                _gauge(
                    "fastverify_spec_accept_rate",
                    "Accepted share of drafted tokens",
                    obs.accept_rate,
                    pm_keys,
                    pm,
                )
            )
        out.append(
            _gauge(
                "fastverify_running_requests", "Requests decoding", obs.running_reqs, pm_keys, pm
            )
        )
        out.append(
            _gauge("fastverify_queued_requests", "Requests waiting", obs.queue_reqs, pm_keys, pm)
        )
        out.append(
            _gauge(
                "fastverify_kv_token_usage_ratio",
                "KV cache token usage (0-1)",
                obs.token_usage,
                pm_keys,
                pm,
            )
        )
    out.append(
        _gauge(
            "fastverify_spec_cycle_seconds",
            "Whole draft+verify cycle = running_reqs * accept_len / gen_throughput",
            s["spec_cycle_seconds"],
            pm_keys,
            pm,
        )
    )
    out.append(
        _gauge(
            "fastverify_spec_breakeven_accept_length",
            "Accept length at which EAGLE-3 matches the profile's recorded baseline "
            "= spec cycle seconds x baseline tokens/s per request",
            s["breakeven_accept_length"],
            pm_keys,
            pm,
        )
    )
    out.append(
        _gauge(
            "fastverify_spec_speedup_estimate",
            "EAGLE-3 tokens/s over the recorded baseline tokens/s of the same profile",
            s["speedup_estimate"],
            pm_keys,
            pm,
        )
    )

    if s["baselines"]:
        now = s["now"]
        tps = GaugeMetricFamily(
            "fastverify_baseline_tokens_per_second",
            "Last recorded baseline-mode throughput of each profile",
            labels=["profile"],
        )
        per = GaugeMetricFamily(
            "fastverify_baseline_request_tokens_per_second",
            "Last recorded baseline-mode tokens/s per request of each profile",
            labels=["profile"],
        )
        age = GaugeMetricFamily(
            "fastverify_baseline_age_seconds",
            "Age of the recorded baseline of each profile",
            labels=["profile"],
        )
        when = GaugeMetricFamily(
            "fastverify_baseline_timestamp_seconds",
            "Unix time of the recorded baseline of each profile",
            labels=["profile"],
        )
        for name, b in sorted(s["baselines"].items()):
            tps.add_metric([name], b.tokens_per_second)
            per.add_metric([name], b.per_request_tokens_per_second)
            age.add_metric([name], max(0.0, float(int(now - b.measured_at))))
            when.add_metric([name], b.measured_at)
        out += [tps, per, age, when]

    # profile windows (traces)
    hist = HistogramMetricFamily(
        "fastverify_verify_cycle_seconds",
        "One TARGET_VERIFY forward on the GPU, from profile windows",
        labels=pm_keys,
    )
    for (profile, mode), h in sorted(s["verify_hist"].items()):
        hist.add_metric([profile, mode], h.cumulative(), h.total)
    if s["verify_hist"]:
        out.append(hist)
    tr = s["trace"]
    if tr is not None:
        out.append(
            _gauge(
                "fastverify_allreduce_per_verify",
                "All-reduce kernels in one verify pass (GPU kernel records)",
                tr["allreduce_per_verify"],
                pm_keys,
                pm,
            )
        )
        out.append(
            _gauge(
                "fastverify_allreduce_seconds_per_verify",
                "GPU time of those all-reduce kernels per verify pass",
                tr["allreduce_seconds_per_verify"],
                pm_keys,
                pm,
            )
        )
        out.append(
            _gauge(
                "fastverify_allreduce_verify_share_ratio",
                "Share of verify time spent in all-reduce kernels (0-1)",
                tr["allreduce_share"],
                pm_keys,
                pm,
            )
        )
        q = GaugeMetricFamily(
            "fastverify_verify_seconds",
            "Verify pass time quantiles of the last profile window",
            labels=[*pm_keys, "quantile"],
        )
        q.add_metric([*pm, "0.5"], tr["verify_seconds_p50"])
        q.add_metric([*pm, "0.9"], tr["verify_seconds_p90"])
        out.append(q)
        rk = GaugeMetricFamily(
            "fastverify_rank_allreduce_seconds_per_verify",
            "All-reduce GPU time per verify pass on each TP rank",
            labels=[*pm_keys, "rank"],
        )
        for rank, ar_s, _v in tr["ranks"]:
            rk.add_metric([*pm, str(rank)], ar_s)
        out.append(rk)
        out.append(
            _gauge(
                "fastverify_trace_window_timestamp_seconds",
                "Unix time of the last analysed profile window",
                tr["at"],
                [],
                [],
            )
        )
    if s["allreduce_calls"]:
        c = CounterMetricFamily(
            "fastverify_allreduce_calls",
            "All-reduces observed on the GPU (trace kernels of rank 0, or "
            "NCCL inspector records); never from host-side NCCL logs",
            labels=[*pm_keys, "source"],
        )
        for (profile, mode, src), n in sorted(s["allreduce_calls"].items()):
            c.add_metric([profile, mode, src], n)
        out.append(c)
    if s["trace_windows"]:
        c = CounterMetricFamily(
            "fastverify_trace_windows", "Profile windows by result", labels=["result"]
        )
        for result, n in sorted(s["trace_windows"].items()):
            c.add_metric([result], n)
        out.append(c)
    ins = s["inspector"]
    if ins is not None:
        out.append(
            _gauge(
                "fastverify_inspector_allreduce_seconds",
                "Mean all-reduce execution time (NCCL inspector, GPU-timed)",
                ins.get("mean_exec_seconds"),
                pm_keys,
                pm,
            )
        )
        out.append(
            _gauge(
                "fastverify_inspector_allreduce_bus_bandwidth_bytes_per_second",
                "Mean all-reduce bus bandwidth (NCCL inspector)",
                ins.get("mean_busbw_bytes_per_second"),
                pm_keys,
                pm,
            )
        )
        out.append(
            _gauge(
                "fastverify_inspector_allreduce_message_bytes",
                "Mean all-reduce message size (NCCL inspector)",
                ins.get("mean_message_bytes"),
                pm_keys,
                pm,
            )
        )

    # daemon
    c = CounterMetricFamily(
        "fastverify_engine_restarts", "Engine restarts by reason", labels=["reason"]
    )
    for reason, n in sorted(s["restarts"].items()):
        c.add_metric([reason], n)
    out.append(c)
    c = CounterMetricFamily(
        "fastverify_profile_switches", "Profile switches by result", labels=["result"]
    )
    for result, n in s["switches"].items():
        c.add_metric([result], n)
    out.append(c)
    out.append(
        _gauge(
            "fastverify_engine_start_seconds",
            "Last engine time-to-ready",
            s["engine_start_seconds"],
            [],
            [],
        )
    )

    # NCCL's own view (log lines)
    if s["nccl_version"]:
        i = InfoMetricFamily("fastverify_nccl", "NCCL version reported by the engine")
        i.add_metric([], {"version": s["nccl_version"]})
        out.append(i)
    if s["nccl_env"]:
        i = InfoMetricFamily(
            "fastverify_nccl_env",
            "Settings NCCL confirmed as 'set by environment'",
            labels=["var", "value"],
        )
        for var, value in sorted(s["nccl_env"].items()):
            if not is_secret_name(var):
                i.add_metric([var, value], {})
        out.append(i)
    if s["nccl_tuning"]:
        i = InfoMetricFamily(
            "fastverify_nccl_tuning",
            "NCCL's algorithm/protocol choice per collective and size (TUNING lines)",
            labels=["collective", "bytes", "algo", "proto", "channels"],
        )
        for (coll, nbytes), (algo, proto, channels) in sorted(s["nccl_tuning"].items()):
            i.add_metric([coll, str(nbytes), algo, proto, channels], {})
        out.append(i)
    c = CounterMetricFamily("fastverify_nccl_warnings", "NCCL WARN lines in the engine's log")
    c.add_metric([], s["nccl_warnings"])
    out.append(c)
    c = CounterMetricFamily("fastverify_log_lines", "Engine log lines read")
    c.add_metric([], s["log_lines"])
    out.append(c)
    return [m for m in out if m is not None]
