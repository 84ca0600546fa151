"""`fastverifyctl bench`: a timed load against the serving engine (through the front door
when one is on; or `--url`), the figures as a table or `--json`, and `--record-baseline`
for the daemon's baselines.

Imports stay light: httpx only inside the run, rich only for a progress bar on a terminal.
Exit codes: 0 ok; 1 every request failed or the window completed none (it says what to
change); 2 usage; 3 daemon unreachable; 6 sglang missing for --use-sglang-bench; 130
interrupted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from fastverify.cli.daemon_call import client_for, daemon_failures, socket_option
from fastverify.cli.experiment_common import Progress, acceptance_text, fmt
from fastverify.cli.options import (
    SECONDS,
    count_option,
    flag,
    json_option,
    load_format_option,
    seed_option,
)
from fastverify.cli.output import (
    EXIT_INTERRUPTED,
    EXIT_MISSING_DEPENDENCY,
    EXIT_PROBLEMS,
    EXIT_USAGE,
    emit_json,
    fail,
    table,
)

# ----------------------------------------------------------------------------- bench


def _bench_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    ttft, itl = result["ttft_ms"], result["itl_ms"]
    return [
        ("output tok/s", fmt(result["output_tokens_per_second"])),
        ("per-request tok/s", fmt(result["per_request_tokens_per_second"])),
        ("requests/s", fmt(result["request_rate"], 2)),
        ("completed / failed", f"{result['completed']} / {result['failed']}"),
        ("TTFT p50/p90/p99 ms", " / ".join(fmt(ttft[k]) for k in ("p50", "p90", "p99"))),
        ("ITL p50/p90/p99 ms", " / ".join(fmt(itl[k], 2) for k in ("p50", "p90", "p99"))),
        *_split_rows(result),
        ("accept length (SGLang's /server_info average)",
         fmt(result["accept_length"], 2) + _accept_note(result)),
        *_acceptance_rows(result),
        ("window s", fmt(result["duration_s"], 1)),
        ("weights", {"dummy": "dummy (trial)", "real": "real"}.get(result.get("weights") or "",
                                                                   "not reported")),
        ("source", result["source"]),
    ]  # fmt: skip


def _split_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The mean first token in SGLang's stages and its prefill forwards, when the server
    sent its stamps."""
    split = result.get("ttft_split_ms")
    if not split:
        return []
    stages = " · ".join(f"{k} {fmt(v, 1)}" for k, v in split.items())
    rows = [(f"TTFT mean split ms ({result['ttft_split_requests']} req)", stages)]
    if fw := result.get("prefill_forwards"):
        rows.append(("prefill forwards (SGLang's)",
                     f"{fw['count']} · {fmt(fw['prompts_mean'], 1)} prompts each · "
                     f"{fmt(fw['ms_mean'], 1)} ms mean, {fmt(fw['ms_max'], 1)} max"))  # fmt: skip
    return rows


def _accept_note(result: dict[str, Any]) -> str:
    """What the accept length is: forced by SGLang, or a dummy drafter's noise."""
    if not result.get("accept_length"):
        return ""
    source = result.get("acceptance_source") or ""
    if source.startswith("forced"):
        return f" ({source}: SGLang set it, no drafter earned it)"
    if result.get("weights") == "dummy":
        return " (dummy weights: not a real accept length)"
    return ""


