"""`fastverifyctl trace capture|analyze`: profile windows and their diagnosis.

- `capture [--steps N] [--json]`: the daemon profiles the live server for N forward steps
  (POST /v1/trace/capture), analyzes every TP rank's trace and feeds the exporter.
- `analyze PATH [--json] [--span TEXT]`: a trace file or a directory of per-rank traces
  (`*-TP-{rank}.trace.json.gz`), analyzed locally, no daemon needed.

`--json` prints exactly `{"ranks": [{"rank", "verify_passes", "verify_ms_p50",
"verify_ms_p90", "allreduce_per_verify", "allreduce_ms_per_verify", "allreduce_share"}]}`.
The human form is a per-rank table plus the field diagnosis in one line, e.g.
"verify 30.1 ms p50, 122 all-reduces/verify, 24.6 ms (82%) in all-reduce", and, when
other backends than NCCL served (FlashInfer PCIe-IPC, SGLang's custom all-reduce), the
count and time per verify of each.

Exit codes: 0 ok; 1 no verify pass found (a baseline server has none: `capture` says so
instead of printing a table of zeros), an unreadable trace, an idle engine (nothing to
record) or the daemon's capture failed; 2 usage or a missing PATH; 3 daemon unreachable;
4 busy (another window or operation in flight).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from fastverify.cli.daemon_call import socket_option
from fastverify.cli.groups import SuggestingGroup
from fastverify.cli.options import json_option
from fastverify.cli.output import EXIT_PROBLEMS, emit_json, table

JSON_HELP = 'Print {"ranks": [{rank, verify_passes, verify_ms_p50, ...}]} as JSON.'


def diagnosis(rank: dict[str, Any]) -> str:
    """One rank in the words of the field diagnosis."""
    if not rank.get("verify_passes"):
        return f"rank {rank.get('rank')}: no verify pass"
    per = rank["allreduce_per_verify"]
    per_txt = f"{per:.0f}" if abs(per - round(per)) < 0.05 else f"{per:.1f}"
    return (
        f"verify {rank['verify_ms_p50']:.1f} ms p50 (p90 {rank['verify_ms_p90']:.1f}), "
        f"{per_txt} all-reduces/verify, {rank['allreduce_ms_per_verify']:.1f} ms "
        f"({rank['allreduce_share'] * 100:.0f}%) in all-reduce"
    )


def _span_label(span: str) -> tuple[str, str]:
    """(what one row counts, its short name): verify passes, or the ranges named by --span."""
    if span == "TARGET_VERIFY":
        return "verify passes", "verify"
    return f"{span} ranges", span


def print_analysis(analysis: dict[str, Any], where: str, span: str = "TARGET_VERIFY") -> None:
    ranks = analysis.get("ranks", [])
    rows = [
        (
            r.get("rank_id") or r["rank"],
            r["verify_passes"],
            f"{r['verify_ms_p50']:.2f}",
            f"{r['verify_ms_p90']:.2f}",
            f"{r['allreduce_per_verify']:.1f}",
            f"{r['allreduce_ms_per_verify']:.2f}",
            f"{r['allreduce_share'] * 100:.1f}%",
        )
        for r in ranks
    ]
    passes, short = _span_label(span)
    table(
        [
            "rank",
            passes,
            f"{short} ms p50",
            "p90",
            f"all-reduces/{short}",
            f"all-reduce ms/{short}",
            "share",
        ],
        rows,
        title=f"{passes} and their all-reduces: {where}",
    )
    with_passes = [r for r in ranks if r.get("verify_passes")]
    if not with_passes:
        for r in ranks:  # what the window held, so a trace without passes still says it
            by = r.get("allreduce_calls_by_backend") or {}
            if by:
                each = ", ".join(f"{BACKEND_NAMES.get(b, b)} {n}" for b, n in by.items())
                click.echo(
                    f"rank {r.get('rank_id') or r['rank']}: {sum(by.values())} all-reduces "
                    f"in the window ({each}), none inside {passes}"
                )
        return
    ref = with_passes[0]
    line = f"rank {ref['rank']}: {diagnosis(ref)}"
    spread = [r["allreduce_ms_per_verify"] for r in with_passes]
    if len(with_passes) > 1 and max(spread) - min(spread) > 0.05 * max(spread):
        ar = [r["allreduce_ms_per_verify"] for r in with_passes]
        slow = max(with_passes, key=lambda r: r["allreduce_ms_per_verify"])
        line += (
            f"; across {len(with_passes)} ranks all-reduce ms/verify spans "
            f"{min(ar):.1f}-{max(ar):.1f} (slowest: rank {slow['rank']})"
        )
    click.echo(line if short == "verify" else line.replace("verify", short))
    backends = ref.get("allreduce_backends") or {}
    if set(backends) - {"nccl"}:  # say which backend served (NCCL-only traces: as before)
        click.echo(f"rank {ref['rank']}: per {short} by backend: {backend_line(backends)}")


BACKEND_NAMES = {"nccl": "NCCL", "custom": "SGLang custom all-reduce",
                 "pcie_ipc": "FlashInfer PCIe-IPC"}  # fmt: skip


def backend_line(backends: dict[str, dict[str, float]]) -> str:
    """`FlashInfer PCIe-IPC 122 (1.46 ms), NCCL 2 (0.40 ms)`."""
    return ", ".join(
        f"{BACKEND_NAMES.get(name, name)} {b['per_verify']:.1f} ({b['ms_per_verify']:.2f} ms)"
        for name, b in sorted(backends.items(), key=lambda kv: -kv[1]["per_verify"])
    )


def _no_passes_message(analysis: dict[str, Any], span: str, *, span_option: bool) -> str | None:
    if any(r.get("verify_passes") for r in analysis.get("ranks", [])):
        return None
    if span != "TARGET_VERIFY":
        return (
            f"no {span} range found (no GPU or CPU range whose name contains {span!r}); "
            "--span TARGET_VERIFY counts EAGLE-3 verify passes, --span DECODE decode steps"
        )
    hint = " (--span DECODE counts a baseline server's decode steps)" if span_option else ""
    return (
        f"no verify pass found (no GPU or CPU range whose name contains {span!r}); "
        "was the server decoding in EAGLE-3 mode while it was profiled?" + hint
    )


BASELINE_NO_PASSES = (
    "{profile}/baseline decodes without speculation: a baseline server runs no verify "
    "passes, so this capture has nothing to measure (its decode steps are in {window}: "
    "`fastverifyctl trace analyze --span DECODE {window}`); for verify passes switch to "
    "EAGLE-3 (`fastverifyctl mode set eagle3`) and capture while it serves requests"
)


@click.group("trace", cls=SuggestingGroup)
def trace() -> None:
    """Capture and analyze profiler traces (verify time, all-reduces per verify)."""


@trace.command("analyze")
@click.argument("path", type=click.Path(exists=True))
@click.option(
    "--span",
    default="TARGET_VERIFY",
    show_default=True,
    help="Ranges whose name contains this text are the rows counted (TARGET_VERIFY: EAGLE-3 "
    "verify passes; DECODE: a baseline server's decode steps).",
)
@json_option(JSON_HELP)
def analyze(path: str, span: str, as_json: bool) -> None:
    """Analyze a trace file or a directory of per-rank traces (*-TP-{rank}.trace.json.gz)."""
    from fastverify import traces

    try:
        analysis = traces.analyze_path(path, span=span)
    except traces.TraceError as exc:
        if as_json:
            emit_json({"error": str(exc)})
        else:
            click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_PROBLEMS)
    if as_json:
        emit_json(traces.public_view(analysis))
    else:
        print_analysis(analysis, path, span)
    problem = _no_passes_message(analysis, span, span_option=True)
    if problem:
        click.echo(f"warning: {problem}", err=True)
        sys.exit(EXIT_PROBLEMS)


@trace.command("capture")
@click.option(
    "--steps",
    type=click.IntRange(1, 1000),
    default=None,
    help="Forward steps to profile (default: the daemon's trace_steps).",
)
@json_option(JSON_HELP)
@socket_option
@click.pass_context
def capture(ctx: click.Context, steps: int | None, as_json: bool) -> None:
    """Profile the live server through the daemon, analyze every rank, feed the exporter."""
    from fastverify.api_models import CAPTURE_TRACE, STATUS
    from fastverify.cli.daemon_call import STATUS_TIMEOUT_S, call_daemon
    from fastverify.traces import public_view

    status = call_daemon(ctx, STATUS, as_json=as_json, timeout=STATUS_TIMEOUT_S)
    analysis = call_daemon(ctx, CAPTURE_TRACE, as_json=as_json, timeout=600.0, steps=steps or None)
    baseline = status.get("mode") == "baseline"
    if baseline and not any(r.get("verify_passes") for r in analysis.get("ranks", [])):
        message = BASELINE_NO_PASSES.format(
            profile=status.get("profile"), window=analysis.get("window") or "the window"
        )
        if as_json:
            emit_json({"error": message, "reason": "baseline_mode", "ranks": []})
        else:
            click.echo(f"error: {message}", err=True)
        sys.exit(EXIT_PROBLEMS)
    if as_json:
        emit_json(public_view(analysis))
    else:
        print_analysis(analysis, analysis.get("window") or "live server")
    problem = _no_passes_message(
        analysis, analysis.get("span") or "TARGET_VERIFY", span_option=False
    )
    if problem:
        click.echo(f"warning: {problem}", err=True)
        sys.exit(EXIT_PROBLEMS)
