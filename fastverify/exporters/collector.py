"""HubCollector: builds fresh metric families from one `MetricsHub.snapshot()` per scrape,
one builder per source. No I/O, no parsing: state is prepared by the hub's writers.

Sources and what each publishes
-------------------------------
engine          fastverify_up, fastverify_profile_info (identity + the profile's settings +
                `weights`: "dummy" for a trial server (--load-format dummy), else "real")
sglang_metrics  decode figures from SGLang's /metrics poll or decode log lines: tokens/s,
                generated tokens, accept length/rate, running/queued requests, KV usage,
                spec cycle, break-even accept length, speedup estimate; baselines
logs            NCCL's own view (version, "set by environment", TUNING choices, WARN count),
                log lines read
traces          verify-cycle histogram and per-window gauges, all-reduce calls, windows
inspector       NCCL inspector all-reduce time, bandwidth, message size
daemon          engine restarts, profile switches, engine start seconds, the last tuning
                decision (fastverify_decision_info{profile,mode,backend,applied,serving}); with a
                TCP control door: fastverify_api_auth_failures_total{reason} and
                fastverify_api_auth_backoff_sources
(every source)  fastverify_source_up{source} (1: its last attempt worked) and
                fastverify_source_last_success_timestamp_seconds{source}

Naming: base units (seconds, bytes), `_total` counters, `_info` metadata; labels `profile`
and `mode` on every figure of the running engine so Grafana can compare profiles. Series
without fresh data are absent, never zero: a fresh idle EAGLE-3 engine has no accept
length, and a dead engine's live figures go with it.
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
from fastverify.speculation.curve import AcceptCurve

_LABEL_BAD = re.compile(r"[^a-z0-9_]")
_RESERVED = {"profile", "mode", "engine"}
PM = ["profile", "mode"]


def profile_labels(
    profile: str, mode: str, engine: str, settings: dict[str, str]
) -> dict[str, str]:
    """Labels of fastverify_profile_info: identity + every non-secret profile setting,
    lower-cased (`NCCL_ALGO` -> `nccl_algo`); algo/proto always present ("unset");
    `weights` always present: "dummy" when the settings say so (a trial server, whose
    figures must not be read as production ones), else "real"."""
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
    labels["weights"] = "dummy" if labels.get("weights") == "dummy" else "real"
    return labels


def _gauge(
    name: str, doc: str, value: float | None, keys: list[str], vals: list[str]
) -> Metric | None:
    if value is None:
        return None
    g = GaugeMetricFamily(name, doc, labels=keys)
    g.add_metric(vals, float(value))
    return g


def _counter(name: str, doc: str, label: str, values: dict[str, float]) -> Metric:
    c = CounterMetricFamily(name, doc, labels=[label])
    for key, n in sorted(values.items()):
        c.add_metric([key], n)
    return c


def engine_families(s: dict[str, Any]) -> list[Metric | None]:
    up = GaugeMetricFamily("fastverify_up", "1 when the engine answers, else 0")
    up.add_metric([], 1.0 if s["up"] else 0.0)
    out: list[Metric | None] = [up]
    if s["profile"] or s["mode"]:
        info = InfoMetricFamily(
            "fastverify_profile", "Active NCCL profile, decoding mode and the profile's settings"
        )
        info.add_metric([], profile_labels(s["profile"], s["mode"], s["engine"], s["settings"]))
        out.append(info)
    sg = s.get("sglang")
    if sg:
        info = InfoMetricFamily(
            "fastverify_engine",
            "The server's SGLang version, the release whose facts serve it and whether it is "
            "in fastverify's supported range (false: newer, running on the newest facts)",
        )
        info.add_metric(
            [],
            {
                "version": str(sg["version"]),
                "facts_version": str(sg["facts_version"]),
                "supported": "true" if sg["supported"] else "false",
            },
        )
        out.append(info)
    ar = s.get("allreduce")
    if ar and s["up"]:
        backend = InfoMetricFamily(
            "fastverify_allreduce_backend",
            "TP all-reduce backend SGLang serves decode/verify sizes with (confirmed from its "
            "log at verify) and its size bound in bytes (empty: unbounded)",
        )
        bound = ar.get("max_bytes")
        backend.add_metric(
            [],
            {
                "profile": s["profile"],
                "mode": s["mode"],
                "backend": str(ar["backend"]),
                "max_bytes": "" if bound is None else str(int(bound)),
            },
        )
        out.append(backend)
    return out


def decode_families(s: dict[str, Any]) -> list[Metric | None]:
    pm = [s["profile"], s["mode"]]
    req = s["requests"]
    out: list[Metric | None] = [
        _gauge("fastverify_generation_tokens_per_second",
               "Decode throughput (tokens/s), from SGLang's generation token counter "
               "over the rate window, else its last reported gen throughput",
               s["tokens_per_second"], PM, pm),
        _gauge("fastverify_spec_accept_length",
               "Accepted tokens per verify pass, bonus token included",
               s["spec_accept_length"], PM, pm),
        _gauge("fastverify_spec_accept_rate", "Accepted share of drafted tokens",
               s["spec_accept_rate"], PM, pm),
    ]  # fmt: skip
    if s["generation_tokens_total"]:
        c = CounterMetricFamily(
            "fastverify_generation_tokens",
            "Generated tokens per profile and mode (from SGLang's counter, across restarts)",
            labels=PM,
        )
        for (profile, mode), total in sorted(s["generation_tokens_total"].items()):
            c.add_metric([profile, mode], total)
        out.append(c)
    if req is not None:
        out += [
            _gauge("fastverify_running_requests", "Requests decoding", req.running_reqs, PM, pm),
            _gauge("fastverify_queued_requests", "Requests waiting", req.queue_reqs, PM, pm),
            _gauge("fastverify_kv_token_usage_ratio", "KV cache token usage (0-1)",
                   req.token_usage, PM, pm),
        ]  # fmt: skip
    out += [
        _gauge("fastverify_spec_cycle_seconds",
               "Whole draft+verify cycle per request = accept_len x SGLang's inter-token "
               "latency since the last poll (else running_reqs * accept_len / gen_throughput)",
               s["spec_cycle_seconds"], PM, pm),
    ]  # fmt: skip
    v = s["verdict"]
    if v is not None:  # only against a baseline of this profile at the reading's concurrency
        vk, vv = [*PM, "concurrency"], [*pm, str(v.concurrency)]
        out += [
            _gauge("fastverify_spec_breakeven_accept_length",
                   "Accept length at which EAGLE-3 matches the profile's baseline recorded at "
                   "the same concurrency = spec cycle seconds x baseline tokens/s per request",
                   v.breakeven_accept_length, vk, vv),
            _gauge("fastverify_spec_speedup_estimate",
                   "EAGLE-3 tokens/s per request over the profile's baseline at the same "
                   "concurrency = accept length / break-even (> 1: speculation pays)",
                   v.speedup_estimate, vk, vv),
        ]  # fmt: skip
    return out + baseline_families(s) + speculation_families(s)


def speculation_families(s: dict[str, Any]) -> list[Metric | None]:
    """Active draft steps, time at each, and the recorded accepted-drafts distribution."""
    pm = [s["profile"], s["mode"]]
    out: list[Metric | None] = [
        _gauge("fastverify_spec_active_steps",
               "Draft steps SGLang runs now (sglang:spec_num_steps; moves under adaptive)",
               s.get("spec_active_steps"), PM, pm),
    ]  # fmt: skip
    if s.get("spec_steps_seconds"):
        c = CounterMetricFamily(
            "fastverify_spec_steps_seconds",
            "Seconds served at each active draft step count (0 = no drafting)",
            labels=[*PM, "steps"],
        )
        for (profile, mode, steps), secs in sorted(s["spec_steps_seconds"].items()):
            c.add_metric([profile, mode, steps], secs)
        out.append(c)
    if s.get("acceptance"):
        g = GaugeMetricFamily(
            "fastverify_spec_accepted_drafts_ratio",
            "Share of verify passes that accepted `drafts` drafts (bonus excluded), from the "
            "histogram a bench recorded at `steps` steps; usable=false: dummy weights or an "
            "adaptive server (never planned with)",
            labels=[*PM, "steps", "weights", "usable", "drafts"],
        )
        length = GaugeMetricFamily(
            "fastverify_spec_recorded_accept_length",
            "Accept length L(k) at k draft steps from the recorded histogram (topk 1: a chain)",
            labels=[*PM, "steps", "weights", "usable", "k"],
        )
        for (profile, mode, steps), rec in sorted(s["acceptance"].items()):
            hist = rec.get("histogram") or []
            total = sum(hist) or 1
            lab = [
                profile,
                mode,
                steps,
                str(rec.get("weights")),
                str(bool(rec.get("usable"))).lower(),
            ]
            for j, n in enumerate(hist):
                g.add_metric([*lab, str(j)], n / total)
            if sum(hist) > 0:
                for k, lk in AcceptCurve.from_histogram(hist, int(steps)).curve().items():
                    length.add_metric([*lab, k], lk)
        out += [g, length]
    return out + drift_families(s)


def drift_families(s: dict[str, Any]) -> list[Metric | None]:
    """Live acceptance per active step count from finished requests, and whether the stored
    plan went stale (exporters.request_metrics)."""
    drift = s.get("spec_drift")
    rows = s.get("spec_live") or {}
    if drift is None or (not rows and not drift.get("plan")):
        return []
    pm = [s["profile"], s["mode"]]
    live = GaugeMetricFamily(
        "fastverify_spec_live_accept_length",
        "Accept length L(k) from the histograms of requests finished while SGLang ran `steps` "
        "draft steps their whole life (SGLang's --export-metrics-to-file records)",
        labels=[*PM, "steps", "k"],
    )
    reqs = GaugeMetricFamily(
        "fastverify_spec_live_requests",
        "Finished requests behind fastverify_spec_live_accept_length (newest kept)",
        labels=[*PM, "steps"],
    )
    for steps, row in sorted(rows.items()):
        reqs.add_metric([*pm, str(steps)], row["requests"])
        for k, lk in row["accept_length"].items():
            live.add_metric([*pm, str(steps), str(k)], lk)
    stale = 1.0 if drift["stale"] else 0.0
    return [
        *((live, reqs) if rows else ()),
        _gauge("fastverify_spec_plan_stale",
               "1 when live acceptance fell below a drafting tier's break-even or below the "
               "lower acceptance the stored plan was made to survive: re-plan (fastverifyctl "
               "bench --dataset FILE, then fastverifyctl spec plan)",
               stale if drift.get("plan") else None, PM, pm),
    ]  # fmt: skip


def baseline_families(s: dict[str, Any]) -> list[Metric | None]:
    if not s["baselines"]:
        return []
    now = s["now"]
    fams = [
        GaugeMetricFamily(name, doc, labels=["profile", "concurrency"])
        for name, doc in (
            ("fastverify_baseline_tokens_per_second",
             "Last recorded baseline-mode throughput of each profile and concurrency"),
            ("fastverify_baseline_request_tokens_per_second",
             "Last recorded baseline-mode tokens/s per request of each profile and concurrency"),
            ("fastverify_baseline_age_seconds",
             "Age of the recorded baseline of each profile and concurrency"),
            ("fastverify_baseline_timestamp_seconds",
             "Unix time of the recorded baseline of each profile and concurrency"),
        )
    ]  # fmt: skip
    order = sorted(s["baselines"].values(), key=lambda b: (b.profile, b.concurrency or 0))
    for b in order:
        age = max(0.0, float(int(now - b.measured_at)))
        conc = "unknown" if b.concurrency is None else str(b.concurrency)
        for fam, v in zip(fams, (b.tokens_per_second, b.per_request_tokens_per_second, age,
                                 b.measured_at), strict=True):  # fmt: skip
            fam.add_metric([b.profile, conc], v)
    return list(fams)


def trace_families(s: dict[str, Any]) -> list[Metric | None]:
    pm = [s["profile"], s["mode"]]
    out: list[Metric | None] = []
    if s["verify_hist"]:
        hist = HistogramMetricFamily(
            "fastverify_verify_cycle_seconds",
            "One TARGET_VERIFY forward on the GPU, from profile windows",
            labels=PM,
        )
        for (profile, mode), h in sorted(s["verify_hist"].items()):
            hist.add_metric([profile, mode], h.cumulative(), h.total)
        out.append(hist)
    tr = s["trace"]
    if tr is not None:
        out += [
            _gauge("fastverify_allreduce_per_verify",
                   "All-reduce kernels in one verify pass (GPU kernel records)",
                   tr["allreduce_per_verify"], PM, pm),
            _gauge("fastverify_allreduce_seconds_per_verify",
                   "GPU time of those all-reduce kernels per verify pass",
                   tr["allreduce_seconds_per_verify"], PM, pm),
            _gauge("fastverify_allreduce_verify_share_ratio",
                   "Share of verify time spent in all-reduce kernels (0-1)",
                   tr["allreduce_share"], PM, pm),
        ]  # fmt: skip
        q = GaugeMetricFamily(
            "fastverify_verify_seconds",
            "Verify pass time quantiles of the last profile window",
            labels=[*PM, "quantile"],
        )
        q.add_metric([*pm, "0.5"], tr["verify_seconds_p50"])
        q.add_metric([*pm, "0.9"], tr["verify_seconds_p90"])
        rk = GaugeMetricFamily(
            "fastverify_rank_allreduce_seconds_per_verify",
            "All-reduce GPU time per verify pass on each TP rank",
            labels=[*PM, "rank"],
        )
        for rank, ar_s, _v in tr["ranks"]:
            rk.add_metric([*pm, str(rank)], ar_s)
        out += [q, rk]
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
            labels=[*PM, "source"],
        )
        for (profile, mode, src), n in sorted(s["allreduce_calls"].items()):
            c.add_metric([profile, mode, src], n)
        out.append(c)
    if s["trace_windows"]:
        out.append(_counter("fastverify_trace_windows", "Profile windows by result", "result",
                            s["trace_windows"]))  # fmt: skip
    return out


def inspector_families(s: dict[str, Any]) -> list[Metric | None]:
    ins = s["inspector"]
    if ins is None:
        return []
    pm = [s["profile"], s["mode"]]
    return [
        _gauge("fastverify_inspector_allreduce_seconds",
               "Mean all-reduce execution time (NCCL inspector, GPU-timed)",
               ins.get("mean_exec_seconds"), PM, pm),
        _gauge("fastverify_inspector_allreduce_bus_bandwidth_bytes_per_second",
               "Mean all-reduce bus bandwidth (NCCL inspector)",
               ins.get("mean_busbw_bytes_per_second"), PM, pm),
        _gauge("fastverify_inspector_allreduce_message_bytes",
               "Mean all-reduce message size (NCCL inspector)",
               ins.get("mean_message_bytes"), PM, pm),
    ]  # fmt: skip


def daemon_families(s: dict[str, Any]) -> list[Metric | None]:
    decision = None
    if s.get("decision"):
        decision = InfoMetricFamily(
            "fastverify_decision",
            "The last tuning decision (fastverifyctl tune): profile, mode, all-reduce backend, "
            "applied by tune, serving now",
        )
        decision.add_metric([], s["decision"])
    return [
        decision,
        _counter("fastverify_engine_restarts", "Engine restarts by reason", "reason",
                 s["restarts"]),
        _counter("fastverify_profile_switches", "Profile switches by result", "result",
                 s["switches"]),
        _start_seconds(s),
        *weight_cache_families(s),
        None if s.get("auth_failures") is None else _counter(
            "fastverify_api_auth_failures", "Refused attempts on the TCP control door: "
            "token (missing/wrong), tls (failed handshake), plaintext (HTTP to the TLS port), "
            "backoff (refused while the source backs off)", "reason", s["auth_failures"]),
        _gauge("fastverify_api_auth_backoff_sources", "Source addresses refused now after "
               "repeated failed attempts on the TCP control door",
               s.get("auth_backoff_sources"), [], []),
    ]  # fmt: skip


def _start_seconds(s: dict[str, Any]) -> Metric | None:
    """The last engine time-to-ready, and (labelled `phase`) its split into weights,
    cuda_graph and the rest, from SGLang's own lines (they sum to the unlabelled total)."""
    total = s["engine_start_seconds"]
    if total is None:
        return None
    g = GaugeMetricFamily(
        "fastverify_engine_start_seconds",
        "Last engine time-to-ready",
        labels=["phase"],
    )
    g.add_metric([], float(total))
    for phase, seconds in (s.get("start_phases") or {}).items():
        g.add_metric([phase], float(seconds))
    return g


