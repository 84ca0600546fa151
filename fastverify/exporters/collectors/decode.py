"""Decode figures of the serving engine, from SGLang's /metrics poll or its decode log lines:
tokens/s, generated tokens, accept length and rate, requests, KV usage, the spec cycle and
the speculation verdict against a baseline of the same concurrency.

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

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import Metric

from fastverify.config import SPEC_MODES
from fastverify.exporters.baseline import spec_cycle_seconds, verdict
from fastverify.exporters.collectors.base import EngineChange, Hub, Source, one, rows
from fastverify.exporters.collectors.baselines import BaselinesSource
from fastverify.exporters.collectors.sources import HealthSource
from fastverify.exporters.collectors.speculation import SpeculationSource
from fastverify.exporters.readings import Observation, newest


class DecodeSource(Source):
    NAME = "decode"

    def __init__(
        self,
        hub: Hub,
        health: HealthSource,
        speculation: SpeculationSource,
        baselines: BaselinesSource,
        *,
        rate_window_s: float,
        observation_ttl_s: float,
        log_fresh_s: float,
    ) -> None:
        super().__init__(hub)
        self.health, self.speculation, self.baselines = health, speculation, baselines
        self.rate_window_s = rate_window_s
        self.observation_ttl_s = observation_ttl_s
        self.log_fresh_s = log_fresh_s
        self.poll_ok: bool | None = None  # the last poll of SGLang's /metrics answered
        self._obs_log: Observation | None = None
        self._obs_metrics: Observation | None = None
        self._gen_tokens: deque[tuple[float, float]] = deque()  # (t, our counter)
        self._gen_tokens_raw: float | None = None  # SGLang's counter at the last poll
        self._totals: dict[tuple[str, str], float] = {}  # (profile, mode) -> tokens
        self._itl: tuple[float, float] | None = None  # (decode s per token per request, at)
        self._itl_prev: tuple[float, float] | None = None  # SGLang ITL histogram (sum, count)

    # ------------------------------------------------------------------------- feed
    def on_poll(self, values: Mapping[str, float] | None) -> None:
        """One poll of SGLang's /metrics, reduced by `sglang_metrics.reduce` (None: poll failed)."""
        h = self.hub
        now = h.now()
        with h.lock:
            self.poll_ok = values is not None
            self.health.mark("sglang_metrics", values is not None)
            if values is None:
                # no answer: nothing SGLang said earlier is current any more
                self._obs_metrics = None
                self._gen_tokens.clear()
                self._itl = self._itl_prev = None
            else:
                obs = self._obs_metrics = Observation.read(now, "sglang_metrics", values)
                self.speculation.track_steps(now, values.get("spec_num_steps"), obs.running_reqs)
                total = values.get("generation_tokens_total")
                if total is not None:
                    self._add_gen_tokens(now, float(total))
                self._add_itl(now, values.get("itl_seconds_sum"), values.get("itl_count"))
            h.changed()

    def on_decode_line(self, rec: Mapping[str, Any]) -> None:
        """A decode log record (the logs source hands it on, under the hub's lock)."""
        self._obs_log = Observation.read(self.hub.now(), "log", rec)

    def engine_changed(self, change: EngineChange) -> None:
        if change.new_server:
            self._itl = self._itl_prev = None
            self._obs_log = self._obs_metrics = None
            self._gen_tokens.clear()

    def tokens_total(self) -> dict[tuple[str, str], float]:
        """Generated tokens per (profile, mode), across restarts."""
        with self.hub.lock:
            return dict(self._totals)

    # ---------------------------------------------------------------------- helpers
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

    def _add_gen_tokens(self, now: float, raw: float) -> None:
        """Turn SGLang's counter into ours, per (profile, mode): deltas between polls (the
        whole value after an engine restart, when SGLang's counter starts over)."""
        prev = self._gen_tokens_raw
        delta = raw if prev is None or raw < prev else raw - prev
        self._gen_tokens_raw = raw
        key = (self.hub.profile or "", self.hub.mode or "")
        total = self._totals[key] = self._totals.get(key, 0.0) + delta
        self._gen_tokens.append((now, total))
        horizon = now - self.rate_window_s
        while len(self._gen_tokens) > 2 and self._gen_tokens[1][0] <= horizon:
            self._gen_tokens.popleft()

    def latest(self, now: float) -> Observation | None:
        """The decode log line while one arrived within `log_fresh_s` (one line is one
        consistent reading of requests, accept length and throughput), else the newest
        /metrics poll, else nothing (older than `observation_ttl_s`)."""
        log_obs = self._obs_log
        if log_obs is not None and now - log_obs.at <= self.log_fresh_s:
            return log_obs
        return self.newest(now)

    def newest(self, now: float) -> Observation | None:
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

    def _itl_now(self, now: float) -> float | None:
        if self._itl is None or now - self._itl[1] > self.observation_ttl_s:
            return None
        return self._itl[0]

    # ------------------------------------------------------------------ the series
    def families(self, now: float) -> Iterable[Metric | None]:
        h = self.hub
        pm = (h.profile or "", h.mode or "")
        obs = self.latest(now)
        eagle = h.mode in SPEC_MODES or (
            h.mode is None and obs is not None and bool(obs.accept_len)
        )
        yield one("fastverify_generation_tokens_per_second", self._tokens_per_second(now, obs), *pm)
        spec = cycle = None
        if eagle and obs is not None and obs.accept_len:
            # an accept length is never 0: SGLang's 0 means "no verify pass yet"
            yield one("fastverify_spec_accept_length", obs.accept_len, *pm)
            yield one("fastverify_spec_accept_rate", obs.accept_rate, *pm)
        if eagle and obs is not None:
            itl = self._itl_now(now)
            cycle = spec_cycle_seconds(obs.running_reqs, obs.accept_len, obs.gen_throughput, itl)
            rates = self.baselines.rates(pm[0])
            spec = verdict(obs.running_reqs, obs.accept_len, obs.gen_throughput, rates, itl)
        if self._totals:
            yield rows("fastverify_generation_tokens_total", self._totals)
        req = self.newest(now)
        if req is not None:
            yield one("fastverify_running_requests", req.running_reqs, *pm)
            yield one("fastverify_queued_requests", req.queue_reqs, *pm)
            yield one("fastverify_kv_token_usage_ratio", req.token_usage, *pm)
        yield one("fastverify_spec_cycle_seconds", cycle, *pm)
        if spec is not None:  # only against a baseline of this profile at the reading's concurrency
            conc = str(spec.concurrency)
            yield one("fastverify_spec_breakeven_accept_length", spec.breakeven_accept_length,
                      *pm, conc)  # fmt: skip
            yield one("fastverify_spec_speedup_estimate", spec.speedup_estimate, *pm, conc)
