"""Costs by batch size and draft steps, measured on the serving engine (`spec costs`).

The daemon restarts its engine, with the profile it serves, on dummy weights (`load_format:
"dummy"`, the path of `bench --load-format dummy` and a sweep's trials), once per trial:
"baseline" in mode baseline (the plain decode step a baseline server runs); 0 in mode
adaptive at 0 steps (every batch size's candidates [0]: SGLang's steps-0 pass, a verify at
one draft token plus the draft extend, `fastverify.sglang.eagle`); k >= 1 in EAGLE-3 at
speculative_num_steps k, topk 1, num_draft_tokens k + 1, as SGLang's adaptive worker runs
k steps (`srt/speculative/adaptive_spec_params.py`); through the API's `eagle3_steps`: a
timing trial's override that the daemon validates before it stops anything and never
persists.

At each batch size B one closed-loop bench window runs at concurrency B (`run_bench`) and
the engine's own cycle is read from it, as a sweep's trial rows read theirs
(`fastverify.experiments.sweep.trial`):
- the rate one request decodes at, other requests' prefills taken out (the bench's decode
  tok/s: its chunk gaps that hold no other request's first token; `_decode_rate`);
- baseline and k = 0: one token per pass, 1 / that rate;
- k >= 1: the draft+verify cycle, dummy accept length / that rate
  (`speculation.breakeven.cycle_seconds`); the accept length of the window's own
  accepted-drafts histogram (else the server's, else 1.0), used for nothing else;
- at batch size 1, the time to first token (p50) as the prefill of one `input_len`-token
  prompt, per mode (baseline; adaptive from the steps-0 trial, an adaptive server; fixed
  EAGLE-3 from the 1..K trials, `speculation.costs.fixed_eagle_prefill`: SGLang 0.5.17's
  adaptive server takes ~12 ms longer at 128 tokens),
  of a few prompts LONG_PROMPT x longer (capped under the server's `max_req_input_len`) and
  of a few SHORT_PROMPT-token ones, one at a time: the short one is the part of a first token
  that holds no forward (the request's way through the server's other processes) plus one
  forward that reads the weights as a decode step does, so the prefill's cost need not be a
  line through the origin (a line's intercept put the sim's at 23 ms where it is ~4);
  and of a batch of window-length prompts sent at once, as many as one prefill forward takes
  (the chunked-prefill budget over the prompt, at most max_running_requests and the largest
  batch size measured): the last first
  token (p99) of each of BATCH_PROMPT_ROUNDS rounds, the median: the forward a loaded
  server runs, which one long prompt's time does not give (its attention spans the whole
  prompt; SGLang 0.5.17 on an H100 served 1024-token prompts at 16 and 32 clients 1.19x and
  1.34x what the one-prompt line predicted);
- with `traces`, the verify pass (`step[VERIFY bs=N]` p50, rank 0) of a profile window
  captured under the same load after the bench window, when the engine's trace gives it; a
  verify longer than the window's whole cycle (the two windows ran under different load) is
  left out and said, never printed beside the cycle it contradicts.
Random weights keep every timing real (shapes, kernels, all-reduces, CUDA graphs); only the
accept length is meaningless, and the plan takes it from a real-weights bench instead.

With a journal (`--journal FILE`), every window's record is appended to FILE the moment it is
measured, with the plan it belongs to (profile, steps, batch sizes, bench settings); a later
run with `resume` skips the windows the journal holds, and a step count whose windows are all
there is not loaded at all. The report says how many windows came from the journal and how
many were measured now, and where the time went (engine starts, windows, profile windows, the
restore).

The daemon's lease is held throughout (another client's switch gets 409); at the end, also
after a failed trial or Ctrl-C, the profile, mode and weights that served before are put
back (queued behind a switch still in flight). A trial that cannot start ends the run: which
k, the daemon's reason and message (`CostTrialFailed`), after the restore.

`result()` is the cost file (`kind: "engine-trials"`) that `spec plan --costs FILE` reads
(`fastverify.speculation.costs.from_engine_trials`).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastverify.config import TRIAL_LOAD_FORMAT
from fastverify.sglang import request_stamps
from fastverify.speculation import front_end

KIND = "engine-trials"
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
BASELINE = "baseline"  # the trial of a baseline server (steps key in `trials`)
LONG_PROMPT = 8  # the second prefill point: prompts this many times the window's
SHORT_PROMPT = 8  # the third: prompt tokens that cost one weight-reading forward
PROMPT_POINT_REQUESTS = 4
# the fourth: BATCH_PROMPT_ROUNDS rounds of as many window-length prompts at once as one
# prefill forward takes (`CostTrials._batch_prompts`)
BATCH_PROMPT_ROUNDS = 3
SPLIT_PREFIX = "split_"  # a first-token point's stage, beside its mean, p50, p99 (ms)
BENCH_KEYS = ("duration", "input_len", "output_len", "warmup", "seed", "traces", "trace_steps")
EventFn = Callable[[str], None]
# how a window's decode rate is read (`_decode_rate`); a journal of another reading is
# another plan, never resumed into this one
DECODE_RATE = "decode gaps without prefill"


class CostTrialError(RuntimeError):
    """The trials cannot start (no profile served, the daemon refuses EAGLE-3 here)."""


class CostTrialBusy(CostTrialError):
    """Another experiment holds the daemon's lease."""


