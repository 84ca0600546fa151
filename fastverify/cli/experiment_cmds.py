"""`fastverifyctl bench`, `sweep` and `preflight`: measurement commands.

Imports stay light: the experiment modules are imported inside each command, httpx only
inside the bench run, rich only for progress bars/tables on a terminal, matplotlib only
when the sweep draws its plot, and torch never (preflight's rank workers import it in
their own processes).

Exit codes: 0 ok; 1 a measurement or check failed (a profile failed preflight, a sweep
had failures, every bench request failed, a bench window completed no request); 2 usage;
3 daemon unreachable;
6 a missing optional dependency (torch for preflight, sglang for --use-sglang-bench);
130 interrupted (Ctrl-C; a sweep keeps what it measured, preflight stops its ranks).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from fastverify.cli.daemon_call import client_for, socket_option
from fastverify.cli.options import env_pairs, measurement_options
from fastverify.cli.output import (
    EXIT_BUSY,
    EXIT_INTERRUPTED,
    EXIT_MISSING_DEPENDENCY,
    EXIT_PROBLEMS,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    emit_json,
    fail,
    table,
)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _int_list(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        raise click.BadParameter(
            f"{what}: expected comma-separated integers, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise click.BadParameter(f"{what}: expected positive integers, got {text!r}")
    return values


class _Progress:
    """A rich progress bar on a terminal, plain lines on stderr otherwise (or nothing)."""

    def __init__(
        self,
        description: str,
        total: float | None,
        enabled: bool = True,
        unit: str = "",
        plain_lines: bool = True,
    ):
        self.description = description
        self.unit = unit
        self.total = total
        self.enabled = enabled
        self.plain_lines = plain_lines  # False: piped, the notes alone tell the progress
        self.tty = enabled and sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None
        self._last_line = 0.0

    def __enter__(self) -> _Progress:
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.description, total=self.total, info="")
        return self

    def update(self, completed: float, info: str = "", total: float | None = None) -> None:
        if not self.enabled:
            return
        if total is not None:
            self.total = total
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, info=info, total=self.total)
            return
        if not self.plain_lines:
            return
        now = time.monotonic()
        if now - self._last_line >= 5.0:
            self._last_line = now
            total = f"/{self.total:g}" if self.total else ""
            line = f"{self.description}: {completed:.0f}{total} {self.unit} {info}"
            click.echo(" ".join(line.split()), err=True)

    def note(self, line: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.console.print(line, highlight=False, markup=False)
        else:
            click.echo(line, err=True)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


# ----------------------------------------------------------------------------- bench


def _bench_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    ttft, itl = result["ttft_ms"], result["itl_ms"]
    return [
        ("output tok/s", _fmt(result["output_tokens_per_second"])),
        ("per-request tok/s", _fmt(result["per_request_tokens_per_second"])),
        ("requests/s", _fmt(result["request_rate"], 2)),
        ("completed / failed", f"{result['completed']} / {result['failed']}"),
        ("TTFT p50/p90/p99 ms", " / ".join(_fmt(ttft[k]) for k in ("p50", "p90", "p99"))),
        ("ITL p50/p90/p99 ms", " / ".join(_fmt(itl[k], 2) for k in ("p50", "p90", "p99"))),
        ("accept length", _fmt(result["accept_length"], 2)
         + (" (dummy weights: not a real accept length)"
            if result.get("weights") == "dummy" and result["accept_length"] else "")),
        *_acceptance_rows(result),
        ("window s", _fmt(result["duration_s"], 1)),
        ("weights", {"dummy": "dummy (trial)", "real": "real"}.get(result.get("weights") or "",
                                                                   "not reported")),
        ("source", result["source"]),
    ]  # fmt: skip


def _acceptance_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The summed accepted-drafts histogram and the accept curve it gives (EAGLE servers)."""
    hist = result.get("accept_histogram")
    if not hist:
        return []
    total = sum(hist) or 1
    rows = [("accepted drafts 0..K", " ".join(f"{j}:{100 * n / total:.0f}%"
                                             for j, n in enumerate(hist))
             + f" ({total} verify passes)")]  # fmt: skip
    curve = result.get("accept_curve")
    if curve:
        dummy = " (dummy weights: not real)" if result.get("weights") == "dummy" else ""
        rows.append(("accept length at k steps",
                     "  ".join(f"{k}:{v:.2f}" for k, v in curve.items()) + dummy))  # fmt: skip
    return rows


def _server_url(ctx: click.Context, url: str | None) -> str:
    if url:
        return url
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        status = client_for(ctx).get("/v1/status")
    except DaemonUnavailable as exc:
        fail(f"{exc}\n(or pass --url http://HOST:PORT of the server)", EXIT_UNAVAILABLE)
    except ApiError as exc:
        fail(f"daemon: {exc}", EXIT_PROBLEMS)
    engine_url = (status.get("engine") or {}).get("url")
    if not engine_url:
        fail(f"the daemon reports no serving engine (state {status.get('state')}); pass --url")
    return engine_url


