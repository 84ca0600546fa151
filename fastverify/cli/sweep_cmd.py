"""`fastverifyctl sweep`: profiles served and measured one after another through the
daemon (trials on dummy weights, confirmation, EAGLE-3 phase), ranked with their intervals,
a table or `--json`, and a plot when matplotlib is installed.

Imports stay light: matplotlib only when the plot is drawn, rich only for a progress bar.
Exit codes: 0 ok; 1 the sweep had failures (or runs cut short); 2 usage; 3 daemon unreachable;
4 another experiment holds the daemon; 130 interrupted
(a sweep keeps what it measured)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from fastverify.cli.daemon_call import client_for, daemon_run, socket_option
from fastverify.cli.experiment_common import Progress, acceptance_text, fmt
from fastverify.cli.options import (
    Decorator,
    accept_length_option,
    choice_option,
    count_option,
    flag,
    json_option,
    load_format_option,
    measurement_options,
    output_dir_option,
    seed_option,
    trace_options,
)
from fastverify.cli.output import EXIT_PROBLEMS, EXIT_USAGE, emit_json, fail, table
from fastverify.experiments.common.stats import interval

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
            out.append(("-", r["profile"], mode, fmt(r.get("tokens_per_second_mean")),
                        "-" if not ci else interval(ci), fmt(r.get("n")),
                        "-", "CUT SHORT", fmt(r.get("accept_length_mean"), 2) + _forced_mark(r),
                        "-", "-",
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
            fmt(r.get("rank")), r["profile"], mode, fmt(r.get("tokens_per_second_mean")),
            "-" if not ci else interval(ci), fmt(r.get("n")),
            f"x{r['speedup_vs_reference']:.3f}", sig,
            fmt(r.get("accept_length_mean"), 2) + _forced_mark(r),
            fmt(r.get("break_even_accept_length"), 2), own, r.get("note") or "",
        ))  # fmt: skip
    return out


def _forced_mark(r: dict[str, Any]) -> str:
    """ " forced" beside an accept length SGLang forced (SGLANG_SIMULATE_ACC_LEN)."""
    return " forced" if str(r.get("acceptance_source") or "").startswith("forced") else ""


def acceptance_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per EAGLE-3 row with summed accepted-drafts histograms: the distribution and
    the accept length at every step count it gives (dummy weights said so)."""
    out = []
    for r in rows:
        text = acceptance_text(r)
        if text is None:
            continue
        dist, total, curve = text
        dummy = " (dummy weights: not real)" if r.get("weights") == "dummy" else ""
        if _forced_mark(r):
            dummy = f" ({r['acceptance_source']}: SGLang set it)"
        out.append(f"accepted drafts {r['profile']}/{r['mode']}: {dist} ({total} passes)"
                   + (f"; L(k) {curve}" if curve else "") + dummy)  # fmt: skip
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
            r["profile"], r["mode"], fmt(r.get("tokens_per_second_mean")), fmt(step, 2),
            "no window" if r.get("trace_error") else fmt(t.get("step_ms_p50"), 2),
            fmt(t.get("allreduce_per_step"), 0),
            fmt(t.get("allreduce_ms_per_step"), 2), fmt(r.get("break_even_accept_length"), 2),
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


def _next_phase_option(name: str, metavar: str, help: str) -> Decorator:
    """--then-eagle3 K, --then-confirm N: how many of the best go on to a later phase."""
    return click.option(name, default=0, type=click.IntRange(0), metavar=metavar, help=help)


@click.command()
@click.argument("profiles", nargs=-1, required=True)
@choice_option("--mode", ("baseline", "eagle3"), "baseline", "Mode of the first phase.")
@_next_phase_option("--then-eagle3", "K", "Re-run the best K baseline profiles in EAGLE-3 mode.")
@measurement_options
@count_option("--warmup", 1, "Warm-up requests per client after each switch.", low=0)
@seed_option
@output_dir_option("Results directory (default: ./sweep-YYYYmmdd-HHMMSS).")
@flag("--resume", "Continue the sweep in --output, skipping what is done.")
@flag("--apply-best", "Leave the winning profile/mode active.")
@click.option("--reference", default=None, help="Profile the speedups are measured against.")
@flag("--no-plot", "Do not draw DIR/sweep.png.")
@load_format_option(
    "dummy: timing trial on random weights (fast loads; accept lengths meaningless)."
)
@accept_length_option(
    "Real EAGLE-3 accept length a trial's break-even is judged by (default: one "
    "recorded with real weights by an earlier sweep's --then-eagle3)."
)
@_next_phase_option(
    "--then-confirm", "N", "After a trial, reload the best N with real weights and measure them."
)
@trace_options(
    "Steps of the profile window captured per trial profile.",
    "No profile window per trial profile.",
)
@json_option("Print the results as JSON.")
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
    from fastverify.experiments.bench.load import BenchConfig
    from fastverify.experiments.sweep.config import SweepBusy, SweepConfig, SweepError
    from fastverify.experiments.sweep.run import Sweep

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

    def so_far() -> str:  # what a sweep cut short by an unreachable daemon leaves
        if not (out / "results.jsonl").exists():
            return ""
        return f"\nresults so far are in {out}/results.jsonl; continue with --resume"

    interrupted = (f"interrupted; results so far are in {out}/results.jsonl "
                   f"(continue with --resume --output {out})")  # fmt: skip
    # One count: the sweep's `[done/total]` measurements, on the bar (terminal) and at the
    # start of every line; the total shrinks when a profile fails, so it reaches its end.
    with (
        Progress("sweep", planned, unit="measurements", plain_lines=False) as bar,
        daemon_run("sweep", busy=SweepBusy, usage=SweepError, unreachable=so_far,
                   interrupted=interrupted),
    ):  # fmt: skip

        def progress(done: int, total: int) -> None:
            bar.update(done, f"{done}/{total} measurements", total=total)

        try:
            sw = Sweep(client, cfg, on_event=bar.note, on_progress=progress)
            report = sw.run()
        except ValueError as exc:
            fail(str(exc), EXIT_USAGE)
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
        for line in acceptance_lines(report["results"]):
            click.echo(line)
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