def weight_cache_families(s: dict[str, Any]) -> list[Metric | None]:
    """SGLang's weight cache as fastverifyd runs it (absent while weight_cache = off)."""
    wc = s.get("weight_cache")
    if wc is None:
        return []
    up, nbytes = wc
    return [
        _gauge("fastverify_weight_cache_up", "1 while the weight cache's daemon is ready",
               1.0 if up else 0.0, [], []),
        _gauge("fastverify_weight_cache_bytes", "GPU memory the weight cache's processes "
               "hold (0 while it is down)", nbytes if up else 0, [], []),
        _plain_counter("fastverify_weight_cache_hits", "Engine starts whose weights came "
                       "from the weight cache", s["weight_cache_hits"]),
        _counter("fastverify_weight_cache_fallbacks", "Engine starts the weight cache should "
                 "have served that loaded from disk, by reason", "reason",
                 s["weight_cache_fallbacks"]),
    ]  # fmt: skip


def _plain_counter(name: str, doc: str, value: float) -> Metric:
    c = CounterMetricFamily(name, doc)
    c.add_metric([], value)
    return c


def log_families(s: dict[str, Any]) -> list[Metric | None]:
    out: list[Metric | None] = []
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
    return out


def source_families(s: dict[str, Any]) -> list[Metric | None]:
    if not s["sources"]:
        return []
    up = GaugeMetricFamily(
        "fastverify_source_up",
        "1 when the source's last attempt worked (poll answered, window analysed, line "
        "read, daemon feed), else 0; absent for a source never used",
        labels=["source"],
    )
    last = GaugeMetricFamily(
        "fastverify_source_last_success_timestamp_seconds",
        "Unix time the source last delivered data",
        labels=["source"],
    )
    for src, (ok, at) in sorted(s["sources"].items()):
        up.add_metric([src], 1.0 if ok else 0.0)
        if at is not None:
            last.add_metric([src], at)
    return [up, last]


BUILDERS = (
    engine_families,
    decode_families,
    trace_families,
    inspector_families,
    daemon_families,
    log_families,
    source_families,
)


def build_families(s: dict[str, Any]) -> list[Metric]:
    """Every metric family for one snapshot, source by source."""
    return [m for build in BUILDERS for m in build(s) if m is not None]


class HubCollector(Collector):
    """Publishes a MetricsHub. Register it on a CollectorRegistry(auto_describe=False)."""

    def __init__(self, hub: MetricsHub) -> None:
        self.hub = hub

    def describe(self) -> list[Metric]:
        return []  # names vary with state; skip the registry's duplicate check

    def collect(self) -> Iterator[Metric]:
        yield from build_families(self.hub.snapshot())