@click.command()
@click.option("--url", default=None, help="Server base URL (default: the daemon's engine URL).")
@click.option("--concurrency", "-c", default=1, show_default=True, type=click.IntRange(1))
@click.option(
    "--duration",
    "-d",
    default=None,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds to measure (default 30 unless --requests is given).",
)
@click.option(
    "--requests",
    "-n",
    "n_requests",
    default=None,
    type=click.IntRange(1),
    help="Number of requests instead of a duration.",
)
@click.option("--input-len", default=128, show_default=True, type=click.IntRange(1))
@click.option("--output-len", default=256, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--warmup",
    default=1,
    show_default=True,
    type=click.IntRange(0),
    help="Warm-up requests per client, discarded.",
)
@click.option(
    "--use-sglang-bench",
    is_flag=True,
    help="Run python -m sglang.bench_serving (needs sglang) and read its JSONL.",
)
@click.option(
    "--load-format",
    type=click.Choice(["auto", "dummy"]),
    default="auto",
    show_default=True,
    help="dummy: a timing trial. Through the daemon, the active profile is restarted with "
    "random weights first (unless it already runs so); with --url the server must report "
    "load_format dummy.",
)
@click.option(
    "--record-baseline",
    is_flag=True,
    help="Through the daemon, on a baseline-mode server with real weights: record the result "
    "as the active profile's baseline at this --concurrency (POST /v1/baselines), which the "
    "exporter's break-even and speedup gauges compare EAGLE-3 with at that concurrency.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@socket_option
@click.pass_context
def bench(
    ctx: click.Context,
    url: str | None,
    concurrency: int,
    duration: float | None,
    n_requests: int | None,
    input_len: int,
    output_len: int,
    seed: int,
    warmup: int,
    use_sglang_bench: bool,
    load_format: str,
    record_baseline: bool,
    as_json: bool,
) -> None:
    """Closed-loop load against the running server: tok/s, TTFT, ITL, accept length."""
    from fastverify.experiments.bench.load import (
        BenchConfig,
        BenchError,
        run_bench,
        run_sglang_bench,
    )

    if duration is None and n_requests is None:
        duration = 30.0
    if record_baseline and (url or load_format == "dummy"):
        fail("bench --record-baseline: records through the daemon, for the profile it serves "
             "with real weights (drop --url / --load-format dummy)", EXIT_USAGE)  # fmt: skip
    active = _baseline_target(ctx) if record_baseline else None
    trial_left = _ensure_trial_engine(ctx) if load_format == "dummy" and not url else None
    cfg = BenchConfig(
        url=_server_url(ctx, url), concurrency=concurrency, duration=duration,
        requests=n_requests, input_len=input_len, output_len=output_len, seed=seed,
        warmup=warmup,
    )  # fmt: skip
    try:
        cfg.validate()
        if use_sglang_bench:
            if n_requests is None:
                fail("--use-sglang-bench needs --requests (sglang.bench_serving has no "
                     "duration)", EXIT_USAGE)  # fmt: skip
            click.echo(f"running sglang.bench_serving against {cfg.url} ...", err=True)
            result = run_sglang_bench(cfg)
        else:
            total = n_requests if n_requests else duration
            what = "requests" if n_requests else "seconds"
            with _Progress(f"bench {cfg.url}", total, unit=what) as bar:

                def progress(done: int, elapsed: float) -> None:
                    bar.update(
                        done if n_requests else min(elapsed, duration or 0.0),
                        f"({done} requests done)" if not n_requests else "",
                    )

                bar.note(
                    f"bench: {concurrency} client(s), {total:g} {what}, "
                    f"input {input_len} / output {output_len} tokens"
                )
                result = run_bench(cfg, progress, lambda line: bar.note(f"bench: {line}"))
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        fail("bench: interrupted", EXIT_INTERRUPTED)
    except BenchError as exc:
        code = EXIT_MISSING_DEPENDENCY if "not installed" in str(exc) else EXIT_PROBLEMS
        fail(f"bench: {exc}", code)
    data = result.to_dict()
    if load_format == "dummy" and data.get("weights") != "dummy":
        fail(f"bench: --load-format dummy, but the server at {cfg.url} does not report "
             f"load_format dummy (weights: {data.get('weights') or 'not reported'}); start it "
             "with --load-format dummy, or use the daemon (fastverifyctl profile set --trial)",
             EXIT_PROBLEMS)  # fmt: skip
    if as_json:
        emit_json(data)
    else:
        trial = " [trial: dummy weights]" if data.get("weights") == "dummy" else ""
        table(("metric", "value"), _bench_rows(data), title=f"bench {cfg.url}{trial}")
    if trial_left:
        click.echo(trial_left_note(trial_left), err=True)
    if data.get("incomplete"):  # a measurement without its per-request rate is a failed one
        fail(f"bench: {data['incomplete']}", EXIT_PROBLEMS)
    if active is not None:
        _record_baseline(ctx, active, data, concurrency)
    if not url and data.get("accept_histogram"):
        _record_acceptance(ctx, data)


def _record_acceptance(ctx: click.Context, data: dict[str, Any]) -> None:
    """Through the daemon, an EAGLE-3 server's summed histogram is kept with the profile, mode
    and steps it serves (`fastverifyctl spec plan` reads it); a refusal is a note, the
    measurement stands."""
    from fastverify.client import ApiError, ControlClient, DaemonUnavailable

    body = {"histogram": data["accept_histogram"]}
    try:
        rec = ControlClient(ctx.obj.get("socket") if ctx.obj else None).post("/v1/acceptance", body)
    except (DaemonUnavailable, ApiError) as exc:
        err = getattr(exc, "body", {}).get("error") if isinstance(exc, ApiError) else None
        click.echo(f"bench: acceptance not recorded: {err or exc}", err=True)
        return
    usable = "" if rec.get("usable") else f" (not usable: {rec.get('why_not_usable')})"
    click.echo(f"bench: acceptance recorded for {rec['profile']}/{rec['mode']} at "
               f"{rec['steps']} steps, {rec['weights']} weights{usable}", err=True)  # fmt: skip


def _baseline_target(ctx: click.Context) -> str:
    """The profile a --record-baseline run measures: the daemon's, in baseline mode with real
    weights (checked before the load, so nothing is measured for nothing)."""
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        status = client_for(ctx).get("/v1/status")
    except DaemonUnavailable as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    except ApiError as exc:
        fail(f"daemon: {exc}", EXIT_PROBLEMS)
    if status.get("mode") != "baseline" or status.get("trial") or not status.get("profile"):
        fail(f"bench --record-baseline: the daemon serves {status.get('profile')}/"
             f"{status.get('mode')}{' (trial, dummy weights)' if status.get('trial') else ''};"
             " a baseline is measured in baseline mode with real weights "
             "(fastverifyctl mode set baseline)", EXIT_USAGE)  # fmt: skip
    return str(status["profile"])


def _record_baseline(
    ctx: click.Context, profile: str, data: dict[str, Any], concurrency: int
) -> None:
    from fastverify.client import ApiError, DaemonUnavailable

    body = {"profile": profile, "concurrency": concurrency,
            "tokens_per_second": data["output_tokens_per_second"],
            "per_request_tokens_per_second": data["per_request_tokens_per_second"]}  # fmt: skip
    try:
        client_for(ctx).post("/v1/baselines", body)
    except DaemonUnavailable as exc:
        fail(f"bench: the baseline was not recorded: {exc}", EXIT_UNAVAILABLE)
    except ApiError as exc:
        fail(f"bench: the baseline was not recorded: {exc.body.get('error') or exc}",
             EXIT_PROBLEMS)  # fmt: skip
    click.echo(f"bench: recorded as the baseline of {profile} at {concurrency} concurrent "
               f"request(s) ({data['per_request_tokens_per_second']:.1f} tok/s per request)",
               err=True)  # fmt: skip


def trial_left_note(status: dict[str, Any]) -> str:
    """What `bench --load-format dummy` leaves behind in the daemon, and the way back."""
    what = f"{status.get('profile')}/{status.get('mode')}"
    return (
        f"note: the daemon is left serving {what} on dummy weights (a trial: random output, "
        f"timings only); `fastverifyctl profile set {status.get('profile')}` loads the real "
        "weights again"
    )


def _ensure_trial_engine(ctx: click.Context) -> dict[str, Any]:
    """bench --load-format dummy through the daemon: restart the active profile/mode with
    dummy weights unless the daemon already serves a trial; returns the daemon's status."""
    from fastverify.client import ApiError, DaemonUnavailable

    client = client_for(ctx, timeout=1800)
    try:
        status = client.get("/v1/status")
        if status.get("trial"):
            return status
        if not status.get("profile"):
            fail("bench --load-format dummy: the daemon has no active profile to restart")
        click.echo(f"restarting {status['profile']}/{status['mode']} with dummy weights "
                   "(trial) ...", err=True)  # fmt: skip
        body = {"name": status["profile"], "mode": status["mode"], "wait": True,
                "load_format": "dummy"}  # fmt: skip
        client.post("/v1/profile", body, timeout=1800)
        return status
    except DaemonUnavailable as exc:
        fail(f"{exc}\n(or pass --url of a server started with --load-format dummy)",
             EXIT_UNAVAILABLE)  # fmt: skip
    except ApiError as exc:
        fail(f"bench: the trial restart failed: {exc.body.get('message') or exc}", EXIT_PROBLEMS)


# ----------------------------------------------------------------------------- preflight


def _print_preflight(report: dict[str, Any]) -> None:
    for prof in report["profiles"]:
        rows = []
        for s in prof["sizes"]:
            e, g = s["eager"], s["graph"]
            graph_state = g["capture"] if g["capture"] != "ok" else f"ok/{g['replay']}"
            eb, gb = e.get("batch") or {}, g.get("batch") or {}
            rows.append((
                _fmt(s["tokens"]), s["bytes"], _fmt(e.get("p50_us")), _fmt(e.get("p99_us")),
                _fmt(eb.get("per_op_mean_us")), _fmt(eb.get("busbw_gbs"), 2), graph_state,
                _fmt(g.get("p50_us")), _fmt(gb.get("per_op_p50_us")),
                "PCIe-IPC" if s.get("backend") == "pcie_ipc"
                else f"{s['nccl_algo'] or '-'}/{s['nccl_proto'] or '-'}",
                "yes" if s["correct"] else "NO",
            ))  # fmt: skip
        title = f"{prof['profile']}: {prof['status']} ({prof['wall_s']:.1f} s)"
        if not rows:
            click.echo(f"# {title}")
        else:
            table(("tokens", "bytes", "eager p50 us", "p99 us", "b2b us", "busbw GB/s", "graph",
                   "replay p50 us", "in-graph us", "algo/proto", "correct"), rows,
                  title=title)  # fmt: skip
        if prof.get("error") or prof.get("note"):
            click.echo(f"  {prof.get('error') or prof.get('note')}")
        not_run = prof.get("sizes_not_run")
        if not_run:
            sizes = not_run["tokens"] or not_run["sizes_bytes"]
            click.echo(f"  not run: {', '.join(map(str, sizes))} ({not_run['reason']})")
    summary = [
        (p["profile"], p["status"], _fmt(p["wall_s"]), _fmt(p.get("init_s"), 2),
         ", ".join(f"{k}={v}" for k, v in p["nccl"]["confirmed"].items()) or "-")
        for p in report["profiles"]
    ]  # fmt: skip
    if len(report["profiles"]) > 1 and report.get("winners"):
        table(
            ("tokens", "bytes", "fastest in-graph", "us", "x next", "fastest b2b", "us", "x next"),
            [
                (_fmt(w["tokens"]), w["bytes"], w.get("graph_winner") or "-",
                 _fmt((w.get("graph_us") or {}).get(w.get("graph_winner"))),
                 _fmt(w.get("graph_margin"), 2), w.get("eager_winner") or "-",
                 _fmt((w.get("eager_us") or {}).get(w.get("eager_winner"))),
                 _fmt(w.get("eager_margin"), 2))
                for w in report["winners"]
            ],
            title="fastest profile per message size",
        )  # fmt: skip
    table(
        ("profile", "verdict", "wall s", "init s", "NCCL confirmed"),
        summary,
        title=f"preflight: {report['world_size']} rank(s), {report['total_wall_s']:.1f} s total",
    )
    if report.get("label"):
        click.echo(f"label: {report['label']}")
    if report.get("note"):
        click.echo(f"note: {report['note']}")


@click.command()
@click.argument("profiles", nargs=-1)
@click.option(
    "--nproc",
    type=click.IntRange(1),
    default=None,
    help="Ranks (one per GPU). Default: every visible GPU.",
)
@click.option(
    "--share-gpu",
    is_flag=True,
    help="Allow more ranks than GPUs (rank r on GPU r mod GPUs): FlashInfer PCIe-IPC "
    "candidates run, NCCL ones are skipped (NCCL refuses two ranks on one GPU); the timings "
    "are same-GPU ranks, not a PCIe measurement.",
)
@click.option(
    "--hidden-size",
    default=7168,
    show_default=True,
    type=click.IntRange(1),
    help="The model's hidden size (7168 for DeepSeek-V3/Kimi-K2 class models).",
)
@click.option(
    "--tokens",
    default="1,2,3,4,8,16,32,64,128,512,2048,8192",
    show_default=True,
    help="Tokens per forward; message = hidden size x tokens x 2 bytes (decode/verify sizes "
    "1-64, prefill sizes 128-8192).",
)
@click.option("--sizes", default=None, help="Explicit message sizes in bytes instead of --tokens.")
@click.option(
    "--iters",
    default=50,
    show_default=True,
    type=click.IntRange(1),
    help="Timed all-reduces (and graph replays) per size.",
)
@click.option(
    "--warmup",
    default=5,
    show_default=True,
    type=click.IntRange(0),
    help="Untimed all-reduces per size first.",
)
@click.option(
    "--graph-ops",
    default=20,
    show_default=True,
    type=click.IntRange(0),
    help="All-reduces captured in one graph for the in-graph per-op time (0: skip).",
)
@click.option(
    "--timeout",
    "timeout_s",
    default=180.0,
    show_default=True,
    type=float,
    help="Seconds per profile before its ranks are killed.",
)
@click.option(
    "--env",
    "extra_env",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra variable on top of every profile (e.g. NCCL_NVLS_ENABLE=0).",
)
@click.option("--python", default="", help="Interpreter for the rank processes (needs torch).")
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="fastverifyd config whose [server] env / env_passthrough the ranks also get "
    "(default: the daemon's default config file, when it exists).",
)
@click.option(
    "--backend",
    type=click.Choice(["nccl", "gloo"]),
    default="nccl",
    hidden=True,
    help="gloo: CPU-only testing of the orchestration.",
)
@click.option(
    "--call",
    type=click.Choice(["pynccl", "torch"]),
    default="pynccl",
    show_default=True,
    help="How ranks call NCCL: pynccl = ncclAllReduce on the current stream, as SGLang "
    "0.5.23 does; torch = torch.distributed.all_reduce (adds its own stream hops).",
)
@click.option(
    "--logs",
    "logs_dir",
    default="",
    type=click.Path(file_okay=False),
    help="Keep per-rank JSON and NCCL debug logs in this directory.",
)
@click.option(
    "--output",
    "-o",
    "output",
    default=None,
    type=click.Path(dir_okay=False),
    help="Also write the JSON report to this file.",
)
@click.option(
    "--derive-tuner",
    "derive_tuner",
    default=None,
    metavar="NAME",
    help="Measure every algorithm/protocol per size and write NAME.tuner.csv + NAME.env "
    "(a tuner profile; see docs/tuner.md). PROFILES: at most one, the base (nccl-default).",
)
@click.option(
    "--tuner-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="With --derive-tuner: where to write (default: the user profile dir).",
)
@click.option("--fresh", is_flag=True, help="With --derive-tuner: ignore saved measurements.")
@click.option("--fake-costs", default="", hidden=True, help="gloo testing only.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def preflight(
    profiles: tuple[str, ...],
    nproc: int | None,
    share_gpu: bool,
    hidden_size: int,
    tokens: str,
    sizes: str | None,
    iters: int,
    warmup: int,
    graph_ops: int,
    timeout_s: float,
    extra_env: tuple[str, ...],
    python: str,
    config_path: str | None,
    backend: str,
    call: str,
    logs_dir: str,
    output: str | None,
    derive_tuner: str | None,
    tuner_dir: str | None,
    fresh: bool,
    fake_costs: str,
    as_json: bool,
) -> None:
    """NCCL all-reduce + CUDA-graph check per profile on the GPUs, without a model."""
    from fastverify.experiments.preflight import run as pf

    if derive_tuner is not None:
        _derive_tuner(derive_tuner, profiles, nproc, hidden_size, tokens, sizes, extra_env,
                      tuner_dir, fresh, backend, python, timeout_s, fake_costs, output,
                      as_json)  # fmt: skip
        return

    try:
        daemon_env = pf.daemon_extra_env(config_path)
    except pf.PreflightError as exc:
        fail(f"preflight: {exc}", EXIT_USAGE)
    cfg = pf.PreflightConfig(
        nproc=nproc, hidden_size=hidden_size, tokens=_int_list(tokens, "--tokens"),
        sizes_bytes=_int_list(sizes, "--sizes") if sizes else (), iters=iters, warmup=warmup,
        graph_ops=graph_ops, backend=backend, call=call, timeout_s=timeout_s, python=python,
        extra_env={**daemon_env, **env_pairs(extra_env)}, logs_dir=logs_dir, share_gpu=share_gpu,
    )  # fmt: skip
    try:
        loaded = pf.load_profiles(profiles)
        report = pf.run_preflight(loaded, cfg, on_event=lambda line: click.echo(line, err=True))
    except KeyboardInterrupt:
        fail("preflight: interrupted (every rank started was stopped)", EXIT_INTERRUPTED)
    except pf.TorchMissing as exc:
        fail(str(exc), EXIT_MISSING_DEPENDENCY)
    except pf.PreflightError as exc:  # no GPU for nccl, unknown profile: usage, as rehearse
        usage = isinstance(exc, pf.NoGpu) or "profile" in str(exc)
        fail(f"preflight: {exc}", EXIT_USAGE if usage else EXIT_PROBLEMS)
    if output:
        from fastverify.cli.output import to_json

        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(to_json(report) + "\n", encoding="utf-8")
    if as_json:
        emit_json(report)
    else:
        _print_preflight(report)
    # a skipped candidate (pcie-ipc without FlashInfer's PCIe-IPC here) is not a failure
    if any(p["status"] not in ("ok", "skipped") for p in report["profiles"]):
        sys.exit(EXIT_PROBLEMS)