class CostTrialFailed(CostTrialError):
    """A trial could not start or measure: `steps` (k), `reason`, daemon `message`."""

    def __init__(self, steps: int | str, reason: str, message: str, report: dict[str, Any]):
        self.steps, self.reason, self.report = steps, reason, report
        super().__init__(
            f"the {'baseline trial' if steps == BASELINE else f'trial at {steps} step'}"
            f"{'s' * (steps not in (1, BASELINE))} failed ({reason}): {message}"
        )


@dataclass(frozen=True)
class CostTrialConfig:
    max_steps: int | None = None  # None: the daemon's configured EAGLE-3 steps
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    duration: float = 10.0  # seconds per bench window
    input_len: int = 128
    output_len: int = 128
    warmup: int = 1  # requests per client before each window, discarded
    seed: int = 0
    switch_timeout_s: float = 1800.0
    traces: bool = True
    trace_steps: int = 5
    command: str = ""
    trials: tuple[str, ...] | None = None  # some of "baseline", "0".."K" (None: all of them)
    journal: str | None = None  # append each window here as it is measured
    resume: bool = False  # skip the windows the journal already holds

    def validate(self) -> None:
        if self.max_steps is not None and not 1 <= self.max_steps <= 64:
            raise ValueError(
                f"--max-steps {self.max_steps}: expected 1..64 (like server.eagle3.num_steps)"
            )
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ValueError("--batch-sizes must be integers >= 1")
        if self.duration <= 0:
            raise ValueError("--duration must be positive")
        if self.trace_steps < 1:
            raise ValueError("--trace-steps must be at least 1")
        for t in self.trials or ():
            if t != BASELINE and not (
                t.isdigit() and (self.max_steps is None or int(t) <= self.max_steps)
            ):
                raise ValueError(f"--trials {t}: expected {BASELINE} or a step count 0..K "
                                 "(K: --max-steps)")  # fmt: skip
        if self.resume and not self.journal:
            raise ValueError("--resume needs --journal FILE (the journal of the run to continue)")


