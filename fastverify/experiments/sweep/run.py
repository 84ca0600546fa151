"""Baseline-first profile sweep through the daemon (`fastverifyctl sweep`).

The field method: rank NCCL profiles on the baseline server (no drafter), then re-run
the best few in EAGLE-3 mode and compare each against its own baseline.

For each (profile, mode): switch through the daemon's control API (`POST /v1/profile`
with wait; the daemon validates, restarts, verifies, or rolls back), then run `bench`
`repeats` times against the engine URL the daemon reports. Every measurement and every
failure is appended to `DIR/results.jsonl` (one JSON object per line, flushed and
fsync'ed) as soon as it ends, so an interrupted sweep loses at most the measurement in
flight, and `resume=True` skips what the file already holds (a failed profile is not
retried; delete its line to retry it). A profile the daemon cannot start is recorded
with the daemon's reason and message, and the sweep goes on.

Its records and statistics are results.py's; its settings config.py's.

After the baseline phase, each profile's baseline figures are posted to
`POST /v1/baselines` with the bench concurrency they were measured at, where the exporter
turns them into break-even gauges while the server runs that many requests (real weights
only; an EAGLE-3 phase adds the profile's real accept length, which trials compare with).

Trial mode (`load_format="dummy"`, see `fastverify.experiments.sweep.trial`): every switch asks
the daemon for `--load-format dummy` (random weights: minutes less per load), every record
carries `weights: "dummy"`, a profile window is captured per profile for step/verify and
all-reduce figures, EAGLE-3 rows get a break-even accept length compared with a real one,
and `then_confirm=N` reloads the best N with real weights and measures them as usual (their
own rows, `weights: "real"`, with CI95). Extra record types: `switch` (seconds per load)
and `trace` (a profile window's figures).
At the end, `apply_best` switches to the winner; otherwise the profile and mode that were
active before the sweep are restored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from fastverify.config import SPEC_MODES, TRIAL_LOAD_FORMAT
from fastverify.experiments.bench.load import BenchError, run_bench
from fastverify.experiments.sweep import trial
from fastverify.experiments.sweep.config import (
    PLOT_FILE,
    RESULTS_FILE,
    SweepBusy,
    SweepConfig,
    SweepError,
)
from fastverify.experiments.sweep.results import (
    append_record,
    best_row,
    load_records,
    plot,
    summarize,
)

EventFn = Callable[[str], None]


def _fmt_ms(value: Any) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.2f}"


def _decode_analysis(analysis: dict[str, Any]) -> dict[str, Any] | None:
    """A baseline window's DECODE steps, analysed from its files (None when unreadable)."""
    from fastverify import traces

    try:
        out = traces.analyze_path(analysis["window"], span="DECODE")
    except (OSError, traces.TraceError):
        return None
    return out if any(r.get("verify_passes") for r in out.get("ranks", [])) else None