def _derive_tuner(
    name: str, profiles: tuple[str, ...], nproc: int | None, hidden_size: int, tokens: str,
    sizes: str | None, extra_env: tuple[str, ...], tuner_dir: str | None, fresh: bool,
    backend: str, python: str, timeout_s: float, fake_costs: str, output: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """`preflight --derive-tuner NAME` (fastverify.experiments.derive_tuner.cmd)."""
    from fastverify.experiments.derive_tuner import cmd
    from fastverify.experiments.derive_tuner import derive as dt
    from fastverify.experiments.preflight import run as pf

    if len(profiles) > 1:
        fail("preflight --derive-tuner: give at most one base profile", EXIT_USAGE)
    ctx = click.get_current_context()
    if sizes:
        size_list = _int_list(sizes, "--sizes")
    elif ctx.get_parameter_source("tokens") == click.core.ParameterSource.DEFAULT:
        size_list = dt.sizes_from_tokens(dt.DEFAULT_TOKENS, hidden_size)
    else:
        size_list = dt.sizes_from_tokens(_int_list(tokens, "--tokens"), hidden_size)
    try:
        report, lines = cmd.run_cli(
            name, base=profiles[0] if profiles else "nccl-default", nproc=nproc,
            sizes=size_list, rounds=3, channels=dt.DEFAULT_CHANNELS,
            extra_env=env_pairs(extra_env), tuner_dir=tuner_dir, fresh=fresh,
            backend=backend, python=python, timeout_s=max(timeout_s, 300.0),
            fake_costs=fake_costs, echo=lambda line: click.echo(line, err=True),
        )  # fmt: skip
    except KeyboardInterrupt:
        fail("preflight: interrupted (every rank started was stopped; run again to resume)",
             EXIT_INTERRUPTED)  # fmt: skip
    except pf.TorchMissing as exc:
        fail(str(exc), EXIT_MISSING_DEPENDENCY)
    except pf.PreflightError as exc:
        fail(f"preflight: {exc}", EXIT_USAGE)
    except dt.DeriveError as exc:
        fail(f"preflight --derive-tuner: {exc}", EXIT_PROBLEMS)
    if output:
        from fastverify.cli.output import to_json

        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(to_json(report) + "\n", encoding="utf-8")
    if as_json:
        emit_json(report)
    else:
        click.echo("\n".join(lines))


# ----------------------------------------------------------------------------- sweep


def _sweep_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out = []
    order = sorted(
        rows,
        key=lambda r: (r.get("weights") == "real" and bool(r.get("confirmed")),
                       r["mode"] != "baseline", r["status"] != "ok", r.get("rank") or 0),
    )  # fmt: skip
    for r in order:
        ci = r.get("ci95")
        mode = r["mode"] + (" (trial)" if r.get("weights") == "dummy" else "")
        if r.get("confirmed"):
            mode += " (confirmed)"
        if r["status"] == "incomplete":  # cut short: its figures, never a rank or verdict
            out.append(("-", r["profile"], mode, _fmt(r.get("tokens_per_second_mean")),
                        "-" if not ci else f"{ci[0]:.1f}-{ci[1]:.1f}", _fmt(r.get("n")),
                        "-", "CUT SHORT", _fmt(r.get("accept_length_mean"), 2), "-", "-",
                        r.get("note") or ""))  # fmt: skip
            continue
        if r["status"] != "ok":
            out.append(("-", r["profile"], mode, "FAILED", "-", "-", "-", "-", "-", "-",
                        "-", r.get("reason") or "-"))  # fmt: skip
            continue
        sig = r.get("vs_reference") or "-"
        if r.get("vs_best") == "not significant":
            sig = f"{sig}, tied w/ best"
        own = "-"
        if r.get("real_speedup") is not None:
            own = f"x{r['real_speedup']:.2f} ({r.get('speedup_significance')})"
        out.append((
            _fmt(r.get("rank")), r["profile"], mode, _fmt(r.get("tokens_per_second_mean")),
            "-" if not ci else f"{ci[0]:.1f}-{ci[1]:.1f}", _fmt(r.get("n")),
            f"x{r['speedup_vs_reference']:.3f}", sig, _fmt(r.get("accept_length_mean"), 2),
            _fmt(r.get("break_even_accept_length"), 2), own, r.get("note") or "",
        ))  # fmt: skip
    return out


def verdict_note(rows: list[dict[str, Any]], repeats: int | None = None) -> str | None:
    """The line under the sweep table when a row has no verdict for want of runs; the advice
    is --repeats only when fewer were asked for (`repeats`: what this sweep asked)."""
    few = [r for r in rows if "too few runs" in
           (r.get("vs_reference"), r.get("vs_best"), r.get("speedup_significance"))]  # fmt: skip
    if not few:
        return None
    from fastverify.experiments.common.stats import MIN_RUNS

    least = min(r.get("n") or 0 for r in few)
    if repeats is not None and repeats >= MIN_RUNS:
        advice = f"{repeats} were asked for: runs failed or were cut short, see below"
    else:
        advice = f"pass --repeats {MIN_RUNS}"
    return (f"note: \"too few runs\": a faster/slower verdict needs at least {MIN_RUNS} runs "
            f"per side (here n={least}; {advice}); those rows are ranked by "
            "their mean alone")  # fmt: skip


def failure_line(r: dict[str, Any]) -> str:
    """`tree-ll/baseline failed: cuda_graph_capture; rolled back to ...`: what failed, once
    (the daemon's message often already names the profile and the reason)."""
    what = f"{r['profile']}/{r['mode']}"
    reason, message = str(r.get("reason") or ""), str(r.get("message") or "").strip()
    if message.startswith(f"{what} failed"):
        return message if reason in message else f"{message} ({reason})"
    head = f"{what} failed" + (f" ({reason})" if reason and reason not in message else "")
    return f"{head}: {message}" if message else head


def _trial_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What dummy weights measure truthfully, per trial row."""
    out = []
    for r in rows:
        if r.get("weights") != "dummy":
            continue
        t = r.get("trace") or {}
        if r["status"] != "ok":
            out.append((r["profile"], r["mode"], f"FAILED ({r.get('reason')})", "-", "-", "-",
                        "-", "-", "-"))  # fmt: skip
            continue
        step = r.get("decode_step_ms") if r["mode"] == "baseline" else r.get("spec_cycle_ms")
        accept = r.get("accept_length_reference")
        out.append((
            r["profile"], r["mode"], _fmt(r.get("tokens_per_second_mean")), _fmt(step, 2),
            _fmt(t.get("step_ms_p50"), 2), _fmt(t.get("allreduce_per_step"), 0),
            _fmt(t.get("allreduce_ms_per_step"), 2), _fmt(r.get("break_even_accept_length"), 2),
            "-" if accept is None else f"{accept:.2f}: {r.get('eagle3_verdict') or '-'}",
        ))  # fmt: skip
    return out


def _print_timing(timing: dict[str, Any]) -> None:
    t, real = timing.get("trial") or {}, timing.get("real") or {}
    click.echo(
        f"time: trial {t.get('total_s', 0):.1f} s ({t.get('loads', 0)} loads, "
        f"{t.get('load_s', 0):.1f} s loading); real weights {real.get('total_s', 0):.1f} s "
        f"({real.get('loads', 0)} loads, {real.get('load_s', 0):.1f} s loading)"
    )
    if t.get("load_s_saved") is not None:
        click.echo(f"the {t['loads']} trial loads took {t['load_s']:.1f} s; with real weights "
                   f"about {t['same_loads_with_real_weights_s']:.1f} s "
                   f"({t['load_s_saved']:.1f} s saved)")  # fmt: skip


@click.command()
@click.argument("profiles", nargs=-1, required=True)
@click.option(
    "--mode",
    type=click.Choice(["baseline", "eagle3"]),
    default="baseline",
    show_default=True,
    help="Mode of the first phase.",
)
@click.option(
    "--then-eagle3",
    "then_eagle3",
    default=0,
    type=click.IntRange(0),
    metavar="K",
    help="Re-run the best K baseline profiles in EAGLE-3 mode.",
)
@measurement_options
@click.option(
    "--warmup",
    default=1,
    show_default=True,
    type=click.IntRange(0),
    help="Warm-up requests per client after each switch.",
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--output",
    "-o",
    "output_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Results directory (default: ./sweep-YYYYmmdd-HHMMSS).",
)
@click.option(
    "--resume", is_flag=True, help="Continue the sweep in --output, skipping what is done."
)
@click.option("--apply-best", is_flag=True, help="Leave the winning profile/mode active.")
@click.option("--reference", default=None, help="Profile the speedups are measured against.")
@click.option(
    "--switch-timeout",
    default=1800.0,
    show_default=True,
    type=float,
    help="Seconds to wait for one profile switch (model load included).",
)
@click.option("--no-plot", is_flag=True, help="Do not draw DIR/sweep.png.")
@click.option(
    "--load-format",
    type=click.Choice(["auto", "dummy"]),
    default="auto",
    show_default=True,
    help="dummy: timing trial on random weights (fast loads; accept lengths meaningless).",
)
@click.option(
    "--accept-length",
    type=click.FloatRange(min=1.0),
    default=None,
    help="Real EAGLE-3 accept length a trial's break-even is judged by (default: one "
    "recorded with real weights by an earlier sweep's --then-eagle3).",
)
@click.option(
    "--then-confirm",
    "then_confirm",
    default=0,
    type=click.IntRange(0),
    metavar="N",
    help="After a trial, reload the best N with real weights and measure them.",
)
@click.option(
    "--trace-steps",
    default=5,
    show_default=True,
    type=click.IntRange(1),
    help="Steps of the profile window captured per trial profile.",
)
@click.option("--no-traces", is_flag=True, help="No profile window per trial profile.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@socket_option
@click.pass_context
def sweep(
    ctx: click.Context,
    profiles: tuple[str, ...],
    mode: str,
    then_eagle3: int,
    repeats: int,
    duration: float,
    concurrency: int,
    input_len: int,
    output_len: int,
    warmup: int,
    seed: int,
    output_dir: str | None,
    resume: bool,
    apply_best: bool,
    reference: str | None,
    switch_timeout: float,
    no_plot: bool,
    load_format: str,
    accept_length: float | None,
    then_confirm: int,
    trace_steps: int,
    no_traces: bool,
    as_json: bool,
) -> None:
    """Baseline-first profile sweep through the daemon, with 95% confidence intervals.

    With --load-format dummy it is a timing trial (random weights, minutes less per load,
    every result labelled weights=dummy); --then-confirm N reloads the best N with real
    weights and measures them."""
    from fastverify.client import DaemonUnavailable
    from fastverify.experiments.bench.load import BenchConfig
    from fastverify.experiments.sweep.run import Sweep, SweepBusy, SweepConfig, SweepError

    if resume and not output_dir:
        fail("--resume needs --output DIR (the sweep to continue)", EXIT_USAGE)
    out = Path(output_dir or time.strftime("sweep-%Y%m%d-%H%M%S"))
    cfg = SweepConfig(
        profiles=profiles, output_dir=out, mode=mode, repeats=repeats,
        bench=BenchConfig(url="", concurrency=concurrency, duration=duration,
                          input_len=input_len, output_len=output_len, seed=seed, warmup=warmup),
        resume=resume, then_eagle3=then_eagle3, apply_best=apply_best, reference=reference,
        switch_timeout_s=switch_timeout, plot=not no_plot, load_format=load_format,
        accept_length=accept_length, then_confirm=then_confirm, traces=not no_traces,
        trace_steps=trace_steps,
    )  # fmt: skip
    client = client_for(ctx, timeout=switch_timeout)
    planned = (len(profiles) + then_eagle3 + then_confirm) * repeats
    # One count: the sweep's `[done/total]` measurements, on the bar (terminal) and at the
    # start of every line; the total shrinks when a profile fails, so it reaches its end.
    with _Progress("sweep", planned, unit="measurements", plain_lines=False) as bar:

        def progress(done: int, total: int) -> None:
            bar.update(done, f"{done}/{total} measurements", total=total)

        try:
            sw = Sweep(client, cfg, on_event=bar.note, on_progress=progress)
            report = sw.run()
        except ValueError as exc:
            fail(str(exc), EXIT_USAGE)
        except DaemonUnavailable as exc:
            hint = ""
            if (out / "results.jsonl").exists():
                hint = f"\nresults so far are in {out}/results.jsonl; continue with --resume"
            fail(f"{exc}{hint}", EXIT_UNAVAILABLE)
        except SweepBusy as exc:
            fail(f"sweep: {exc}", EXIT_BUSY)
        except SweepError as exc:
            fail(f"sweep: {exc}", EXIT_USAGE)
        except KeyboardInterrupt:
            fail(f"sweep: interrupted; results so far are in {out}/results.jsonl "
                 f"(continue with --resume --output {out})", EXIT_INTERRUPTED)  # fmt: skip
    if as_json:
        emit_json(report)
    else:
        table(
            (
                "rank",
                "profile",
                "mode / weights",
                "tok/s",
                "95% CI",
                "n",
                "speedup",
                "vs reference",
                "accept",
                "break-even",
                "vs own baseline",
                "note",
            ),
            _sweep_rows(report["results"]),
            title=f"sweep: {report['results_file']}",
        )
        if report.get("trial"):
            heads = ("profile", "mode", "tok/s", "step/cycle ms", "trace ms/step",
                     "all-reduces/step", "all-reduce ms/step", "break-even",
                     "real accept: EAGLE-3")  # fmt: skip
            title = "trial on dummy weights: timings (accept lengths not measured)"
            table(heads, _trial_rows(report["results"]), title=title)
            _print_timing(report.get("timing") or {})
        note = verdict_note(report["results"], repeats)
        if note:
            click.echo(note)
        for r in report["results"]:
            if r["status"] != "ok":
                click.echo(failure_line(r))
        best = report.get("best")
        if best:
            trial_tag = " (trial, dummy weights)" if best.get("weights") == "dummy" else ""
            click.echo(f"best: {best['profile']}/{best['mode']} "
                       f"{best['tokens_per_second_mean']:.1f} tok/s{trial_tag}")  # fmt: skip
        final = report.get("final") or {}
        if final.get("action") not in (None, "none"):
            click.echo(f"{final['action']}: {final.get('profile')}/{final.get('mode')}")
        if report.get("plot"):
            click.echo(f"plot: {report['plot']}")
        for w in report.get("warnings", []):
            click.echo(f"warning: {w}", err=True)
    if any(r["status"] != "ok" for r in report["results"]):
        sys.exit(EXIT_PROBLEMS)
