"""`fastverifyctl spec plan`: how many draft steps pay at each batch size on this host;
`fastverifyctl spec costs`: what a decode step and a draft+verify cycle cost on the serving
engine, per batch size and step count, measured in trials on dummy weights.

Acceptance comes from the daemon (`GET /v1/acceptance`: the accept curve a real-weights
EAGLE-3 bench recorded; `fastverify.daemon.acceptance`), costs from the serving engine's
own table (the sim publishes one) or a cost file (`--costs FILE`: a `rehearse` grid, or the
`--output` of `spec costs`; `fastverify.experiments.engine_costs`). The plan
(`fastverify.speculation.plan`) is stored by the daemon with SGLang's adaptive config
(`POST /v1/spec/plan`), which `mode set adaptive` then serves.

`spec costs` exit codes: 0 measured; 1 a trial failed (which step count and why; the engine
is restored); 2 usage, or what the daemon or its SGLang cannot run (no drafter, a feature
the version lacks); 3 daemon unreachable; 4 another experiment holds the daemon; 130
interrupted (the engine is restored first).
"""

from __future__ import annotations

from typing import Any

import click

from fastverify.cli.daemon_call import call_daemon, client_for, socket_option
from fastverify.cli.groups import SuggestingGroup
from fastverify.cli.output import (
    EXIT_BUSY,
    EXIT_INTERRUPTED,
    EXIT_PROBLEMS,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    daemon_exit,
    emit_json,
    fail,
    table,
)

NO_ACCEPTANCE = (
    "no real-weights acceptance is recorded: serve EAGLE-3 with real weights "
    "(fastverifyctl mode set eagle3) and run fastverifyctl bench through the daemon (it "
    "records the accepted-drafts histogram), then run spec plan again"
)


@click.group(cls=SuggestingGroup)
def spec() -> None:
    """Speculation shaped to the host: steps per batch size, SGLang's adaptive config."""


def _batch_sizes(_ctx: Any, _param: Any, value: str) -> list[int]:
    try:
        sizes = sorted({int(v) for v in value.split(",") if v.strip()})
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated integers") from None
    if not sizes or sizes[0] < 1:
        raise click.BadParameter(f"{value!r}: batch sizes must be >= 1")
    return sizes


def pick_curve(curves: dict[str, Any], profile: str | None) -> dict[str, Any] | None:
    """The usable record to plan with: the serving profile's newest, else the newest."""
    usable = [r for r in curves.values() if isinstance(r, dict) and r.get("usable")]
    if not usable:
        return None
    mine = [r for r in usable if r.get("profile") == profile]
    return max(mine or usable, key=lambda r: (r.get("steps", 0), r.get("measured_at", 0)))


@spec.command("plan")
@click.option("--batch-sizes", default="1,2,4,8,16,32,64", show_default=True,
              callback=_batch_sizes, help="The tiers to plan (SGLang routes a batch to the "
              "largest tier at or below its size).")  # fmt: skip
@click.option("--costs", "costs_file", type=click.Path(dir_okay=False), default=None,
              help="A cost file: a `rehearse` grid measured on a GPU, or the --output of "
              "`spec costs` (trials on this engine); default: the serving engine's own cost "
              "table (the sim publishes one).")  # fmt: skip
@click.option("--allreduce-backend", default=None,
              help="With --costs: the grid's all-reduce table for this backend (e.g. "
              "pcie_ipc) instead of its default one.")  # fmt: skip