class Sweep:
    """Runs a sweep against a daemon `client` (fastverify.client.ControlClient)."""

    def __init__(
        self,
        client: Any,
        cfg: SweepConfig,
        on_event: EventFn | None = None,
        on_bench_progress: Callable[[int, float], None] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ):
        cfg.validate()
        self.client = client
        self.cfg = cfg
        self.emit = on_event or (lambda _line: None)
        self.on_bench_progress = on_bench_progress
        # One progress count, in measurements (bench runs): every event line starts with
        # `[done/total]`; `total` shrinks when a profile fails or a later phase has fewer
        # profiles than asked for, so the count reaches its total when the sweep ends.
        self.on_progress = on_progress or (lambda _done, _total: None)
        self.done = 0
        self.total = (len(cfg.profiles) + cfg.then_eagle3 + cfg.then_confirm) * cfg.repeats
        self.results = Path(cfg.output_dir) / RESULTS_FILE
        self.records: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.engine: dict[str, Any] | None = None  # status engine.identity: who measures
        self._original_trial = False

    # -- daemon calls
    def _status(self) -> dict[str, Any]:
        return self.client.status()

    def _switch(self, profile: str, mode: str, weights: str = trial.REAL) -> dict[str, Any]:
        """Switch and wait; returns the daemon's result (ok, rolled_back or failed).
        `weights="dummy"` asks for a trial server (`load_format: "dummy"`); real weights
        use the daemon's configured load format."""
        from fastverify.experiments.common.daemon_ops import switch

        body: dict[str, Any] = {"name": profile, "mode": mode}
        if weights == trial.DUMMY:
            body["load_format"] = TRIAL_LOAD_FORMAT
        return switch(self.client, body, self.cfg.switch_timeout_s, self.emit)

    def _serving(self) -> tuple[Any, ...]:
        """What serves now: profile, mode, trial, the engine instance (pid, start), the
        state, and the operation in flight (kind, profile, mode) if any."""
        st = self._status()
        eng = st.get("engine") or {}
        op = st.get("switch_in_flight") or {}
        return (st.get("profile"), st.get("mode"), bool(st.get("trial")), eng.get("pid"),
                eng.get("started_at"), st.get("state"),
                (op.get("kind"), op.get("profile"), op.get("mode")) if op else None)  # fmt: skip

    def _engine_url(self) -> str:
        url = ((self._status().get("engine") or {}).get("url")) or self.cfg.bench.url
        if not url:
            raise SweepError("the daemon reports no engine URL")
        return url

    # -- bookkeeping
    def _done(self, profile: str, mode: str, weights: str = trial.REAL) -> tuple[int, bool]:
        mine = [r for r in self.records if r.get("profile") == profile and r.get("mode") == mode
                and trial.weights_of(r) == weights]  # fmt: skip
        n = sum(1 for r in mine if r.get("type") == "measurement")
        failed = any(r.get("type") == "failure" for r in mine)
        return n, failed

    def _record(self, rec: dict[str, Any]) -> None:
        rec.setdefault("measured_at", time.time())
        append_record(self.results, rec)
        self.records.append(rec)

    # -- progress
    def _label(self, phase: str = "") -> str:
        return f"[{self.done}/{self.total}{' ' + phase if phase else ''}]"

    def _count(self, done: int = 0, dropped: int = 0) -> None:
        """`done` measurements taken (or found on file), `dropped` no longer planned."""
        self.done += done
        self.total = max(self.done, self.total - dropped)
        self.on_progress(self.done, self.total)

    # -- one (profile, mode)
    def measure(self, profile: str, mode: str, phase: str = "", weights: str = trial.REAL) -> None:
        """Switch to (profile, mode) and take the missing repeats; every one of the profile's
        `repeats` slots ends counted: measured, on file, or dropped (failed)."""
        have, failed = self._done(profile, mode, weights)
        have = min(have, self.cfg.repeats)
        self._count(done=have)
        taken = self._measure(profile, mode, phase, weights, have, failed)
        self._count(dropped=self.cfg.repeats - have - taken)

    def _measure(
        self, profile: str, mode: str, phase: str, weights: str, have: int, failed: bool
    ) -> int:
        """The missing repeats of one (profile, mode); returns how many were taken."""
        taken = 0
        index = self._label(phase)
        tag = f"{profile}/{mode}" + (" [trial: dummy weights]" if weights == trial.DUMMY else "")
        if failed or have >= self.cfg.repeats:
            why = "failed earlier" if failed else f"{have} measurement(s) on file"
            self.emit(f"{index} {tag}: skipped ({why})")
            return taken
        self.emit(f"{index} {tag}: switching ...")
        t0 = time.monotonic()
        res = self._switch(profile, mode, weights)
        got = res.get("weights")
        if res.get("result") == "unchanged":  # it already served exactly this: as good as ok
            res = dict(res, result="ok")
        if res.get("result") == "ok" and got is not None and got != weights:
            res = dict(res, result="failed", reason="wrong_weights", message=(
                f"asked for {weights} weights, the daemon serves {got} weights (its [server] "
                "load_format decides when a switch names none)"))  # fmt: skip
        if res.get("result") != "ok":
            reason, message = res.get("reason") or res.get("result"), res.get("message") or ""
            self._record({"type": "failure", "profile": profile, "mode": mode, "stage": "switch",
                          "reason": reason, "message": message, "result": res.get("result"),
                          "weights": weights,
                          "daemon": {k: res.get(k) for k in ("id", "duration_s", "line",
                                                             "serving")}})  # fmt: skip
            said = f"{reason}: {message}" if reason not in message else message  # once
            self.emit(f"{index} {tag}: FAILED ({said.strip()})")
            return taken
        load_s = time.monotonic() - t0
        self._record({"type": "switch", "profile": profile, "mode": mode, "weights": weights,
                      "seconds": load_s, "engine_ready_s": res.get("engine_ready_s")})  # fmt: skip
        self.emit(f"{index} {tag}: ready in {res.get('duration_s', 0):.1f} s")
        url = self._engine_url()
        served = self._serving()
        for rep in range(have, self.cfg.repeats):
            bcfg = replace(
                self.cfg.bench, url=url, warmup=self.cfg.bench.warmup if rep == have else 0
            )
            t0 = time.monotonic()
            try:
                result = run_bench(bcfg, self.on_bench_progress)
            except BenchError as exc:
                if self._serving() != served:  # it failed because the server went away
                    self._spoiled(profile, mode, phase, tag, weights, rep, served)
                    return taken
                self._record({"type": "failure", "profile": profile, "mode": mode,
                              "stage": "bench", "reason": "bench_failed", "message": str(exc),
                              "repeat": rep, "weights": weights})  # fmt: skip
                self.emit(f"{self._label(phase)} {tag}: bench failed ({exc})")
                return taken
            if self._serving() != served:  # another client switched or restarted it under it
                self._spoiled(profile, mode, phase, tag, weights, rep, served)
                return taken
            if result.weights is not None and result.weights != weights:
                msg = f"asked for {weights} weights, the server reports {result.weights} weights"
                self._record({"type": "failure", "profile": profile, "mode": mode,
                              "stage": "bench", "reason": "wrong_weights", "message": msg,
                              "repeat": rep, "weights": weights})  # fmt: skip
                self.emit(f"{self._label(phase)} {tag}: {msg}")
                return taken
            rec = {"type": "measurement", "profile": profile, "mode": mode, "repeat": rep}
            rec.update({k: v for k, v in result.to_dict().items() if k not in ("config", "source")})
            rec["weights"] = weights
            if mode in SPEC_MODES:  # SGLang may have forced the accept length (its env)
                eng = self._status().get("engine") or {}
                rec["acceptance_source"] = eng.get("acceptance_source")
            rec["tokens_per_second"] = rec.pop("output_tokens_per_second")
            rec["wall_s"] = time.monotonic() - t0
            self._record(rec)
            taken += 1
            self._count(done=1)
            self.emit(f"{self._label(phase)} {tag}: run {rep + 1}/{self.cfg.repeats} "
                      f"{result.output_tokens_per_second:.1f} tok/s")  # fmt: skip
        if self.cfg.traces and (weights == trial.DUMMY or self.cfg.real_traces):
            self._capture_trace(profile, mode, url, self._label(phase), weights)
        return taken

    def _spoiled(
        self,
        profile: str,
        mode: str,
        phase: str,
        tag: str,
        weights: str,
        rep: int,
        served: tuple[Any, ...],
    ) -> None:
        """Another client switched or restarted the server during run `rep`: the run (what
        it measured is not `profile`/`mode`, or not only) is dropped, and said so."""
        now = self._serving()
        if now[6]:
            what = f"began a {now[6][0]} to {now[6][1]}/{now[6][2]}"
        elif now[:2] != served[:2]:
            what = f"switched to {now[0]}/{now[1]}"
        else:
            what = f"restarted its engine (state {now[5]})"
        msg = (
            f"the daemon {what} during run {rep + 1} (another client's operation): "
            f"the run is dropped and {profile}/{mode} is not measured further"
        )
        self._record({"type": "failure", "profile": profile, "mode": mode, "stage": "bench",
                      "reason": "served_changed", "message": msg, "repeat": rep,
                      "weights": weights})  # fmt: skip
        self.emit(f"{self._label(phase)} {tag}: {msg}")

    def _capture_trace(
        self, profile: str, mode: str, url: str, index: str, weights: str = trial.DUMMY
    ) -> None:
        """A profile window (POST /v1/trace/capture) under load: step/verify time and
        all-reduces per step. Baseline windows have no verify pass: their DECODE steps are
        analysed from the window's files when this host can read them."""
        from fastverify.experiments.common.daemon_ops import capture_under_load

        steps = self.cfg.trace_steps
        load = replace(self.cfg.bench, url=url)
        analysis, error, wall_s = capture_under_load(self.client, load, steps, self.emit)
        if mode == "baseline" and isinstance(analysis, dict) and analysis.get("window"):
            analysis = _decode_analysis(analysis) or analysis
        figures = trial.trace_figures(analysis) if isinstance(analysis, dict) else None
        rec: dict[str, Any] = {"type": "trace", "profile": profile, "mode": mode,
                               "weights": weights, "steps": steps,
                               "wall_s": wall_s, "figures": figures}  # fmt: skip
        if figures is None:
            rec["error"] = error or "the profile window had no step to analyse"
            self.warnings.append(f"no trace for {profile}/{mode}: {rec['error']}")
            self.emit(f"{index} {profile}/{mode}: no trace: {rec['error']}")
        self._record(rec)
        if figures:
            self.emit(f"{index} {profile}/{mode}: trace {figures['span']} "
                      f"{_fmt_ms(figures['step_ms_p50'])} ms/step, "
                      f"{figures['allreduce_per_step'] or 0:.0f} all-reduces "
                      f"({_fmt_ms(figures['allreduce_ms_per_step'])} ms)")  # fmt: skip

    def _post_baselines(self, rows: list[dict[str, Any]]) -> list[str]:
        """Record each real-weights baseline row (and the same profile's real EAGLE-3
        accept length, when measured) with the daemon. Trial rows are never posted."""
        from fastverify.client import ApiError

        accept = {r["profile"]: r.get("accept_length_mean") for r in rows
                  if r["mode"] == "eagle3" and r["status"] == "ok"
                  and r.get("weights", trial.REAL) == trial.REAL}  # fmt: skip
        posted = []
        for r in rows:
            if r["mode"] != "baseline" or r["status"] != "ok":
                continue
            if r.get("weights", trial.REAL) != trial.REAL:
                continue
            per_request = r.get("per_request_tokens_per_second_mean")
            if not per_request:
                self.warnings.append(
                    f"the baseline of {r['profile']} was not recorded: no request completed "
                    "inside a measurement window, so there is no per-request rate to compare "
                    "EAGLE-3 with (use a longer --duration or a shorter --output-len)"
                )
                continue
            body = {
                "profile": r["profile"],
                "tokens_per_second": r["tokens_per_second_mean"],
                "per_request_tokens_per_second": per_request,
                "concurrency": self.cfg.bench.concurrency,  # verdicts match on it
                "measured_at": time.time(),
            }
            if accept.get(r["profile"]):
                body["accept_length"] = accept[r["profile"]]
            try:
                self.client.record_baseline(**body)
                posted.append(r["profile"])
            except (ApiError, OSError) as exc:
                self.warnings.append(f"could not record the baseline of {r['profile']}: {exc}")
        return posted

    def check_names(self) -> None:
        """Ask the daemon to resolve every profile before the first switch (a read-only call:
        `GET /v1/server/argv`); SweepError naming every one it refuses, so a typo in the last
        name is found before an hour of measurements, not after."""
        from fastverify.client import ApiError

        bad: list[str] = []
        for name in self.cfg.profiles:
            try:
                self.client.server_argv(profile=name, mode=self.cfg.mode)
            except ApiError as exc:
                if exc.status not in (400, 404, 422):
                    raise
                bad.append(f"  {name}: {exc.body.get('error') or exc}")
        if bad:
            raise SweepError(
                f"{len(bad)} of {len(self.cfg.profiles)} profile(s) cannot be used; nothing "
                "was switched or measured:\n" + "\n".join(bad)
            )

    def _rows(self, weights: str, keep: Any = None) -> list[dict[str, Any]]:
        """summarize() over one kind of weights; `keep(record)` narrows the records."""
        recs = trial.split_by_weights(self.records, weights)
        if keep is not None:
            recs = [r for r in recs if r.get("type") == "sweep" or keep(r)]
        reference = self.cfg.reference
        if reference and not any(r.get("profile") == reference for r in recs):
            reference = None
        rows = summarize(recs, reference, self.cfg.alpha)
        for r in rows:
            r["weights"] = weights
        return rows

    def run(self) -> dict[str, Any]:
        """The sweep, holding the daemon's lease (another client's switch gets 409)."""
        from fastverify.experiments.common.lease import LeaseRefused, hold

        cfg = self.cfg
        what = (f"{len(cfg.profiles)} profile(s) x {cfg.repeats} run(s)"
                + (f", then EAGLE-3 for {cfg.then_eagle3}" if cfg.then_eagle3 else "")
                + f" -> {cfg.output_dir}")  # fmt: skip
        self.check_names()  # a misspelt profile is a usage error whoever holds the daemon
        try:
            with hold(self.client, "sweep", what) as client:
                self.client = client
                return self._run()
        except LeaseRefused as exc:
            raise SweepBusy(f"{exc}; nothing was switched or measured") from None

    def _run(self) -> dict[str, Any]:
        cfg = self.cfg
        status = self._status()  # DaemonUnavailable propagates: nothing to do without it
        self.engine = (status.get("engine") or {}).get("identity")  # who measured it
        out_dir = Path(cfg.output_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        existing = load_records(self.results)
        if existing and not cfg.resume:
            raise SweepError(
                f"{self.results} already holds {len(existing)} record(s): pass --resume to "
                "continue that sweep, or choose another --output"
            )
        self.records = existing
        self._check_resumed_config(existing)
        original = (status.get("profile"), status.get("mode"))
        self._original_trial = bool(status.get("trial"))
        self._record({"type": "sweep", "started_at": time.time(), "config": cfg.describe(),
                      "resumed": bool(existing), "engine": self.engine})  # fmt: skip

        weights = trial.DUMMY if cfg.trial else trial.REAL
        if cfg.trial:
            self.emit("trial: dummy weights (--load-format dummy); timings are real, accept "
                      "lengths are not")  # fmt: skip
        plan = [(p, cfg.mode) for p in cfg.profiles]
        self.on_progress(self.done, self.total)
        for p, m in plan:
            self.measure(p, m, "", weights)
        rows = self._rows(weights)
        posted = self._post_baselines(rows) if cfg.mode == "baseline" and not cfg.trial else []

        if cfg.then_eagle3:
            ranked = sorted(
                (r for r in rows if r["mode"] == "baseline" and r["status"] == "ok"
                 and r["profile"] in cfg.profiles),
                key=lambda r: -r["tokens_per_second_mean"],
            )[: cfg.then_eagle3]  # fmt: skip
            self._count(dropped=(cfg.then_eagle3 - len(ranked)) * cfg.repeats)
            self.emit(f"{self._label()} EAGLE-3 phase: "
                      f"{', '.join(r['profile'] for r in ranked) or 'nothing'}")  # fmt: skip
            for r in ranked:
                self.measure(r["profile"], "eagle3", "eagle3", weights)
            rows = self._rows(weights)
            if not cfg.trial and cfg.mode == "baseline":
                posted = self._post_baselines(rows)  # now with the real accept lengths

        swept = {(p, m) for p, m in plan} | {
            (r["profile"], "eagle3") for r in rows if r["mode"] == "eagle3"
        }
        rows = [r for r in rows if (r["profile"], r["mode"]) in swept]
        confirmed: list[dict[str, Any]] = []
        if cfg.trial:
            rows = self._trial_rows(rows)
            if cfg.then_confirm:
                confirmed = self._confirm(rows)
                posted = self._post_baselines(confirmed) if cfg.mode == "baseline" else []
        if cfg.trial:  # a trial's winner is a timing winner: among the rows it ranked truthfully
            pool = confirmed or [r for r in rows if r["mode"] == cfg.mode]
            best = best_row(pool) if cfg.mode == "baseline" or confirmed else None
        else:
            best = best_row(rows)
        final = self._finish(best, original)
        all_rows = rows + confirmed
        plot_path = plot_skipped = None
        if cfg.plot and all_rows:
            from fastverify.experiments.common.plots import missing_note

            if plot_skipped := missing_note():
                self.warnings.append(plot_skipped)
            else:
                plot_path = str(
                    plot(
                        all_rows,
                        out_dir / PLOT_FILE,
                        title=f"sweep ({cfg.bench.concurrency} client(s))"
                        + (" - trial on dummy weights" if cfg.trial else ""),
                    )
                )
        out = {
            "results": all_rows,
            "best": None if best is None else {k: best.get(k) for k in
                                               ("profile", "mode", "tokens_per_second_mean",
                                                "weights")},
            "baselines_posted": posted,
            "final": final,
            "output_dir": str(out_dir),
            "results_file": str(self.results),
            "plot": plot_path,
            "plot_skipped": plot_skipped,
            "warnings": self.warnings,
            "engine": self.engine,
        }  # fmt: skip
        if cfg.trial:
            out["trial"] = True
            out["confirmed"] = [r["profile"] for r in confirmed]
            out["timing"] = trial.timing(self.records)
        return out

    def _trial_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Dummy-weights rows with their trace figures and the real-accept-length verdicts."""
        from fastverify.client import ApiError

        try:
            recorded = self.client.baselines() or {}
        except (ApiError, OSError) as exc:
            recorded = {}
            self.warnings.append(f"could not read the recorded baselines: {exc}")
        traces = {(r["profile"], r["mode"]): r["figures"] for r in self.records
                  if r.get("type") == "trace" and r.get("figures")}  # fmt: skip
        lost = {(r["profile"], r["mode"]): r["error"] for r in self.records
                if r.get("type") == "trace" and r.get("error")}  # fmt: skip
        rows = trial.annotate(
            rows, traces, lambda p: trial.reference_accept_length(self.cfg.accept_length,
                                                                  recorded, p), recorded
        )  # fmt: skip
        for r in rows:  # a window that failed (timed out) says so in the row
            if (r["profile"], r["mode"]) in lost and (r["profile"], r["mode"]) not in traces:
                r["trace_error"] = lost[(r["profile"], r["mode"])]
        eagle = [r for r in rows if r["mode"] == "eagle3" and r["status"] == "ok"]
        if eagle and not any(r.get("accept_length_reference") for r in eagle):
            self.warnings.append(
                "no real accept length to judge the trial's break-even accept lengths by: pass "
                "--accept-length A, or record one with a real-weights sweep's --then-eagle3"
            )
        return rows

    def _confirm(self, trial_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Reload the trial's best `then_confirm` profiles with real weights and measure them
        as a normal sweep does (own rows, CI95, Welch against the best)."""
        cfg = self.cfg
        ranked = sorted(
            (r for r in trial_rows if r["mode"] == cfg.mode and r["status"] == "ok"),
            key=lambda r: -r["tokens_per_second_mean"],
        )[: cfg.then_confirm]  # fmt: skip
        names = [r["profile"] for r in ranked]
        self._count(dropped=(cfg.then_confirm - len(names)) * cfg.repeats)
        self.emit(f"{self._label()} confirm with real weights: {', '.join(names) or 'nothing'}")
        for name in names:
            self.measure(name, cfg.mode, "confirm", trial.REAL)
        rows = self._rows(trial.REAL, keep=lambda r: r.get("profile") in names
                          and r.get("mode") == cfg.mode)  # fmt: skip
        trial_rank = {r["profile"]: r.get("rank") for r in ranked}
        for r in rows:
            r["confirmed"] = True
            r["trial_rank"] = trial_rank.get(r["profile"])
        return rows

    def _check_resumed_config(self, existing: list[dict[str, Any]]) -> None:
        """Warn when a resumed sweep measures differently from the one it continues."""
        headers = [r for r in existing if r.get("type") == "sweep"]
        if not headers:
            return
        before = (headers[-1].get("config") or {}).get("bench") or {}
        now = asdict(self.cfg.bench)
        keys = ("concurrency", "duration", "requests", "input_len", "output_len", "seed")
        changed = [f"{k} {before[k]} -> {now[k]}" for k in keys
                   if k in before and before[k] != now[k]]  # fmt: skip
        if changed:
            msg = ("resumed with different bench settings (" + ", ".join(changed)
                   + "): old and new measurements are not comparable")  # fmt: skip
            self.warnings.append(msg)
            self.emit(f"warning: {msg}")

    def _finish(self, best: dict[str, Any] | None, original: tuple[Any, Any]) -> dict[str, Any]:
        """--apply-best: switch to the winner; else restore what was active before."""
        if self.cfg.apply_best and best is not None:
            target, why = (best["profile"], best["mode"]), "applied best"
        elif not self.cfg.restore:  # the caller decides what serves next (no extra load)
            return {"action": "none"}
        elif original[0]:
            target, why = original, "restored"
        else:
            return {"action": "none"}
        # The winner is put in place with real weights; a restore puts back what ran before
        # (a trial server only if the sweep started on one).
        weights = trial.DUMMY if why == "restored" and self._original_trial else trial.REAL
        status = self._status()
        now = trial.DUMMY if status.get("trial") else trial.REAL
        if (status.get("profile"), status.get("mode")) == target and now == weights:
            return {"action": why, "profile": target[0], "mode": target[1], "switched": False,
                    "weights": weights}  # fmt: skip
        self.emit(f"{why}: {target[0]}/{target[1]} ({weights} weights) ...")
        res = self._switch(target[0], target[1], weights)
        out = {"action": why, "profile": target[0], "mode": target[1], "switched": True,
               "result": res.get("result"), "weights": weights}  # fmt: skip
        if res.get("result") != "ok":
            self.warnings.append(f"{why} {target[0]}/{target[1]} failed: {res.get('message')}")
        return out
