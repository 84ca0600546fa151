"""MetricsHub: the exporter's thread-safe prepared state, fed by the daemon and the sources.

Owns every figure the collectors publish. Writers (the daemon's feed calls, the log
stream, the SGLang /metrics poller, profile-window analysis, the NCCL inspector reader)
update it under one lock and bump `version`; the collectors share one `snapshot()` per
scrape and do no I/O. Gauges describe the active (profile, mode) only and are cleared when
either changes; counters and the verify-cycle histogram are kept per (profile, mode) for
the life of the process so that `rate()` stays correct across switches.

Derived figures (docs/architecture.md):
- spec cycle seconds = accept_len * the decode seconds per token one request saw since the
  previous /metrics poll (SGLang's inter-token latency histogram: prefill excluded, the
  measure bench and sweep use); without it, running_reqs * accept_len / gen_throughput,
  all three taken from one observation (one decode log line, or one poll of /metrics);
- break-even accept length = spec cycle seconds * baseline tokens/s per request, and
  speedup estimate = accept length / break-even, from the same reading and the baseline of
  the same profile measured at that reading's concurrency (`exporters.baseline.verdict`);
  both exist only in EAGLE-3 mode with a baseline of matching concurrency (absent, not
  zero, otherwise: no verdict rather than one against another batch size).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastverify.config import SPEC_MODES
from fastverify.exporters.baseline import spec_cycle_seconds, verdict
from fastverify.exporters.catalog import DOWNTIME_BUCKETS, SWITCH_DOOR_MODES
from fastverify.exporters.readings import Baseline, Histogram, Observation, newest, trace_reading
from fastverify.exporters.request_metrics import Drift
from fastverify.sglang import loglines

SWITCH_RESULTS = ("ok", "rolled_back", "failed", "cancelled")
# Why a start the weight cache should have served loaded from disk (daemon/weights.py):
# SGLang refused its fingerprint, its socket refused, no socket, the cache not ready.
WEIGHT_CACHE_FALLBACKS = ("mismatch", "refused", "socket_missing", "unavailable")
START_PHASES = ("weights", "cuda_graph", "rest")
# Sources of the exporter, each with its own success and freshness series.
SOURCES = ("daemon", "sglang_metrics", "logs", "traces", "inspector")
MAX_TUNING_ROWS = 64


class MetricsHub:
    """Prepared exporter state. Every public method is safe to call from any thread."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        rate_window_s: float = 10.0,
        observation_ttl_s: float = 120.0,
        log_fresh_s: float = 30.0,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.rate_window_s = rate_window_s
        self.observation_ttl_s = observation_ttl_s
        self.log_fresh_s = log_fresh_s
        self.version = 0
        # engine identity
        self._engine_up: bool | None = None
        self._poll_ok: bool | None = None
        # per source: did its last attempt succeed, and when did it last succeed
        self._source_up: dict[str, bool] = {}
        self._source_last: dict[str, float] = {}
        self._profile: str | None = None
        self._mode: str | None = None
        self._settings: dict[str, str] = {}
        self._allreduce: dict[str, Any] | None = None  # serving TP all-reduce backend
        self._sglang: dict[str, Any] | None = None  # the server's SGLang (set_sglang)
        self._engine: str | None = None
        self._url: str | None = None
        self._engine_start_seconds: float | None = None
        self._start_phases: dict[str, float] | None = None  # weights, cuda_graph, rest
        # SGLang's weight cache (fastverifyd's second group): (up, bytes) once configured
        self._weight_cache: tuple[bool, int | None] | None = None
        self._weight_cache_hits = 0
        self._weight_cache_fallbacks: Counter[str] = Counter()
        # counters (process lifetime)
        self._restarts: Counter[str] = Counter()
        self._restart_reasons: tuple[str, ...] = ()  # published at 0 before any restart
        self._switches: Counter[str] = Counter()
        self._allreduce_calls: Counter[tuple[str, str, str]] = Counter()  # (profile, mode, src)
        self._verify_hist: dict[tuple[str, str], Histogram] = {}
        # every mode from 0, so that the first switch is an increase Prometheus sees
        self._downtime = {m: Histogram(DOWNTIME_BUCKETS) for m in SWITCH_DOOR_MODES}
        self._last_switch: dict[str, str] | None = None
        self._nccl_warnings = 0
        self._log_lines = 0
        self._trace_windows: Counter[str] = Counter()
        # the control API's TCP door (watch_auth): failed attempts by reason, backoff probe
        self._auth_failures: Counter[str] | None = None
        self._auth_backoff: Callable[[], int] | None = None
        self._frontdoor: Callable[[], dict[str, Any] | None] | None = None
        # gauges of the active (profile, mode)
        self._obs_log: Observation | None = None
        self._obs_metrics: Observation | None = None
        self._gen_tokens: deque[tuple[float, float]] = deque()  # (t, sglang counter)
        self._gen_tokens_raw: float | None = None
        self._itl: tuple[float, float] | None = None  # (decode s per token per request, at)
        self._itl_prev: tuple[float, float] | None = None  # SGLang ITL histogram (sum, count)
        self._gen_tokens_totals: dict[tuple[str, str], float] = {}
        self._trace: dict[str, Any] | None = None
        self._inspector: dict[str, Any] | None = None
        self._nccl_version: str | None = None
        self._nccl_env: dict[str, str] = {}
        self._nccl_tuning: dict[tuple[str, int], tuple[str, str, str]] = {}
        # baselines by (profile, concurrency) (persisted by the daemon; the hub only holds them)
        self._baselines: dict[tuple[str, int | None], Baseline] = {}
        # the last tuning decision (fastverifyctl tune; persisted by the daemon)
        self._decision: dict[str, str] | None = None
        # speculation: time at each active step count (profile, mode, steps) -> seconds, the
        # last poll's (time, steps), and recorded acceptance by (profile, mode, steps)
        self._steps_seconds: dict[tuple[str, str, str], float] = {}
        self._steps_seen: tuple[float, int, bool] | None = None  # (time, steps, busy)
        self._acceptance: dict[tuple[str, str, str], dict[str, Any]] = {}
        # live acceptance per active step count from finished requests, and the stored plan
        # it is compared with (exporters.request_metrics)
        self._drift = Drift()

    def now(self) -> float:
        """The hub's clock (unix seconds)."""
        return self._clock()

    # ----------------------------------------------------------------- feed API
    def set_engine(
        self,
        up: bool,
        profile: str | None,
        mode: str | None,
        settings: Mapping[str, str] | None = None,
        engine: str | None = None,
        url: str | None = None,
    ) -> None:
        """The daemon's view of the engine: whether it serves, and which profile/mode it runs."""
        with self._lock:
            if (profile, mode) != (self._profile, self._mode) or (up and not self._engine_up):
                self._drift.reset()
            if (profile, mode) != (self._profile, self._mode):
                self._reset_live()
            if self._engine_up and not up:
                # the engine went down: what NCCL said was about that process (the next
                # engine prints its own lines while STARTING, before it is labelled READY),
                # and its live figures go with it.
                self._reset_nccl()
                self._reset_live()
            self._engine_up = bool(up)
            self._mark("daemon", True)
            if not up:
                self._source_up.pop("logs", None)
                self._allreduce = None
            self._profile = profile
            self._mode = mode
            self._settings = dict(settings or {})
            self._engine = engine
            self._url = url
            self.version += 1

    def set_sglang(self, info: Mapping[str, Any] | None) -> None:
        """The server's SGLang (`SGLangFacts.summary()`: version, facts_version, supported)."""
        with self._lock:
            self._sglang = dict(info) if info else None
            self.version += 1

    def set_allreduce(self, backend: str | None, max_bytes: int | None = None) -> None:
        """The TP all-reduce backend the engine serves with (confirmed at verify) and its
        size bound in bytes (None: unbounded); `backend` None clears it."""
        with self._lock:
            self._allreduce = (
                None if backend is None else {"backend": backend, "max_bytes": max_bytes}
            )
            self.version += 1

    def on_log_line(self, line: str, live: bool = True) -> dict[str, Any] | None:
        """Feed one line of the engine's output; returns the parsed record (or None).

        `live=False` (catching up on an old log) keeps NCCL facts but not decode figures,
        which would otherwise be published as current."""
        rec = loglines.parse_line(line)
        self.on_record(rec, live=live)
        return rec

    def on_record(self, rec: Mapping[str, Any] | None, live: bool = True) -> None:
        """Feed one engine log line already parsed (`loglines.parse_line`; None: a line
        with no record): the daemon parses each line once and hands the record on."""
        with self._lock:
            self._log_lines += 1
            self._mark("logs", True)
            if rec is not None and (live or rec["kind"] != "decode"):
                self._apply_record(dict(rec))
                self.version += 1

    def set_labels(
        self,
        profile: str | None,
        mode: str | None,
        settings: Mapping[str, str] | None = None,
        engine: str | None = None,
    ) -> None:
        """Identity labels without an opinion on `up` (the standalone exporter: up = polls)."""
        with self._lock:
            if (profile, mode) != (self._profile, self._mode):
                self._drift.reset()
                self._reset_live()
            self._profile, self._mode = profile, mode
            self._settings = dict(settings or {})
            self._engine = engine
            self.version += 1

    def on_switch(self, result: str) -> None:
        """Count a profile switch outcome: ok | rolled_back | failed."""
        if result not in SWITCH_RESULTS:
            raise ValueError(f"switch result {result!r} is not one of {SWITCH_RESULTS}")
        with self._lock:
            self._switches[result] += 1
            self.version += 1

    def on_downtime(self, mode: str, seconds: float, last: Mapping[str, str]) -> None:
        """A switch's client-visible downtime (its result's `switch`); `last`: the labels
        of fastverify_switch_last_info but mode and downtime_s (kind, profile, result)."""
        if mode not in SWITCH_DOOR_MODES:
            raise ValueError(f"switch mode {mode!r} is not one of {SWITCH_DOOR_MODES}")
        with self._lock:
            self._downtime[mode].observe(float(seconds))
            self._last_switch = {**last, "mode": mode, "downtime_s": f"{float(seconds):.1f}"}
            self.version += 1

    def declare_restart_reasons(self, reasons: Iterable[str]) -> None:
        """The `reason` values of fastverify_engine_restarts_total known in advance: each is
        published at 0 from now on, so the first restart of a reason is an increase that
        Prometheus' increase()/offset see (a series born at 1 looks like 1 -> 1; Prometheus'
        guidance: initialise the label sets you know). Switch results are always published."""
        with self._lock:
            self._restart_reasons = tuple(dict.fromkeys([*self._restart_reasons, *reasons]))
            self.version += 1

    def on_restart(self, reason: str) -> None:
        """Count an engine restart (crash, switch, mode, manual, ...)."""
        with self._lock:
            self._restarts[str(reason)] += 1
            self.version += 1

    def watch_auth(self, reasons: Iterable[str], backoff_sources: Callable[[], int]) -> None:
        """Publish the TCP door's failed attempts (each reason from 0) and the number of
        sources backing off now (`backoff_sources()`, called per scrape: in memory only)."""
        with self._lock:
            self._auth_failures = Counter(dict.fromkeys(reasons, 0))
            self._auth_backoff = backoff_sources
            self.version += 1

    def watch_frontdoor(self, probe: Callable[[], dict[str, Any] | None]) -> None:
        """Publish the front door's counts: `probe()` (its control socket's status, None
        while it is down) is called per scrape."""
        with self._lock:
            self._frontdoor = probe
            self.version += 1

    def on_auth_failure(self, reason: str) -> None:
        """Count a refused attempt on the TCP door (token, tls, plaintext, backoff)."""
        with self._lock:
            if self._auth_failures is not None:
                self._auth_failures[reason] += 1
                self.version += 1

    def set_weight_cache(self, up: bool, nbytes: int | None) -> None:
        """The weight cache's group: serving (ready) or not, and the GPU memory it holds."""
        with self._lock:
            self._weight_cache = (bool(up), nbytes)
            self.version += 1

    def on_weights_loaded(self, weights: Mapping[str, Any]) -> None:
        """A start came up (daemon/weights.py's record): a cache hit, a fallback to disk (by
        reason), and the start's split (weights, cuda_graph, rest)."""
        with self._lock:
            if weights.get("source") == "cache":
                self._weight_cache_hits += 1
            elif weights.get("fallback"):
                self._weight_cache_fallbacks[str(weights.get("reason") or "unavailable")] += 1
            phases = weights.get("phases")
            self._start_phases = dict(phases) if isinstance(phases, Mapping) else None
            self.version += 1

    def set_engine_start_seconds(self, seconds: float) -> None:
        """Last time-to-ready of the engine (spawn to serving)."""
        with self._lock:
            self._engine_start_seconds = float(seconds)
            self.version += 1

    def set_baseline(
        self,
        profile: str,
        tokens_per_second: float,
        per_request_tokens_per_second: float,
        measured_at: float,
        concurrency: int | None = None,
    ) -> None:
        """Record the last baseline-mode measurement of `profile` at `concurrency`
        concurrent requests (time: unix seconds). A baseline without a concurrency is
        published but never compared with (nothing says which batch size it matches)."""
        if tokens_per_second <= 0 or per_request_tokens_per_second <= 0:
            raise ValueError("baseline figures must be positive tokens per second")
        if concurrency is not None and (isinstance(concurrency, bool) or int(concurrency) < 1):
            raise ValueError("a baseline's concurrency must be a positive number of requests")
        conc = None if concurrency is None else int(concurrency)
        with self._lock:
            self._baselines[(profile, conc)] = Baseline(
                profile,
                float(tokens_per_second),
                float(per_request_tokens_per_second),
                float(measured_at),
                conc,
            )
            self.version += 1

    def set_decision(self, profile: str, mode: str, backend: str, applied: bool) -> None:
        """The newest tuning decision (`fastverify_decision_info`)."""
        with self._lock:
            self._decision = {"profile": profile, "mode": mode, "backend": backend,
                              "applied": "true" if applied else "false"}  # fmt: skip
            self.version += 1

    def _decision_now(self, up: bool) -> dict[str, str] | None:
        """The decision's labels with `serving`: whether its profile and mode serve now (a
        manual switch away from it turns it "false"; switching back, "true")."""
        if not self._decision:
            return None
        d = self._decision
        serving = up and (self._profile, self._mode) == (d["profile"], d["mode"])
        return {**d, "serving": "true" if serving else "false"}

    def on_trace_analysis(self, analysis: Mapping[str, Any]) -> None:
        """Feed the result of one profile window (`traces.analyze_*(...)` dict)."""
        ranks = [r for r in analysis.get("ranks", []) if r.get("verify_passes")]
        with self._lock:
            if not ranks:
                self._trace_windows["empty"] += 1
                self._mark("traces", False)
                self.version += 1
                return
            ref = min(ranks, key=lambda r: r.get("rank", 0))
            key = (self._profile or "", self._mode or "")
            hist = self._verify_hist.setdefault(key, Histogram())
            samples = ref.get("verify_ms_samples")
            if samples:
                for ms in samples:
                    hist.observe(ms / 1000.0)
            calls = ref.get("allreduce_calls")
            if calls is None:
                calls = round(ref["allreduce_per_verify"] * ref["verify_passes"])
            self._allreduce_calls[(*key, "trace")] += int(calls)
            at = float(analysis.get("captured_at") or self._clock())
            self._trace = trace_reading(ref, ranks, at)
            self._trace_windows["ok"] += 1
            self._mark("traces", True)
            self.version += 1

    def on_trace_failure(self) -> None:
        """Count a profile window that produced no analysis."""
        with self._lock:
            self._trace_windows["failed"] += 1
            self._mark("traces", False)
            self.version += 1

    def on_sglang_metrics(self, values: Mapping[str, float] | None) -> None:
        """One poll of SGLang's /metrics, reduced by `sglang_metrics.reduce` (None: poll failed)."""
        now = self._clock()
        with self._lock:
            self._poll_ok = values is not None
            self._mark("sglang_metrics", values is not None)
            if values is None:
                # no answer: nothing SGLang said earlier is current any more
                self._obs_metrics = None
                self._gen_tokens.clear()
                self._itl = self._itl_prev = None
            else:
                obs = self._obs_metrics = Observation.read(now, "sglang_metrics", values)
                self._track_steps(now, values.get("spec_num_steps"), obs.running_reqs)
                total = values.get("generation_tokens_total")
                if total is not None:
                    self._add_gen_tokens(now, float(total))
                self._add_itl(now, values.get("itl_seconds_sum"), values.get("itl_count"))
            self.version += 1

    def _track_steps(self, now: float, steps: float | None, running: float | None) -> None:
        """Decoding time at each active draft step count (SGLang's `spec_num_steps` gauge),
        per profile and mode: the interval since the last poll counts at the step count seen
        then, when requests were running then (an idle server's gauge is stale). A trial on
        dummy weights (`spec costs` at k steps, a sweep's EAGLE-3 trial) shows its steps and
        never counts: its time is a measurement, not the profile's serving."""
        if self._mode not in SPEC_MODES or steps is None:
            self._steps_seen = None
            return
        self._drift.on_steps(now, int(steps))
        if self._steps_seen is not None:
            at, prev, busy = self._steps_seen
            if busy and self._settings.get("weights") != "dummy":
                key = (self._profile or "", self._mode or "", str(prev))
                self._steps_seconds[key] = self._steps_seconds.get(key, 0.0) + max(0.0, now - at)
        self._steps_seen = (now, int(steps), bool(running))

    def on_requests(self, records: list[dict[str, Any]], _at: float | None = None) -> None:
        """Finished requests' histograms (exporters.request_metrics.RequestMetricsFollower)."""
        with self._lock:
            if self._mode in SPEC_MODES and self._settings.get("weights") != "dummy":
                self._drift.on_requests(records, self._clock())
                self.version += 1

    def set_spec_plan(self, plan: Mapping[str, Any] | None) -> None:
        """The stored speculation plan (`spec-plan.json`) live acceptance is compared with."""
        with self._lock:
            self._drift.plan = dict(plan) if plan else None
            self.version += 1

    def on_acceptance(self, record: Mapping[str, Any]) -> None:
        """An accepted-drafts histogram the daemon recorded (fastverify.daemon.acceptance)."""
        with self._lock:
            key = (str(record["profile"]), str(record["mode"]), str(record["steps"]))
            self._acceptance[key] = dict(record)
            self.version += 1

    def on_inspector(self, summary: Mapping[str, Any]) -> None:
        """A window of NCCL inspector records, reduced by `inspector.summarize`."""
        with self._lock:
            key = (self._profile or "", self._mode or "")
            self._allreduce_calls[(*key, "inspector")] += int(summary.get("allreduce_calls", 0))
            self._inspector = dict(summary)
            self._mark("inspector", True)
            self.version += 1

    # ------------------------------------------------------------------ helpers
    def _mark(self, source: str, ok: bool) -> None:
        """Record an attempt of `source` (under the lock): up or not, and when it last worked."""
        self._source_up[source] = ok
        if ok:
            self._source_last[source] = self._clock()

    def _add_itl(self, now: float, total_s: float | None, count: float | None) -> None:
        """Decode seconds per token per request since the previous poll, from SGLang's
        inter-token latency histogram (kept until a poll brings new tokens; a counter that
        went back, a restarted server, starts the deltas over)."""
        if total_s is None or count is None:
            return
        prev, self._itl_prev = self._itl_prev, (float(total_s), float(count))
        if prev is None or count < prev[1] or total_s < prev[0]:
            return
        if count > prev[1]:
            self._itl = ((total_s - prev[0]) / (count - prev[1]), now)

    def _itl_now(self, now: float) -> float | None:
        if self._itl is None or now - self._itl[1] > self.observation_ttl_s:
            return None
        return self._itl[0]

    def _reset_live(self) -> None:
        self._itl = None
        # the step count last seen belongs to the server before the switch: its time never
        # counts under the new profile/mode's labels
        self._steps_seen = None
        self._itl_prev = None
        self._obs_log = None
        self._obs_metrics = None
        self._gen_tokens.clear()
        self._trace = None
        self._inspector = None

    def _reset_nccl(self) -> None:
        self._nccl_version = None
        self._nccl_env = {}
        self._nccl_tuning = {}

    def _add_gen_tokens(self, now: float, raw: float) -> None:
        """Turn SGLang's counter into ours, per (profile, mode): deltas between polls (the
        whole value after an engine restart, when SGLang's counter starts over)."""
        prev = self._gen_tokens_raw
        delta = raw if prev is None or raw < prev else raw - prev
        self._gen_tokens_raw = raw
        key = (self._profile or "", self._mode or "")
        total = self._gen_tokens_totals.get(key, 0.0) + delta
        self._gen_tokens_totals[key] = total
        self._gen_tokens.append((now, total))
        horizon = now - self.rate_window_s
        while len(self._gen_tokens) > 2 and self._gen_tokens[1][0] <= horizon:
            self._gen_tokens.popleft()

    def _apply_record(self, rec: dict[str, Any]) -> None:
        kind = rec["kind"]
        if kind == "decode":
            self._obs_log = Observation.read(self._clock(), "log", rec)
        elif kind == "nccl_env":
            self._nccl_env[rec["var"]] = rec["value"]
        elif kind == "nccl_version":
            self._nccl_version = rec["version"]
        elif kind == "nccl_tuning":
            key = (rec["collective"], rec["bytes"])
            if key in self._nccl_tuning or len(self._nccl_tuning) < MAX_TUNING_ROWS:
                lo, hi = rec.get("channel_lo"), rec.get("channel_hi")
                channels = "" if lo is None else str(hi - lo + 1)
                self._nccl_tuning[key] = (rec["algo"], rec["proto"], channels)
        elif kind == "nccl_warn":
            self._nccl_warnings += 1

    def _latest_observation(self, now: float) -> Observation | None:
        """The decode log line while one arrived within `log_fresh_s` (one line is one
        consistent reading of requests, accept length and throughput), else the newest
        /metrics poll, else nothing (older than `observation_ttl_s`)."""
        log_obs = self._obs_log
        if log_obs is not None and now - log_obs.at <= self.log_fresh_s:
            return log_obs
        return self._newest_observation(now)

    def _newest_observation(self, now: float) -> Observation | None:
        """The newest reading of either source (within `observation_ttl_s`): request counts
        and KV usage follow SGLang's own gauge once it is newer than the last decode line."""
        return newest([self._obs_log, self._obs_metrics], now, self.observation_ttl_s)

    def _tokens_per_second(self, now: float, obs: Observation | None) -> float | None:
        pts = self._gen_tokens
        if len(pts) >= 2 and now - pts[-1][0] <= self.observation_ttl_s:
            (t0, c0), (t1, c1) = pts[0], pts[-1]
            if t1 - t0 >= 0.5:
                return (c1 - c0) / (t1 - t0)
        if obs is not None and obs.gen_throughput is not None:
            return obs.gen_throughput
        return None

    # ---------------------------------------------------------------- snapshot
    def snapshot(self) -> dict[str, Any]:
        """A consistent copy of everything the collectors publish, with derived figures."""
        now = self._clock()
        door = self._frontdoor
        frontdoor = {"status": door()} if door is not None else None  # outside the lock
        with self._lock:
            obs = self._latest_observation(now)
            tps = self._tokens_per_second(now, obs)
            eagle = self._mode in SPEC_MODES or (
                self._mode is None and obs is not None and bool(obs.accept_len)
            )
            cycle = None
            spec = None
            if eagle and obs is not None:
                itl = self._itl_now(now)
                cycle = spec_cycle_seconds(
                    obs.running_reqs, obs.accept_len, obs.gen_throughput, itl
                )
                rates = {
                    conc: b.per_request_tokens_per_second
                    for (name, conc), b in self._baselines.items()
                    if name == (self._profile or "") and conc is not None
                }
                spec = verdict(obs.running_reqs, obs.accept_len, obs.gen_throughput, rates, itl)
            accept_len = accept_rate = None
            if eagle and obs is not None and obs.accept_len:
                # an accept length is never 0: SGLang's 0 means "no verify pass yet"
                accept_len, accept_rate = obs.accept_len, obs.accept_rate
            up = self._engine_up if self._engine_up is not None else bool(self._poll_ok)
            auth = None if self._auth_failures is None else dict(self._auth_failures)
            probe = self._auth_backoff
            live = self._drift.live() if self._mode in SPEC_MODES else {}
            return {
                "auth_failures": auth,
                "auth_backoff_sources": probe() if probe is not None else None,
                "now": now,
                "version": self.version,
                "up": up,
                "profile": self._profile or "",
                "mode": self._mode or "",
                "engine": self._engine or "",
                "sglang": self._sglang,
                "settings": dict(self._settings),
                "allreduce": dict(self._allreduce) if self._allreduce else None,
                "engine_start_seconds": self._engine_start_seconds,
                "start_phases": dict(self._start_phases) if self._start_phases else None,
                "weight_cache": self._weight_cache,
                "frontdoor": frontdoor,
                "weight_cache_hits": self._weight_cache_hits,
                "weight_cache_fallbacks": {
                    **dict.fromkeys(WEIGHT_CACHE_FALLBACKS, 0),
                    **self._weight_cache_fallbacks,
                },
                "restarts": {**dict.fromkeys(self._restart_reasons, 0), **self._restarts},
                "switches": {r: self._switches.get(r, 0) for r in SWITCH_RESULTS},
                "downtime": {m: h.copy() for m, h in self._downtime.items()},
                "last_switch": dict(self._last_switch) if self._last_switch else None,
                "allreduce_calls": dict(self._allreduce_calls),
                "verify_hist": {k: h.copy() for k, h in self._verify_hist.items()},
                "nccl_warnings": self._nccl_warnings,
                "log_lines": self._log_lines,
                "trace_windows": dict(self._trace_windows),
                "observation": obs,
                "requests": self._newest_observation(now),
                "spec_accept_length": accept_len,
                "spec_accept_rate": accept_rate,
                "sources": {
                    src: (self._source_up[src], self._source_last.get(src))
                    for src in SOURCES
                    if src in self._source_up
                },
                "tokens_per_second": tps,
                "generation_tokens_total": dict(self._gen_tokens_totals),
                "spec_cycle_seconds": cycle,
                "verdict": spec,
                "breakeven_accept_length": None if spec is None else spec.breakeven_accept_length,
                "speedup_estimate": None if spec is None else spec.speedup_estimate,
                "baselines": dict(self._baselines),
                "decision": self._decision_now(up),
                "trace": dict(self._trace) if self._trace else None,
                "inspector": dict(self._inspector) if self._inspector else None,
                "spec_live": live,
                "spec_drift": self._drift.stale(live) if self._mode in SPEC_MODES else None,
                "nccl_version": self._nccl_version,
                "nccl_env": dict(self._nccl_env),
                "nccl_tuning": dict(self._nccl_tuning),
                "eagle": eagle,
                "spec_active_steps": self._steps_seen[1] if self._steps_seen else None,
                "spec_steps_seconds": dict(self._steps_seconds),
                "acceptance": {k: dict(v) for k, v in self._acceptance.items()},
            }