@click.option("--min-gain", type=click.FloatRange(0.0, 1.0), default=0.05, show_default=True,
              help="What drafting must win by, with 95% confidence, at a tier (0.05 = 5%): "
              "the costs are known to a few percent, and a cycle does not show the drafter's "
              "memory or its prefill work.")  # fmt: skip
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Also write SGLang's --speculative-adaptive-config here.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@socket_option
@click.pass_context
def plan(
    ctx: click.Context,
    batch_sizes: list[int],
    costs_file: str | None,
    allreduce_backend: str | None,
    min_gain: float,
    output: str | None,
    as_json: bool,
) -> None:
    """Per batch-size tier: the step count that maximises tokens/s (0 = no speculation),
    its speedup with a 95% interval, and what would change the answer. Writes SGLang's
    --speculative-adaptive-config into the daemon's state dir (mode adaptive serves it)."""
    from fastverify.speculation import costs as spec_costs
    from fastverify.speculation import plan as spec_plan
    from fastverify.speculation.curve import AcceptCurve

    status = call_daemon(ctx, "GET", "/v1/status", as_json=as_json)
    curves = call_daemon(ctx, "GET", "/v1/acceptance", as_json=as_json).get("curves") or {}
    rec = pick_curve(curves, status.get("profile"))
    if rec is None:
        dummy = [k for k, r in curves.items() if isinstance(r, dict) and not r.get("usable")]
        extra = f" (recorded but not usable: {', '.join(sorted(dummy))})" if dummy else ""
        if as_json:
            emit_json({"error": NO_ACCEPTANCE + extra, "reason": "no_acceptance"})
        fail(f"spec plan: {NO_ACCEPTANCE}{extra}", EXIT_PROBLEMS)
    curve = AcceptCurve.from_histogram(rec["histogram"], rec["steps"])
    try:
        if costs_file:
            costs = spec_costs.from_file(costs_file, allreduce_backend)
        elif allreduce_backend:
            raise spec_costs.CostsError("--allreduce-backend picks a table of a --costs grid")
        else:
            costs = _engine_costs(status)
    except spec_costs.CostsError as exc:
        fail(f"spec plan: {exc}", EXIT_PROBLEMS)
    p = spec_plan.make_plan(curve, costs, batch_sizes, min_gain)
    p.extra["profile"] = status.get("profile")  # whose costs (the engine's, or the grid's host)
    p.extra["acceptance"] = {k: rec[k] for k in ("profile", "mode", "steps", "weights",
                                                 "verifies", "measured_at")}  # fmt: skip
    if output:
        try:
            spec_plan.write_adaptive_config(p, output)
        except OSError as exc:
            fail(f"spec plan: --output {output}: cannot write ({exc.strerror or exc}); nothing "
                 "was stored", EXIT_PROBLEMS)  # fmt: skip
    stored = call_daemon(ctx, "POST", "/v1/spec/plan",
                         {"plan": p.to_dict(), "adaptive_config": p.adaptive_config()},
                         as_json=as_json)  # fmt: skip
    p.adaptive_config_path = stored["adaptive_config"]
    data = p.to_dict()
    if output:
        data["output"] = output
    if as_json:
        emit_json(data)
        return
    _print(data)


def _engine_costs(status: dict[str, Any]) -> Any:
    from fastverify.sglang import client as engine_client
    from fastverify.speculation import costs as spec_costs

    url = (status.get("engine") or {}).get("url")
    if not url:
        raise spec_costs.CostsError(
            f"the daemon serves no engine (state {status.get('state')}) to read costs from; "
            "start one, or give --costs FILE (a `rehearse` grid or `spec costs` trials)"
        )
    try:
        info = engine_client.server_info(url, timeout=10.0)
    except (OSError, ValueError, engine_client.EngineHTTPError) as exc:
        msg = f"cannot read the engine's server info at {url}: {exc}"
        raise spec_costs.CostsError(msg) from None
    return spec_costs.from_engine_info(info)


def _print(data: dict[str, Any]) -> None:
    acc = data["acceptance"]
    curve = "  ".join(f"{k}:{v:.2f}" for k, v in data["accept_curve"].items())
    click.echo(
        f"acceptance: {acc['profile']}/{acc['mode']} at {acc['steps']} steps, "
        f"{acc['verifies']} verify passes ({acc['weights']} weights); L(k): {curve}"
    )
    click.echo(f"costs: {data['costs']['source']}")
    click.echo(f"a tier drafts when it wins by more than {data['min_gain']:.0%} with 95% "
               "confidence (--min-gain)")  # fmt: skip
    rows = []
    for bs, t in data["tiers"].items():
        lo, hi = t["ci"]
        rows.append((bs, t["steps"], f"{t['speedup']:.2f}x [{lo:.2f}, {hi:.2f}]",
                     f"{t['tokens_per_second']:.1f}", t["what_would_change"]))  # fmt: skip
    table(("batch", "steps", "speedup [95% CI]", "tok/s", "what would change it"), rows,
          title="speculation plan (0 steps = no drafting)")  # fmt: skip
    click.echo(data["why"])
    click.echo(f"adaptive config: {data['adaptive_config']} (serve it: fastverifyctl mode set "
               "adaptive)")  # fmt: skip


@spec.command("costs")
@click.option("--max-steps", type=click.IntRange(1, 64), default=None,
              help="Trials at 0..K draft steps (0 = the decode step); default: the daemon's "
              "configured EAGLE-3 steps.")  # fmt: skip
@click.option("--batch-sizes", default="1,2,4,8,16,32,64", show_default=True,
              callback=_batch_sizes, help="Batch sizes measured at each step count: one "
              "closed-loop window at that concurrency.")  # fmt: skip
@click.option(
    "--duration",
    "-d",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds per window.",
)
@click.option("--input-len", default=128, show_default=True, type=click.IntRange(1),
              help="Prompt tokens per request.")  # fmt: skip
