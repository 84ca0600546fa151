"""`fastverifyctl spec costs`: what a decode step and a draft+verify cycle cost on the serving
engine, per batch size and step count, measured in trials on dummy weights
(`fastverify.experiments.engine_costs`); the cost file it writes is what `spec plan --costs
FILE` reads.

`spec costs` exit codes: 0 measured; 1 a trial failed (which step count and why; the engine
is restored); 2 usage, or what the daemon or its SGLang cannot run (no drafter, a feature
the version lacks); 3 daemon unreachable; 4 another experiment holds the daemon; 130
interrupted (the engine is restored first).
"""

from __future__ import annotations

from typing import Any, NoReturn

import click

from fastverify.api_models import STATUS
from fastverify.cli.daemon_call import call_daemon, client_for, socket_option
from fastverify.cli.options import (
    batch_size_list,
    count_option,
    duration_option,
    file_option,
    flag,
    json_option,
    switch_timeout_option,
    trace_options,
)
from fastverify.cli.output import (
    EXIT_BUSY,
    EXIT_INTERRUPTED,
    EXIT_PROBLEMS,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    daemon_exit,
    emit_json,
    fail,
    fail_with_reason,
    table,
)


@click.command("costs")
@click.option("--max-steps", type=click.IntRange(1, 64), default=None,
              help="Trials at 0..K draft steps (0 = SGLang's steps-0 pass, beside a baseline "
              "server's decode step); default: the daemon's configured EAGLE-3 steps.")  # fmt: skip
@click.option("--batch-sizes", default="1,2,4,8,16,32,64", show_default=True,
              callback=batch_size_list, help="Batch sizes measured at each step count: one "
              "closed-loop window at that concurrency.")  # fmt: skip
@click.option("--trials", default=None, metavar="LIST",
              help="Only these trials, e.g. 0 or baseline,0 (default: baseline and every "
              "step count 0..K): re-measure one without the others' loads.")  # fmt: skip
@duration_option(10.0, "Seconds per window.")
@count_option("--input-len", 128, "Prompt tokens per request.")
@count_option(
    "--output-len", 128, "Generated tokens per request (a window needs finished requests).", low=2
)
@count_option("--warmup", 1, "Warm-up requests per client before each window.", low=0)
@trace_options(
    "Steps of the profile window that times the verify pass.",
    "No profile windows: cycles only, no verify times.",
)
@switch_timeout_option("Seconds to wait for one trial's load.")
@file_option("--output", help="Write the cost file here (spec plan --costs FILE reads it).")
@file_option("--journal", help="Append each window here as it is measured (a run cut short "
             "keeps them; --resume continues it).")  # fmt: skip
@flag(
    "--resume",
    "Continue the run whose --journal FILE is given: the windows it holds are "
    "not measured again, a step count whose windows are all there is not loaded.",
)
@json_option("Print the cost file as JSON.")
@socket_option
@click.pass_context
def costs(
    ctx: click.Context,
    max_steps: int | None,
    batch_sizes: list[int],
    trials: str | None,
    duration: float,
    input_len: int,
    output_len: int,
    warmup: int,
    trace_steps: int,
    no_traces: bool,
    switch_timeout: float,
    output: str | None,
    journal: str | None,
    resume: bool,
    as_json: bool,
) -> None:
    """Measure what a decode step and a draft+verify cycle cost on the serving engine, per
    batch size and step count: the daemon restarts it on dummy weights at 0..K steps (the
    active profile; k >= 1 in EAGLE-3, topk 1, k + 1 draft tokens, as SGLang's adaptive
    worker runs them), a bench window per batch size reads the cycle, and the engine is put
    back as it was. The cost file is what `spec plan --costs FILE` reads."""
    import shlex
    import sys

    from fastverify import ctrl_c
    from fastverify.client import ApiError, DaemonUnavailable
    from fastverify.experiments.engine_costs.run import (
        CostTrialBusy,
        CostTrialConfig,
        CostTrialError,
        CostTrialFailed,
        CostTrials,
    )

    if resume and not journal:
        fail("spec costs: --resume needs --journal FILE (the journal of the run to continue)",
             EXIT_USAGE)  # fmt: skip
    for path in (output, journal):
        if path:
            _writable(path)  # before any load: a path that cannot be written ends it now
    status = call_daemon(ctx, STATUS, as_json=as_json)
    if not no_traces:
        _require_traces(status, as_json)
    cfg = CostTrialConfig(
        max_steps=max_steps, batch_sizes=tuple(batch_sizes), duration=duration,
        input_len=input_len, output_len=output_len, warmup=warmup,
        switch_timeout_s=switch_timeout, traces=not no_traces, trace_steps=trace_steps,
        command=shlex.join([ctx.command_path, *_args_after("costs", sys.argv)]),
        journal=journal, resume=resume,
        trials=tuple(t.strip() for t in trials.split(",") if t.strip()) if trials else None,
    )  # fmt: skip
    try:
        cfg.validate()
    except ValueError as exc:
        fail(f"spec costs: {exc}; nothing was switched or measured", EXIT_USAGE)

    def note(line: str) -> None:
        click.echo(f"spec costs: {line}", err=True)

    measuring = CostTrials(client_for(ctx, timeout=switch_timeout), cfg, note)
    try:
        # every command runs under this guard (cli/groups.py); here too, so that a kept
        # Ctrl-C ends the run inside this handler: the engine's restore said, `--json`'s record
        with ctrl_c.never_lost():
            report = measuring.run()
    except CostTrialFailed as exc:
        _deliver(exc.report, output, as_json, quiet=True)
        fail(f"spec costs: {exc}; the engine was restored"
             + (f" (what was measured: {output})" if output else ""), EXIT_PROBLEMS)  # fmt: skip
    except CostTrialBusy as exc:
        _stop(str(exc), EXIT_BUSY, "leased", as_json)
    except CostTrialError as exc:
        _stop(str(exc), EXIT_USAGE, "cannot_run", as_json)
    except DaemonUnavailable as exc:
        _stop(str(exc), daemon_exit(exc, EXIT_UNAVAILABLE), "unreachable", as_json)
    except ApiError as exc:
        _stop(
            str(exc.body.get("error") or exc), daemon_exit(exc, EXIT_PROBLEMS), "api_error", as_json
        )
    except KeyboardInterrupt:
        restored = (measuring.info.get("restored") or {}).get("result")
        _stop(f"interrupted; the engine was put back ({restored or 'not confirmed'})",
              EXIT_INTERRUPTED, "interrupted", as_json)  # fmt: skip
    _deliver(report, output, as_json)