@dataclass
class CostTrials:
    """One run of the trials against a daemon `client` (see the module docstring)."""

    client: Any
    cfg: CostTrialConfig
    emit: EventFn = lambda _line: None
    trials: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    done: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    time_s: dict[str, float] = field(
        default_factory=lambda: {"starts": 0.0, "windows": 0.0, "profile_windows": 0.0}
    )

    def run(self) -> dict[str, Any]:
        """The cost file's content; CostTrialBusy / CostTrialError / CostTrialFailed."""
        from fastverify.experiments.common.lease import LeaseRefused, hold

        self.cfg.validate()
        status = self.client.status()
        profile = status.get("profile")
        if not profile or not (status.get("engine") or {}).get("url"):
            raise CostTrialError(
                f"the daemon serves no profile (state {status.get('state')}): start one "
                "(fastverifyctl profile set NAME), then run spec costs"
            )
        steps = self._max_steps(profile)
        self._order(steps)  # a trial beyond K ends the run here, before any switch
        self._open_journal(profile, steps, (status.get("daemon") or {}).get("fingerprint"))
        what = f"spec costs: {profile}, steps 0..{steps} x batch {_csv(self.cfg.batch_sizes)}"
        failed: CostTrialFailed | None = None
        try:
            with hold(self.client, "spec-costs", what) as leased:
                self.client = leased
                try:
                    self._trials(profile, steps)
                except CostTrialFailed as exc:
                    failed = exc
                    self.trials.append({"steps": exc.steps, "status": "failed",
                                        "reason": exc.reason, "message": str(exc)})  # fmt: skip
                    self.emit(f"steps {exc.steps}: FAILED: {exc}")
                finally:  # also on Ctrl-C: the engine goes back as it was
                    t0 = time.monotonic()
                    self.info["restored"] = self._restore(status)
                    self.time_s["restore"] = round(time.monotonic() - t0, 3)
        except LeaseRefused as exc:
            raise CostTrialBusy(f"{exc}; nothing was switched or measured") from None
        report = self.result(profile, status, steps)
        if failed is not None:
            report["failed"] = {"steps": failed.steps, "reason": failed.reason,
                                "message": str(failed)}  # fmt: skip
            failed.report = report
            raise failed
        return report

    # ------------------------------------------------------------------ before anything
    def _max_steps(self, profile: str) -> int:
        """K: `max_steps`, else the configured EAGLE-3 steps. Asking for the EAGLE-3 argv
        (read-only) also has the daemon refuse, before any switch, what cannot run here (no
        drafter configured, a mode or flag this SGLang lacks)."""
        from fastverify.client import ApiError

        try:
            argv = self.client.server_argv(profile=profile, mode="eagle3").get("argv") or []
        except ApiError as exc:
            if exc.status not in (400, 404, 422):
                raise
            raise CostTrialError(
                f"EAGLE-3 cannot be served with {profile}: {exc.body.get('error') or exc}; "
                "nothing was switched or measured"
            ) from None
        if self.cfg.max_steps is not None:
            return self.cfg.max_steps
        flag = "--speculative-num-steps"
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return int(argv[argv.index(flag) + 1])
        raise CostTrialError("the daemon's EAGLE-3 argv names no step count: give --max-steps")

    # ------------------------------------------------------------------ the journal
    def _plan(self, profile: str, max_steps: int) -> dict[str, Any]:
        """What a journal's windows belong to: a resumed run measures the same thing."""
        bench = {k: v for k, v in asdict(self.cfg).items() if k in BENCH_KEYS}
        return {"profile": profile, "trials": [str(k) for k in self._order(max_steps)],
                "batch_sizes": list(self.cfg.batch_sizes), "bench": bench,
                "decode_rate": DECODE_RATE}  # fmt: skip

    def _open_journal(self, profile: str, max_steps: int, here: dict[str, Any] | None) -> None:
        """Read what a resumed journal holds (CostTrialError when it is another plan's or
        another host's: `here` is this host's fingerprint), or start a new journal."""
        from fastverify.durable import append_jsonl, scan_jsonl
        from fastverify.host import fingerprint

        if not self.cfg.journal:
            return
        path = Path(self.cfg.journal)
        plan = self._plan(profile, max_steps)
        self.info["journal"] = {"path": str(path), "resumed": False, "windows_from_journal": 0}
        if self.cfg.resume:
            records, _bad = scan_jsonl(path)
            if not records:
                raise CostTrialError(f"--resume: the journal {path} is missing or empty; run "
                                     "without --resume to start one")  # fmt: skip
            head = records[0]
            if head.get("plan") != plan:
                was = _plan_text(head.get("plan"))
                raise CostTrialError(
                    f"--resume: the journal {path} is of another plan ({was}; this run: "
                    f"{_plan_text(plan)}); run without --resume to start over"
                )
            hosts = [r.get("fingerprint") for r in records if r.get("record") == "host"]
            seen = fingerprint.compare(hosts[0] if hosts else None, here, "cost file",
                                       f"journal {path}")  # fmt: skip
            if seen["status"] == "differs":
                raise CostTrialError(f"--resume: {seen['message']}; run without --resume to "
                                     "start over on this host")  # fmt: skip
            if seen["message"]:
                self.emit(seen["message"])
            self.done, again = _measured_windows(records)
            for rec in records[1:]:
                if rec.get("record") == "load":
                    self.info.setdefault("load_s", {})[str(rec["steps"])] = rec.get("load_s")
                elif rec.get("record") == "server":
                    # the first record, with the capture list of a later (speculative) one
                    first = self.info.get("server")
                    self.info["server"] = _keep_capture_list(
                        first or rec.get("server"), rec.get("server")
                    )
                    self.info.setdefault("allreduce", rec.get("allreduce"))
            self.info["journal"].update(resumed=True, windows_from_journal=len(self.done),
                                        calls=1 + sum(r.get("record") == "resume"
                                                      for r in records))  # fmt: skip
            at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            append_jsonl(path, {"record": "resume", "windows": len(self.done), "at": at})
            self.emit(f"resuming from {path}: {len(self.done)} window(s) already measured")
            if again:
                self.info["journal"]["measured_again"] = again
                self.emit(
                    f"{again} batch-1 window(s) of the journal lack a prefill point (an "
                    "older fastverify wrote them): measured again"
                )
            return
        path.unlink(missing_ok=True)
        append_jsonl(path, {"record": "plan", "plan": plan}, mode=0o644)
        # the host its windows are measured on: a resume on another host is refused
        append_jsonl(path, {"record": "host", "fingerprint": here}, mode=0o644)

    def _journal(self, record: dict[str, Any]) -> None:
        from fastverify.durable import append_jsonl

        if self.cfg.journal:
            append_jsonl(self.cfg.journal, record, mode=0o644)

    # ------------------------------------------------------------------ the trials
    def _order(self, max_steps: int) -> list[int | str]:
        """The trials in the order they run: the baseline, then 0..K (or the chosen ones)."""
        every: list[int | str] = [BASELINE, *range(max_steps + 1)]
        wanted = self.cfg.trials
        if wanted is None:
            return every
        beyond = [t for t in wanted if t not in {str(k) for k in every}]
        if beyond:
            raise CostTrialError(
                f"--trials {','.join(beyond)}: beyond the {max_steps} step(s) measured "
                "(--max-steps); nothing was switched or measured"
            )
        return [k for k in every if str(k) in wanted]

    def _trials(self, profile: str, max_steps: int) -> None:
        for k in self._order(max_steps):
            pending = [bs for bs in self.cfg.batch_sizes if (str(k), bs) not in self.done]
            for bs in self.cfg.batch_sizes:
                if bs not in pending:
                    self.trials.append(dict(self.done[(str(k), bs)], from_journal=True))
            if not pending:
                self.emit(f"{_label(k)}: every window is in the journal (no load)")
                continue
            url = self._load(profile, k)
            for bs in pending:
                rec = self._window(profile, k, bs, url)
                self.trials.append(rec)
                self._journal({"record": "window", **rec})

    def _load(self, profile: str, k: int | str) -> str:
        """Restart the engine for trial k on dummy weights; its URL; CostTrialFailed."""
        from fastverify.experiments.common.daemon_ops import switch

        mode = "baseline" if k == BASELINE else ("adaptive" if k == 0 else "eagle3")
        body: dict[str, Any] = {"name": profile, "mode": mode, "load_format": TRIAL_LOAD_FORMAT}
        if k != BASELINE:
            body["eagle3_steps"] = k
        if k == BASELINE:
            shape = "decode step (baseline)"
        elif k == 0:
            shape = "adaptive at 0 steps: SGLang's steps-0 pass"
        else:
            shape = f"EAGLE-3, topk 1, {int(k) + 1} draft tokens"
        self.emit(f"{_label(k)}: loading {profile}/{mode} on dummy weights ({shape}) ...")
        seen: set[str] = set()

        def on_event(ev: dict[str, Any]) -> None:
            kind = ev.get("event")
            if kind == "state" and ev.get("state") not in seen:
                seen.add(str(ev.get("state")))
                why = f" ({ev['why']})" if ev.get("why") else ""
                self.emit(f"{_label(k)}:   {ev.get('state')}{why}")
            elif kind == "progress" and ev.get("phase") not in seen:
                seen.add(str(ev.get("phase")))  # one line per phase: loading, capture, ...
                self.emit(f"{_label(k)}:   {ev.get('phase')}: {ev.get('message') or ''}".rstrip())

        res = switch(self.client, body, self.cfg.switch_timeout_s, self.emit, on_event)
        if res.get("result") == "unchanged":
            res = dict(res, result="ok")
        if res.get("result") != "ok" or res.get("weights") not in (None, "dummy"):
            reason = str(res.get("reason") or res.get("result") or "failed")
            message = str(res.get("message") or res.get("error") or "")
            line = str(res.get("line") or "")  # the engine's own line that says why
            if line and line not in message:
                message = f"{message}; the engine said: {line}"
            raise CostTrialFailed(k, reason, message, {})
        self.info.setdefault("allreduce", res.get("allreduce"))
        self.info.setdefault("load_s", {})[str(k)] = res.get("duration_s")
        self.time_s["starts"] += float(res.get("duration_s") or 0.0)
        self._journal({"record": "load", "steps": k, "load_s": res.get("duration_s")})
        self.emit(f"{_label(k)}: ready in {res.get('duration_s') or 0:.1f} s "
                  f"(engine ready {res.get('engine_ready_s') or 0:.1f} s, verified)")  # fmt: skip
        status = self.client.status()
        url = (status.get("engine") or {}).get("url")
        # a speculative server's capture list; a resumed journal's record when it predates
        # the prompt limit (the long prompt would go uncapped to a server that refuses it)
        if k == 0 or _server_record_stale(self.info.get("server")):
            # a baseline server names no speculative capture list: keep a journaled one
            self.info["server"] = _keep_capture_list(_server_facts(url), self.info.get("server"))
            self._journal({"record": "server", "server": self.info["server"],
                           "allreduce": self.info.get("allreduce")})  # fmt: skip
        return str(url)

    def _window(self, profile: str, k: int | str, bs: int, url: str) -> dict[str, Any]:
        """One bench window at concurrency `bs` on trial k, and its trace when asked."""
        from fastverify.experiments.bench.load import BenchConfig, BenchError, run_bench
        from fastverify.speculation.breakeven import cycle_seconds

        bench = BenchConfig(url=url, concurrency=bs, duration=self.cfg.duration,
                            input_len=self.cfg.input_len, output_len=self.cfg.output_len,
                            seed=self.cfg.seed, warmup=self.cfg.warmup)  # fmt: skip
        tag = f"{_label(k)}, batch {bs}"
        self.emit(f"{tag}: window of {self.cfg.duration:g} s at concurrency {bs} ...")
        t0 = time.monotonic()
        try:
            r = run_bench(bench)
        except BenchError as exc:
            raise CostTrialFailed(k, "bench_failed", f"batch {bs}: {exc}", {}) from None
        rate, rate_from = _decode_rate(r)
        if not rate:
            raise CostTrialFailed(k, "no_rate", f"batch {bs}: {r.incomplete or 'no tokens'}", {})
        rec: dict[str, Any] = {
            "steps": k, "batch_size": bs, "status": "ok", "weights": r.weights,
            "tokens_per_second": round(r.output_tokens_per_second, 3),
            "per_request_tokens_per_second": round(rate, 4),
            "rate_from": rate_from,
            "completed": r.completed, "window_s": round(r.duration_s, 3),
        }  # fmt: skip
        if k == BASELINE or k == 0:
            cycle = 1.0 / rate
            rec["cycle_from"] = "one token per pass: 1 / decode tok/s"
        else:
            accept, src = _dummy_accept(r, int(k))
            cycle = cycle_seconds(accept, rate)
            rec.update(dummy_accept_length=round(accept, 4), accept_length_from=src)
            rec["cycle_from"] = "spec cycle: dummy accept length / decode tok/s"
        rec["cycle_ms"] = round(cycle * 1e3, 4)
        ttft = r.ttft_ms.get("p50")
        if bs == 1 and ttft:
            rec["ttft_ms_p50"] = round(float(ttft), 4)
            if k == BASELINE or k == 0:
                rec["ttft_ms_p50_long"] = self._prompt_ttft(url, tag, self._long_tokens(tag))
                rec["ttft_ms_p50_short"] = self._prompt_ttft(url, tag, SHORT_PROMPT)
                rec["ttft_ms_batch"] = self._batch_ttft(url, tag)
        what = {BASELINE: "decode step", 0: "steps-0 pass"}.get(k, "cycle")
        self.emit(f"{tag}: {r.output_tokens_per_second:.1f} tok/s, {rate:.1f} tok/s per "
                  f"request -> {what} {cycle * 1e3:.2f} ms")  # fmt: skip
        self.time_s["windows"] += time.monotonic() - t0
        if self.cfg.traces and isinstance(k, int) and k > 0:
            t1 = time.monotonic()
            self._trace(rec, bench, tag)
            self.time_s["profile_windows"] += time.monotonic() - t1
            if rec.get("verify_ms", 0.0) > rec["cycle_ms"]:
                why = (f"the profile window's verify pass ({rec.pop('verify_ms'):.2f} ms) is "
                       f"longer than the bench window's whole cycle ({rec['cycle_ms']:.2f} ms): "
                       "they ran under different load; the verify time is left out")  # fmt: skip
                rec["trace_error"] = why
                self.warnings.append(f"{tag}: {why}")
        rec["wall_s"] = round(time.monotonic() - t0, 3)
        return rec

    def _long_tokens(self, tag: str) -> int | None:
        """LONG_PROMPT x the window's prompt, under the server's `max_req_input_len` (SGLang
        refuses a prompt that long); None (said) when under it is not 2x the window's."""
        tokens = self.cfg.input_len * LONG_PROMPT
        limit = (self.info.get("server") or {}).get("max_req_input_len")
        if isinstance(limit, int) and tokens >= limit:
            tokens = limit - 1
            if tokens < 2 * self.cfg.input_len:
                self.warnings.append(
                    f"{tag}: no long-prompt prefill point: the server takes prompts under "
                    f"{limit} tokens, not 2x the window's {self.cfg.input_len}"
                )
                return None
        return tokens

    def _first_tokens(
        self, url: str, what: str, clients: int, requests: int, tokens: int,
        server: bool = False,
    ) -> dict[str, Any] | None:  # fmt: skip
        """The times to first token (ms: mean, p50, p99, ...) of `requests` prompts of
        `tokens` tokens from `clients` clients after one warm-up request each; where the
        server sent its stamps (fastverify.sglang.request_stamps), the mean's split into
        SGLang's stages (`split_STAGE`, ms) and, with `server`, what its scheduler did with
        them (`server`: `server_view`); None, with a warning naming `what`, when a prompt
        failed or gave no first token."""
        from fastverify.experiments.bench.load import BenchConfig, BenchError, run_bench

        cfg = BenchConfig(url=url, concurrency=clients, duration=None, requests=requests,
                          input_len=tokens, output_len=2, seed=self.cfg.seed, warmup=1)  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="fastverify-first-tokens-") as tmp:
            timeline = Path(tmp) / "timeline.jsonl"
            try:
                r = run_bench(cfg, timeline_to=str(timeline) if server else None)
            except BenchError as exc:
                self.warnings.append(f"{what}: {exc}")
                return None
            lines = timeline.read_text().splitlines() if server else []
            rows = [json.loads(line) for line in lines]
        ms = r.ttft_ms or {}
        if not ms.get("p50") or r.completed < requests:
            why = "; ".join(r.errors) or f"{r.completed} of {requests} first tokens"
            self.warnings.append(f"{what}: {why}")
            return None
        out: dict[str, Any] = {k: float(v) for k, v in ms.items() if v is not None}
        out.update({SPLIT_PREFIX + k: v for k, v in (r.ttft_split_ms or {}).items()})
        if view := server_view(rows):
            out["server"] = view
        return out

    def _prompt_ttft(self, url: str, tag: str, tokens: int | None) -> dict[str, float] | None:
        """The time to first token (p50) of `tokens`-token prompts, one request at a time: a
        point of the prefill's cost besides the window's own
        (`speculation.costs.Costs.prefill_latency`); None, said, when it cannot be had."""
        if tokens is None:
            return None
        self.emit(
            f"{tag}: {PROMPT_POINT_REQUESTS} requests of {tokens} prompt tokens (prefill) ..."
        )
        what = f"{tag}: no prefill point at {tokens} tokens"
        ttft = self._first_tokens(url, what, 1, PROMPT_POINT_REQUESTS, tokens)
        if ttft is None:
            return None
        return {"tokens": tokens, "ms": round(ttft["p50"], 4), **_split_of([ttft])}

    def _batch_prompts(self) -> int:
        """How many window-length prompts one prefill forward takes: the server's chunked
        prefill budget over the prompt, at most its max_running_requests and the largest
        window's clients (no more prompts than that ever wait at once); at least 2."""
        from fastverify.speculation.serving import CHUNKED_PREFILL_TOKENS

        server = self.info.get("server") or {}
        chunk = server.get("chunked_prefill_size")
        budget = chunk if isinstance(chunk, int) and chunk > 0 else CHUNKED_PREFILL_TOKENS
        most = server.get("max_running_requests")
        n = min(budget // self.cfg.input_len, max(self.cfg.batch_sizes))
        if isinstance(most, int) and most > 0:
            n = min(n, most)
        return max(2, n)

    def _batch_ttft(self, url: str, tag: str) -> dict[str, Any] | None:
        """The prefill of a batch of window-length prompts sent at once (one forward, or
        the few the scheduler splits it into): the median over BATCH_PROMPT_ROUNDS rounds of
        each round's last first token (p99; each round's warm-up is a batch of its own, sent
        before it), and of each round's mean first token (`mean_ms`: SGLang releases a
        round's first tokens over the forwards it splits the round into, so most come before
        the last) and of its split (`split_ms`, where SGLang sent its stamps: how much of the
        point is the engine's forwards and how much the way in and out); None, said, when it
        cannot be had."""
        n, each = self._batch_prompts(), self.cfg.input_len
        self.emit(f"{tag}: {BATCH_PROMPT_ROUNDS} rounds of {n} prompts of {each} tokens at "
                  f"once (a {n * each}-token prefill) ...")  # fmt: skip
        rounds = []
        for _ in range(BATCH_PROMPT_ROUNDS):
            ttft = self._first_tokens(url, f"{tag}: no batch prefill point", n, n, each,
                                      server=True)  # fmt: skip
            if ttft is None:
                return None
            rounds.append(ttft)
        lasts = [r["p99"] for r in rounds]
        servers = [r["server"] for r in rounds if "server" in r]
        return {"prompts": n, "tokens": n * each, "ms": round(statistics.median(lasts), 4),
                "rounds_ms": [round(x, 4) for x in lasts],
                "mean_ms": round(statistics.median(r["mean"] for r in rounds), 4),
                **_split_of(rounds),
                **({"rounds_server": servers} if len(servers) == len(rounds) else {})}  # fmt: skip

    def _trace(self, rec: dict[str, Any], bench: Any, tag: str) -> None:
        from fastverify.experiments.common.daemon_ops import capture_under_load
        from fastverify.experiments.sweep.trial import trace_figures

        self.emit(f"{tag}: capturing a profile window of {self.cfg.trace_steps} steps ...")
        analysis, error, _wall = capture_under_load(
            self.client, bench, self.cfg.trace_steps, self.emit
        )
        fig = trace_figures(analysis)
        if fig and fig.get("step_ms_p50"):
            rec["verify_ms"] = round(float(fig["step_ms_p50"]), 4)
            rec["trace"] = fig
            self.emit(f"{tag}: verify {fig['step_ms_p50']:.2f} ms ({fig['span']} p50, "
                      f"{fig.get('passes')} passes)")  # fmt: skip
        else:
            why = error or "the profile window had no verify pass to analyse"
            rec["trace_error"] = why
            self.warnings.append(f"no verify time at {tag}: {why}")

    # ------------------------------------------------------------------ afterwards
    def _restore(self, before: dict[str, Any]) -> dict[str, Any]:
        """Put back what served before (profile, mode, weights); queued behind a switch that
        an interrupted trial left in flight."""
        from fastverify.experiments.common.daemon_ops import switch

        profile, mode = before.get("profile"), before.get("mode")
        weights = "dummy" if before.get("trial") else "real"
        body: dict[str, Any] = {"name": profile, "mode": mode, "queue": True}
        if weights == "dummy":
            body["load_format"] = TRIAL_LOAD_FORMAT
        self.emit(f"restoring {profile}/{mode} ({weights} weights) ...")
        res = switch(self.client, body, self.cfg.switch_timeout_s, self.emit)
        out = {"profile": profile, "mode": mode, "weights": weights,
               "result": res.get("result"), "message": res.get("message")}  # fmt: skip
        if res.get("result") not in ("ok", "unchanged"):
            self.warnings.append(f"restoring {profile}/{mode} failed: {res.get('message')}")
        else:
            self.emit(f"restored {profile}/{mode} ({weights} weights)")
        return out

    def result(self, profile: str, status: dict[str, Any], max_steps: int) -> dict[str, Any]:
        """The cost file (`kind: "engine-trials"`); every cost says where it came from."""
        from fastverify.speculation.costs import fixed_eagle_batch, fixed_eagle_prefill

        ok = [t for t in self.trials if t.get("status") == "ok"]
        cycle: dict[str, dict[str, float]] = {}
        verify: dict[str, dict[str, float]] = {}
        baseline: dict[str, float] = {}
        prefill: dict[str, dict[str, float]] = {}
        batch: dict[str, dict[str, float]] = {}
        front: dict[str, Any] | None = None
        for t in ok:
            bs = str(t["batch_size"])
            if t["steps"] == BASELINE:
                baseline[bs] = t["cycle_ms"]
            else:
                cycle.setdefault(bs, {})[str(t["steps"])] = t["cycle_ms"]
            if t.get("verify_ms") is not None:
                verify.setdefault(bs, {})[str(t["steps"])] = t["verify_ms"]
            if t.get("ttft_ms_p50") and t["steps"] in (BASELINE, 0):
                mode = "baseline" if t["steps"] == BASELINE else "adaptive"
                prefill[mode] = {str(self.cfg.input_len): t["ttft_ms_p50"]}
                for point in (t.get("ttft_ms_p50_long"), t.get("ttft_ms_p50_short")):
                    if point:
                        prefill[mode][str(point["tokens"])] = point["ms"]
                if t.get("ttft_ms_batch"):
                    batch[mode] = {str(t["ttft_ms_batch"]["tokens"]): t["ttft_ms_batch"]["ms"]}
                if t["steps"] == BASELINE:
                    front = _front_end(t) or front
        base_pts = {int(n): ms for n, ms in (prefill.get("baseline") or {}).items()}
        fixed = fixed_eagle_prefill(ok, self.cfg.input_len, base_pts)
        if fixed:
            prefill["eagle"] = {str(n): round(ms, 4) for n, ms in sorted(fixed.items())}
        base_batch = {int(n): ms for n, ms in (batch.get("baseline") or {}).items()}
        moved = fixed_eagle_batch(fixed, base_pts, base_batch, self.cfg.input_len)
        if moved:
            batch["eagle"] = {str(n): round(ms, 4) for n, ms in moved.items()}
        server = self.info.get("server") or {}
        ar = self.info.get("allreduce") or {}
        backend = ar.get("backend") or ar.get("description") or "unknown"
        engine = status.get("engine") or {}
        when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        sim = " (SIMULATED: the fastverify sim)" if engine.get("simulated") else ""
        source = (
            f"engine trials on dummy weights{sim}: model {server.get('model_path') or '?'}, "
            f"profile {profile}, all-reduce {backend}, SGLang {server.get('version') or '?'}, "
            f"{when}; cycles from bench windows, other requests' prefills taken out (baseline "
            "and steps 0: 1 / decode tok/s; k > 0: dummy accept length / decode tok/s)"
        )
        return {
            "kind": KIND,
            "source": source,
            "model": server.get("model_path"),
            "profile": profile,
            "allreduce_backend": backend,
            "engine": engine.get("name"),
            "simulated": bool(engine.get("simulated")),
            "sglang_version": server.get("version"),
            "tp_size": server.get("tp_size"),
            "cuda_graph_bs": server.get("cuda_graph_bs"),
            "max_running_requests": server.get("max_running_requests"),
            "measured_at": when,
            "batch_sizes": list(self.cfg.batch_sizes),
            "steps": [k for k in self._order(max_steps) if k != BASELINE],
            "baseline_ms": baseline,
            "cycle_ms": cycle,
            "verify_ms": verify,
            "prefill_ms": prefill,
            "prefill_note": "time to first token of one request at a time (p50): baseline and "
            "adaptive (the steps-0 trial's server) at the window's prompt length, "
            f"{LONG_PROMPT}x it (capped under the server's max_req_input_len) and "
            f"{SHORT_PROMPT} tokens (the shortest less a decode step is the part that holds no "
            "forward); eagle (fixed steps) from the 1..K trials' batch-1 windows, the "
            "baseline's curve moved by their difference at the window's length",
            # by total tokens: window-length prompts sent at once (see prefill_batch_note)
            "prefill_batch_ms": batch,
            "prefill_batch_prompt": self.cfg.input_len,
            "prefill_batch_note": "the last first token (p99, median of "
            f"{BATCH_PROMPT_ROUNDS} rounds) of as many {self.cfg.input_len}-token prompts sent "
            "at once as one prefill forward takes; eagle: the baseline's moved as its line is",
            **({"front_end_ms": front} if front else {}),
            "trials": self.trials,
            "load_s": self.info.get("load_s") or {},
            # this run's seconds: engine starts, bench windows, profile windows, the restore
            "time_s": {k: round(v, 1) for k, v in self.time_s.items()},
            "journal": self.info.get("journal"),
            "restored": self.info.get("restored"),
            "bench": {k: v for k, v in asdict(self.cfg).items() if k in BENCH_KEYS},
            "command": self.cfg.command,
            "warnings": self.warnings,
            # the host it was measured on (fastverify.host.here): `spec plan --costs` compares
            "fingerprint": (status.get("daemon") or {}).get("fingerprint"),
        }


def _keep_capture_list(
    server: dict[str, Any] | None, other: dict[str, Any] | None
) -> dict[str, Any] | None:
    """`server`'s facts, with `other`'s speculative capture list where `server` names none
    (a baseline server's facts beside a speculative server's)."""
    graphs = (other or {}).get("cuda_graph_bs")
    if server is None or server.get("cuda_graph_bs") or not graphs:
        return server
    return {**server, "cuda_graph_bs": graphs}


def _server_record_stale(server: dict[str, Any] | None) -> bool:
    """No server facts yet, or a journal's from a fastverify that did not record the
    server's `max_req_input_len` (which caps the long prefill prompt) or its
    `chunked_prefill_size` (which sizes the batch prefill point): read them again."""
    return not server or "max_req_input_len" not in server or "chunked_prefill_size" not in server


def _lacks_prefill_points(window: dict[str, Any]) -> bool:
    """A journaled batch-1 window of the baseline or steps 0 that an older fastverify wrote
    without the prefill points measured beside it now (the short prompt's key; a point that
    could not be measured is None, an answer): a resume measures that window again."""
    return (
        int(window["batch_size"]) == 1
        and str(window["steps"]) in (BASELINE, "0")
        and bool(window.get("ttft_ms_p50"))
        and ("ttft_ms_p50_short" not in window or "ttft_ms_batch" not in window)
    )


def _measured_windows(
    records: list[dict[str, Any]],
) -> tuple[dict[tuple[str, int], dict[str, Any]], int]:
    """A journal's measured windows by (steps, batch size), and how many of its windows a
    resume measures again (`_lacks_prefill_points`)."""
    done: dict[tuple[str, int], dict[str, Any]] = {}
    again = 0
    for rec in records[1:]:
        if rec.get("record") == "window" and rec.get("status") == "ok":
            t = {k: v for k, v in rec.items() if k != "record"}
            if _lacks_prefill_points(t):
                again += 1
            else:
                done[(str(t["steps"]), int(t["batch_size"]))] = t
    return done, again


def pending_trials(journal: Path) -> list[str]:
    """The trials of a journal's plan that a resume still loads, in run order: those with a
    batch size not yet measured (or measured again: a window lacking its prefill points)."""
    from fastverify.durable import scan_jsonl

    records, _bad = scan_jsonl(journal)
    plan = records[0].get("plan") if records else None
    if not isinstance(plan, dict):
        return []
    done, _again = _measured_windows(records)
    return [
        str(k)
        for k in plan.get("trials") or []
        if any((str(k), int(bs)) not in done for bs in plan.get("batch_sizes") or [])
    ]


def server_view(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What SGLang's scheduler did with one round of prompts, from their stamps (a bench
    timeline's rows: seconds from the window's start), in ms from the round's first send:
    when the tokenizer manager handed each prompt on (`dispatched_ms`, in order), when it
    reached the waiting queue (`arrivals_ms`: the scheduler reads its socket between
    forwards, so these come in groups), and each prefill forward that took them in
    (`forwards`: [start, prompts, duration]). A round sent at once reaches the scheduler
    spread out and leaves it over a few forwards (speculation.front_end). None without
    stamps."""
    stamped = [r["server_s"] for r in rows if "server_s" in r]
    forwards = request_stamps.prefill_forwards(stamped)
    if not forwards:
        return None
    t0 = min(r["start_s"] for r in rows)

    def ms(t: float) -> float:
        return round((t - t0) * 1e3, 3)

    def times(key: str) -> list[float]:
        return [ms(t) for t in sorted(s[key] for s in stamped if key in s)]

    return {
        "dispatched_ms": times(request_stamps.DISPATCHED),
        "arrivals_ms": times(request_stamps.WAIT_QUEUE_ENTRY),
        "forwards": [[ms(f.entry), f.prompts, round(f.seconds * 1e3, 3)] for f in forwards],
    }


def handed_on_ms(rows: list[dict[str, Any]]) -> float | None:
    """The median ms from a prompt's send to the tokenizer manager's hand-off (a bench
    timeline's rows, prompts sent one at a time: the front end's path alone); None
    without the stamp."""
    times = [(r["server_s"][request_stamps.DISPATCHED] - r["start_s"]) * 1e3
             for r in rows if request_stamps.DISPATCHED in r.get("server_s", {})]  # fmt: skip
    return statistics.median(times) if times else None


def _front_end(trial: dict[str, Any]) -> dict[str, Any] | None:
    """The intake in front of the scheduler (speculation.front_end) from a trial's batch
    point rounds and what its short prompt alone took to the tokenizer manager's hand-off
    (the stages before it in its split); None without both."""
    rounds = (trial.get("ttft_ms_batch") or {}).get("rounds_server")
    split = (trial.get("ttft_ms_p50_short") or {}).get("split_ms") or {}
    stages = request_stamps.BEFORE_HANDOFF
    if not rounds or any(k not in split for k in stages):
        return None
    lone = sum(split[k] for k in stages)
    fe = front_end.from_rounds(rounds, lone, "spec costs' batch point: "
                               f"{len(rounds)} rounds, one prompt alone {lone:.2f} ms")  # fmt: skip
    return fe.to_dict() if fe else None


def _split_of(points: list[dict[str, Any]]) -> dict[str, Any]:
    """`split_ms`: the median over `points` (`_first_tokens`' answers) of each stage of the
    mean first token, where every point has SGLang's stamps; nothing where one lacks them."""
    keys = [k for k in points[0] if k.startswith(SPLIT_PREFIX)] if points else []
    if not keys or any(k not in p for p in points for k in keys):
        return {}
    split = {k.removeprefix(SPLIT_PREFIX): statistics.median(p[k] for p in points) for k in keys}
    return {"split_ms": {stage: round(ms, 4) for stage, ms in split.items()}}


def _label(k: int | str) -> str:
    return "baseline" if k == BASELINE else f"steps {k}"


def _decode_rate(r: Any) -> tuple[float | None, str]:
    """Tokens/s one request sees while decoding, other requests' prefills taken out: the
    bench's decode rate (chunk gaps that hold no other request's first token). Else (no gap
    was free of a prefill) (tokens - 1) / (latency - TTFT) over the completed requests, else
    1 / the mean inter-token latency. Not the ITL p50: a speculative chunk of n tokens counts
    its gap / n n times, so the median token sits in the long chunks and reads a cycle short
    by up to L / (k + 1). With the prefills left in, 1024-token prompts at batch 32 read the
    sim's decode pass as 31.6 ms, 2.9x its 10.9."""
    if r.decode_tokens_per_second:
        held = r.gaps_with_prefill or 0
        return float(r.decode_tokens_per_second), (
            f"decode gaps ({held} gap(s) holding another request's prefill left out)"
        )
    if r.per_request_tokens_per_second:
        return float(r.per_request_tokens_per_second), "completed requests"
    mean = (r.itl_ms or {}).get("mean")
    return (1000.0 / mean, "mean ITL (no request completed)") if mean else (None, "none")


def _dummy_accept(r: Any, k: int) -> tuple[float, str]:
    """The window's accept length on dummy weights (tokens per cycle, bonus included):
    its accepted-drafts histogram, else the server's average, else the floor 1.0."""
    from fastverify.speculation.curve import AcceptCurve

    if r.accept_histogram and sum(r.accept_histogram) > 0:
        steps = max(k, len(r.accept_histogram) - 1)
        curve = AcceptCurve.from_histogram(r.accept_histogram, steps)
        return curve.length(steps), "the window's accepted-drafts histogram"
    if r.accept_length:
        return float(r.accept_length), "the server's avg_spec_accept_length"
    return 1.0, "none reported: the floor (bonus token only)"


def _server_facts(url: str | None) -> dict[str, Any]:
    from fastverify.experiments.bench.load import server_info_or_none

    return server_facts(server_info_or_none(url) if url else None)


def server_facts(info: dict[str, Any] | None) -> dict[str, Any]:
    """What a cost file keeps of a server's info. `cuda_graph_bs`: the decode batch sizes a
    speculative server captures (a batch pads up to one; the adaptive controller routes by
    them): SGLang 0.5.17 resolves them into `cuda_graph_config.decode.bs` (1-8, then every
    second size to 32, for EAGLE-3 at 32 running requests), the sim publishes its own. A
    baseline server captures other sizes (1, 2, 4, 8, 12, 16, 24, 32) that price no EAGLE
    pass: None there."""
    info = info or {}
    keys = (
        "model_path",
        "version",
        "tp_size",
        "max_running_requests",
        "max_req_input_len",
        "chunked_prefill_size",
    )
    out = {k: info.get(k) for k in keys}
    model = (info.get("sim") or {}).get("cost_model") or {}
    decode = (info.get("cuda_graph_config") or {}).get("decode") or {}
    speculative = bool(info.get("speculative_algorithm"))
    out["cuda_graph_bs"] = model.get("cuda_graph_bs") or (decode.get("bs") if speculative else None)
    return out


def _plan_text(plan: Any) -> str:
    if not isinstance(plan, dict):
        return "no plan"
    trials = ",".join(plan.get("trials") or [])
    batch = _csv(plan.get("batch_sizes") or [])
    return f"{plan.get('profile')}, trials {trials} x batch {batch}, {plan.get('bench')}"


def _csv(values: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(v) for v in values)