@click.option(
    "--output-len",
    default=128,
    show_default=True,
    type=click.IntRange(2),
    help="Generated tokens per request (a window needs finished requests).",
)
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(0),
              help="Warm-up requests per client before each window.")  # fmt: skip
@click.option("--trace-steps", default=5, show_default=True, type=click.IntRange(1),
              help="Steps of the profile window that times the verify pass.")  # fmt: skip
@click.option("--no-traces", is_flag=True,
              help="No profile windows: cycles only, no verify times.")  # fmt: skip
@click.option("--switch-timeout", default=1800.0, show_default=True, type=float,
              help="Seconds to wait for one trial's load.")  # fmt: skip
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Write the cost file here (spec plan --costs FILE reads it).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the cost file as JSON.")
@socket_option
@click.pass_context
def costs(
    ctx: click.Context,
    max_steps: int | None,
    batch_sizes: list[int],
    duration: float,
    input_len: int,
    output_len: int,
    warmup: int,
    trace_steps: int,
    no_traces: bool,
    switch_timeout: float,
    output: str | None,
    as_json: bool,
) -> None:
    """Measure what a decode step and a draft+verify cycle cost on the serving engine, per
    batch size and step count: the daemon restarts it on dummy weights at 0..K steps (the
    active profile; k >= 1 in EAGLE-3, topk 1, k + 1 draft tokens, as SGLang's adaptive
    worker runs them), a bench window per batch size reads the cycle, and the engine is put
    back as it was. The cost file is what `spec plan --costs FILE` reads."""
    import shlex
    import sys

    from fastverify.client import ApiError, DaemonUnavailable
    from fastverify.experiments.engine_costs.run import (
        CostTrialBusy,
        CostTrialConfig,
        CostTrialError,
        CostTrialFailed,
        CostTrials,
    )

    if output:
        _writable(output)  # before any load: a path that cannot be written ends it now
    status = call_daemon(ctx, "GET", "/v1/status", as_json=as_json)
    if not no_traces:
        _require_traces(status, as_json)
    cfg = CostTrialConfig(
        max_steps=max_steps, batch_sizes=tuple(batch_sizes), duration=duration,
        input_len=input_len, output_len=output_len, warmup=warmup,
        switch_timeout_s=switch_timeout, traces=not no_traces, trace_steps=trace_steps,
        command=shlex.join([ctx.command_path, *_args_after("costs", sys.argv)]),
    )  # fmt: skip

    def note(line: str) -> None:
        click.echo(f"spec costs: {line}", err=True)

    trials = CostTrials(client_for(ctx, timeout=switch_timeout), cfg, note)
    try:
        report = trials.run()
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
        restored = (trials.info.get("restored") or {}).get("result")
        _stop(f"interrupted; the engine was put back ({restored or 'not confirmed'})",
              EXIT_INTERRUPTED, "interrupted", as_json)  # fmt: skip
    _deliver(report, output, as_json)


def _stop(message: str, code: int, reason: str, as_json: bool) -> None:
    if as_json:
        emit_json({"error": message, "reason": reason})
    fail(f"spec costs: {message}", code)


def _args_after(word: str, argv: list[str]) -> list[str]:
    """The command line after the subcommand `word` (the cost file records its command)."""
    return argv[argv.index(word) + 1 :] if word in argv else []


def _writable(path: str) -> None:
    from pathlib import Path

    parent = Path(path).resolve().parent
    if not parent.is_dir():
        fail(f"spec costs: --output {path}: the directory {parent} does not exist; nothing "
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

        try:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(to_json(report) + "\n")
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
    rows = []
    for bs, row in sorted(report["cycle_ms"].items(), key=lambda kv: int(kv[0])):
        verify = report.get("verify_ms", {}).get(bs, {})
        cells = []
        for k in steps:
            c = row.get(k)
            v = verify.get(k)
            cells.append("-" if c is None else f"{c:.2f}" + (f" ({v:.2f})" if v else ""))
        rows.append((bs, *cells))
    heads = ("batch", *[("decode" if k == "0" else f"{k} step" + "s" * (k != "1")) for k in steps])
    table(heads, rows, title="cycle ms per batch size and draft steps (verify ms in brackets)")
    click.echo(f"source: {report['source']}")
    restored = report.get("restored") or {}
    click.echo(f"restored: {restored.get('profile')}/{restored.get('mode')} "
               f"({restored.get('weights')} weights): {restored.get('result')}")  # fmt: skip
    for w in report.get("warnings", []):
        click.echo(f"warning: {w}", err=True)
    if output:
        click.echo(f"cost file: {output} (fastverifyctl spec plan --costs {output})")