def _args_after(word: str, argv: list[str]) -> list[str]:
    """The command line after the subcommand `word` (the cost file records its command)."""
    return argv[argv.index(word) + 1 :] if word in argv else []


def _writable(path: str) -> None:
    from pathlib import Path

    parent = Path(path).resolve().parent
    if not parent.is_dir():
        fail(f"spec costs: {path}: the directory {parent} does not exist; nothing "
             "was switched or measured", EXIT_USAGE)  # fmt: skip


def _require_traces(status: dict[str, Any], as_json: bool) -> None:
    """Verify times come from the engine's profiler step spans: the served SGLang must have
    them (its facts), else --no-traces measures the cycles alone."""
    from fastverify.sglang import facts

    version = (status.get("sglang") or {}).get("version")
    if not version:
        return
    try:
        facts.resolve(version).require(
            "step_spans", "spec costs' verify times (--no-traces measures cycles only)"
        )
    except (facts.FeatureMissing, facts.VersionTooOld) as exc:
        if as_json:
            emit_json({"error": str(exc), "reason": "sglang_feature_missing"})
        fail(f"spec costs: {exc}; nothing was switched or measured", EXIT_USAGE)


def _deliver(
    report: dict[str, Any], output: str | None, as_json: bool, quiet: bool = False
) -> None:
    if output:
        from fastverify.cli.output import to_json
        from fastverify.durable import atomic_write_text

        try:
            atomic_write_text(output, to_json(report) + "\n", mode=0o644)
        except OSError as exc:
            fail(f"spec costs: --output {output}: cannot write ({exc.strerror or exc})",
                 EXIT_PROBLEMS)  # fmt: skip
    if as_json:
        emit_json(report)
        return
    if quiet:
        return
    _print_costs(report, output)


def _print_costs(report: dict[str, Any], output: str | None) -> None:
    steps = [str(k) for k in report["steps"]]
    # a baseline server's decode step beside the steps-0 pass (a file from before the steps-0
    # trial has no baseline_ms: its "0" is the baseline decode)
    baseline = report.get("baseline_ms")
    rows = []
    for bs, row in sorted(report["cycle_ms"].items(), key=lambda kv: int(kv[0])):
        verify = report.get("verify_ms", {}).get(bs, {})
        cells = []
        if baseline is not None:
            b = baseline.get(bs)
            cells.append("-" if b is None else f"{b:.2f}")
        for k in steps:
            c = row.get(k)
            v = verify.get(k)
            cells.append("-" if c is None else f"{c:.2f}" + (f" ({v:.2f})" if v else ""))
        rows.append((bs, *cells))
    names = {"0": "0 steps" if baseline is not None else "decode", "1": "1 step"}
    heads = ("batch", *(["baseline"] if baseline is not None else []),
             *[names.get(k, f"{k} steps") for k in steps])  # fmt: skip
    table(heads, rows, title="ms per decode step (baseline) and per cycle at each draft step "
          "count (verify ms in brackets)")  # fmt: skip
    click.echo(f"source: {report['source']}")
    if fe := report.get("front_end_ms"):
        click.echo(f"front end: {fe['share_ms']:.2f} ms a request shared, then "
                   f"{fe['serial_ms']:.2f} ms apart to the scheduler (requests sent together "
                   "reach it spread out; the serving model queues them so)")  # fmt: skip
    j = report.get("journal") or {}
    if j.get("resumed"):
        click.echo(f"resumed: {j.get('windows_from_journal')} window(s) from {j.get('path')}, "
                   f"the rest measured now (call {j.get('calls')})")  # fmt: skip
    t = report.get("time_s") or {}
    if t:
        click.echo("time: " + ", ".join(f"{k.replace('_', ' ')} {v:.0f} s" for k, v in t.items()))
    restored = report.get("restored") or {}
    click.echo(f"restored: {restored.get('profile')}/{restored.get('mode')} "
               f"({restored.get('weights')} weights): {restored.get('result')}")  # fmt: skip
    for w in report.get("warnings", []):
        click.echo(f"warning: {w}", err=True)
    if output:
        click.echo(f"cost file: {output} (fastverifyctl spec plan --costs {output})")


def _stop(message: str, code: int, reason: str, as_json: bool) -> NoReturn:
    fail_with_reason("spec costs", message, code, reason, as_json)