def _acceptance_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The summed accepted-drafts histogram and the accept curve it gives (EAGLE servers)."""
    text = acceptance_text(result)
    if text is None:
        return []
    dist, total, curve = text
    rows = [("accepted drafts 0..K", f"{dist} ({total} verify passes)")]
    if curve:
        note = _accept_note(result) or (
            " (dummy weights: not real)" if result.get("weights") == "dummy" else ""
        )
        rows.append(("accept length at k steps (this window's histograms)", curve + note))
    return rows


def _server_url(ctx: click.Context, url: str | None) -> tuple[str, str | None, str | None]:
    """The server to bench, where its acceptance comes from (the daemon's engine: "measured"
    or "forced (SGLANG_SIMULATE_ACC_LEN=L)"; None for --url: not known), and a note when the
    URL is the front door's. Through the daemon that is the URL its clients use: the front
    door when one is on (a switch during the bench holds its requests instead of cutting
    them), else the engine."""
    if url:
        return url, None, None
    with daemon_failures("{}\n(or pass --url http://HOST:PORT of the server)"):
        status = client_for(ctx).status()
    engine = status.get("engine") or {}
    if not engine.get("url"):
        fail(f"the daemon reports no serving engine (state {status.get('state')}); pass --url")
    door = status.get("frontdoor") or {}
    if door.get("listen") and door.get("state") in ("serving", "holding"):
        note = f"through the front door ({door['mode']}); the engine is at {engine['url']}"
        return door["listen"], engine.get("acceptance_source"), note
    return engine["url"], engine.get("acceptance_source"), None


@click.command()
@click.option(
    "--url",
    default=None,
    help="Server base URL (default: the daemon's, as its clients reach it: the front door "
    "when one is on, else the engine).",
)
@count_option("--concurrency", 1, short="-c")
@click.option(
    "--duration",
    "-d",
    default=None,
    type=SECONDS,
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
@count_option("--input-len", 128, "Prompt tokens of the random prompts (without --dataset).")
@count_option("--output-len", 256)
@click.option("--dataset", default=None, metavar="FILE|fastverify-docs",
              help="Prompts to send: a JSONL file ({\"text\": ...}, {\"prompt\": ...}, "
              "{\"input_ids\": [...]}, bench_serving's custom {\"conversations\": [...]}, "
              "{\"messages\": [...]}), a ShareGPT JSON file, or fastverify-docs (shipped). "
              "Default: random token ids, recorded as synthetic acceptance.")  # fmt: skip
@click.option("--temperature", default=0.0, show_default=True, type=click.FloatRange(0.0),
              help="Sampling temperature (0: greedy); acceptance depends on it.")  # fmt: skip
@click.option("--top-p", default=1.0, show_default=True,
              type=click.FloatRange(0.0, 1.0, min_open=True), help="Nucleus sampling.")  # fmt: skip
@seed_option
@count_option("--warmup", 1, "Warm-up requests per client, discarded.", low=0)
@flag("--use-sglang-bench", "Run python -m sglang.bench_serving (needs sglang) and read its JSONL.")
@load_format_option(
    "dummy: a timing trial. Through the daemon, the active profile is restarted with "
    "random weights first (unless it already runs so); with --url the server must report "
    "load_format dummy."
)
@flag(
    "--record-baseline",
    "Through the daemon, on a baseline-mode server with real weights: record the result "
    "as the active profile's baseline at this --concurrency (POST /v1/baselines), which the "
    "exporter's break-even and speedup gauges compare EAGLE-3 with at that concurrency.",
)
@click.option(
    "--timeline",
    "timeline_to",
    default=None,
    metavar="FILE",
    type=click.Path(dir_okay=False, writable=True),
    help="Also write each measured request as it went (sent, first token, every streamed "
    "chunk; seconds from the window's start) to FILE as JSONL: where the window's time went.",
)
@json_option("Print the result as JSON.")
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
    dataset: str | None,
    temperature: float,
    top_p: float,
    seed: int,
    warmup: int,
    use_sglang_bench: bool,
    load_format: str,
    record_baseline: bool,
    timeline_to: str | None,
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
    if timeline_to:
        _check_timeline_target(timeline_to, use_sglang_bench)
    active = _baseline_target(ctx) if record_baseline else None
    trial_left = _ensure_trial_engine(ctx) if load_format == "dummy" and not url else None
    server_url, acceptance_source, door_note = _server_url(ctx, url)
    cfg = BenchConfig(
        url=server_url, concurrency=concurrency, duration=duration,
        requests=n_requests, input_len=input_len, output_len=output_len, seed=seed,
        warmup=warmup, dataset=dataset, temperature=temperature, top_p=top_p,
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
            with Progress(f"bench {cfg.url}", total, unit=what) as bar:

                def progress(done: int, elapsed: float) -> None:
                    bar.update(
                        done if n_requests else min(elapsed, duration or 0.0),
                        f"({done} requests done)" if not n_requests else "",
                    )

                prompts = f"dataset {dataset}" if dataset else f"input {input_len}"
                bar.note(
                    f"bench: {concurrency} client(s), {total:g} {what}, "
                    f"{prompts} / output {output_len} tokens"
                )
                if door_note:
                    bar.note(f"bench: {cfg.url} {door_note}")
                result = run_bench(cfg, progress, lambda line: bar.note(f"bench: {line}"),
                                   timeline_to)  # fmt: skip
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        fail("bench: interrupted", EXIT_INTERRUPTED)
    except BenchError as exc:
        code = EXIT_MISSING_DEPENDENCY if "not installed" in str(exc) else EXIT_PROBLEMS
        fail(f"bench: {exc}", code)
    data = result.to_dict()
    if data.get("accept_length") or data.get("accept_histogram"):
        data["acceptance_source"] = acceptance_source
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


def _check_timeline_target(path: str, use_sglang_bench: bool) -> None:
    """Refuse a --timeline that could not be written before any load is sent."""
    if use_sglang_bench:
        fail("bench --timeline: fastverify's own load only (sglang.bench_serving keeps its "
             "requests to itself); drop --use-sglang-bench", EXIT_USAGE)  # fmt: skip
    parent = Path(path).absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"bench --timeline {path}: cannot create its folder {parent} ({exc.strerror}); "
             "give a FILE in a writable folder", EXIT_USAGE)  # fmt: skip
    if not os.access(parent, os.W_OK | os.X_OK):
        fail(f"bench --timeline {path}: the folder {parent} is not writable; give a FILE in a "
             "writable folder", EXIT_USAGE)  # fmt: skip


def _record_acceptance(ctx: click.Context, data: dict[str, Any]) -> None:
    """Through the daemon, an EAGLE-3 server's summed histogram is kept with the profile, mode
    and steps it serves (`fastverifyctl spec plan` reads it); a refusal is a note, the
    measurement stands."""
    from fastverify.client import ApiError, ControlClient, DaemonUnavailable

    cfg = data.get("config") or {}
    client = ControlClient(ctx.obj.get("socket") if ctx.obj else None)
    try:
        rec = client.record_acceptance(
            histogram=data["accept_histogram"],
            requests=data.get("accept_requests") or [],
            dataset=data.get("dataset") or {},
            sampling={"temperature": cfg.get("temperature", 0.0), "top_p": cfg.get("top_p", 1.0)},
            input_len=cfg.get("input_len"),
            output_len=cfg.get("output_len"),
        )
    except (DaemonUnavailable, ApiError) as exc:
        err = getattr(exc, "body", {}).get("error") if isinstance(exc, ApiError) else None
        click.echo(f"bench: acceptance not recorded: {err or exc}", err=True)
        return
    usable = "" if rec.get("usable") else f" (not usable: {rec.get('why_not_usable')})"
    if rec.get("forced"):
        usable = f" ({rec['why_not_usable']})"
    synthetic = " (synthetic prompts)" if (rec.get("dataset") or {}).get("synthetic") else ""
    click.echo(f"bench: acceptance recorded for {rec['profile']}/{rec['mode']} at "
               f"{rec['steps']} steps, {rec['weights']} weights{synthetic}{usable}",
               err=True)  # fmt: skip


def _baseline_target(ctx: click.Context) -> str:
    """The profile a --record-baseline run measures: the daemon's, in baseline mode with real
    weights (checked before the load, so nothing is measured for nothing)."""
    with daemon_failures():
        status = client_for(ctx).status()
    if status.get("mode") != "baseline" or status.get("trial") or not status.get("profile"):
        fail(f"bench --record-baseline: the daemon serves {status.get('profile')}/"
             f"{status.get('mode')}{' (trial, dummy weights)' if status.get('trial') else ''};"
             " a baseline is measured in baseline mode with real weights "
             "(fastverifyctl mode set baseline)", EXIT_USAGE)  # fmt: skip
    return str(status["profile"])


def _record_baseline(
    ctx: click.Context, profile: str, data: dict[str, Any], concurrency: int
) -> None:
    not_recorded = "bench: the baseline was not recorded: {}"
    with daemon_failures(not_recorded, not_recorded, detail="error"):
        client_for(ctx).record_baseline(
            profile=profile, concurrency=concurrency,
            tokens_per_second=data["output_tokens_per_second"],
            per_request_tokens_per_second=data["per_request_tokens_per_second"],
        )  # fmt: skip
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
    client = client_for(ctx, timeout=1800)
    unreachable = "{}\n(or pass --url of a server started with --load-format dummy)"
    with daemon_failures(unreachable, "bench: the trial restart failed: {}", detail="message"):
        status = client.status()
        if status.get("trial"):
            return status
        if not status.get("profile"):
            fail("bench --load-format dummy: the daemon has no active profile to restart")
        click.echo(f"restarting {status['profile']}/{status['mode']} with dummy weights "
                   "(trial) ...", err=True)  # fmt: skip
        client.set_profile(status["profile"], mode=status["mode"], wait=True,
                           load_format="dummy", timeout=1800)  # fmt: skip
    return status
