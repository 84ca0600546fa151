"""`fastverifyctl rehearse`: the verify-cycle answer per NCCL profile, on the GPUs, no model.

Imports stay light: the experiment module is imported inside the command, matplotlib only
for --plot, httpx only for --metrics-url, and torch never (the rank workers import it).

Exit codes: 0 every profile rehearsed or skipped (a `pcie-ipc` candidate where FlashInfer's
PCIe-IPC all-reduce does not import: reported with the reason, never measured); 1 a profile
failed (init, capture, all-reduce count check); 2 usage (bad config.json, unknown profile);
6 torch missing; 130 interrupted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from fastverify.cli.options import env_pairs
from fastverify.cli.output import (
    EXIT_INTERRUPTED,
    EXIT_MISSING_DEPENDENCY,
    EXIT_PROBLEMS,
    EXIT_USAGE,
    emit_json,
    fail,
    table,
    to_json,
)


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _print(report: dict[str, Any]) -> None:
    accept = report.get("accept_length")
    rows = []
    for r in report["profiles"]:
        if r["status"] != "ok":
            rows.append(
                (
                    r.get("rank", "-"),
                    r["profile"],
                    r["path"],
                    r["status"],
                    *["-"] * 8,
                    (r.get("error") or "")[:80],
                )
            )
            continue
        verdict = "-"
        if accept is not None:
            verdict = "EAGLE-3" if r["speculation_pays"] else "baseline"
        rows.append(
            (
                r["rank"],
                r["profile"],
                r["path"],
                _fmt(r["decode_ms"]),
                _fmt(r["verify_ms"]),
                _fmt(r["compute_ms"]),
                f"{_fmt(r['allreduce_per_verify'], 0)}",
                _fmt(r["allreduce_ms_per_verify"]),
                _fmt(r["drafter_ms"]),
                _fmt(r["breakeven_accept_length"]),
                _fmt(r["speedup"]),
                verdict,
            )
        )
    title = (
        f"rehearse: {report['model']}, TP={report['world_size']}, K={report['draft_tokens']} "
        f"({report['verify_tokens_per_sequence']} tokens/seq per verify), batch {report['batch']}"
    )
    table(
        (
            "#",
            "profile",
            "path",
            "decode ms",
            "verify ms",
            "compute ms",
            "AR/verify",
            "AR ms/verify",
            "drafter ms",
            "break-even",
            "speedup",
            "faster",
        ),
        rows,
        title=title,
    )
    if accept is not None:
        click.echo(
            f"accept length {accept:.2f} ({report.get('accept_length_source')}): "
            "speculation pays where it is above the break-even"
        )
    else:
        click.echo(
            "no accept length given (--accept-length A or --metrics-url URL): "
            "speculation pays where your accept length is above the break-even"
        )
    if report.get("drafter_note"):
        click.echo(f"note: {report['drafter_note']}")
    click.echo(
        f"wall: {report['wall_s']:.1f} s in all "
        f"(slowest profile {report['wall_s_per_profile'] or 0:.1f} s)"
    )


@click.command()
@click.argument("profiles", nargs=-1)
@click.option(
    "--model-config",
    required=True,
    type=click.Path(exists=True),
    help="The target model's Hugging Face config.json (or its directory).",
)
@click.option(
    "--draft-config",
    default=None,
    type=click.Path(exists=True),
    help="The EAGLE-3 drafter's config.json (default: a stated estimate from the target).",
)
@click.option(
    "--draft-tokens",
    "-k",
    default=3,
    show_default=True,
    type=click.IntRange(1),
    help="K drafted tokens per cycle; the verify pass runs K+1 tokens per sequence "
    "(SGLang: --speculative-num-steps K, --speculative-num-draft-tokens K+1, topk 1).",
)
@click.option(
    "--steps",
    default=30,
    show_default=True,
    type=click.IntRange(1),
    help="Timed graph replays per phase.",
)
@click.option(
    "--batch",
    "-b",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Sequences per step.",
)
@click.option(
    "--context",
    default=1024,
    show_default=True,
    type=click.IntRange(1),
    help="KV-cache tokens per sequence the attention reads.",
)
@click.option(
    "--nproc",
    type=click.IntRange(1),
    default=None,
    help="Ranks = tensor-parallel size (one per GPU). Default: every visible GPU.",
)
@click.option(
    "--backend",
    type=click.Choice(["nccl", "gloo"]),
    default="nccl",
    show_default=True,
    help="gloo: CPU-only run of the orchestration (tiny configs, no graphs).",
)
@click.option(
    "--call",
    type=click.Choice(["pynccl", "torch"]),
    default="pynccl",
    show_default=True,
    help="How ranks call NCCL: pynccl = ncclAllReduce on the current stream, as SGLang "
    "0.5.23 does; torch = torch.distributed (adds its own stream hops).",
)
@click.option(
    "--p2p-off",
    "p2p",
    flag_value="p2p-off",
    default=None,
    help="Rehearse each profile with NCCL_P2P_DISABLE=1 instead.",
)
@click.option(
    "--both-paths",
    "p2p",
    flag_value="both",
    help="Rehearse each profile as is and with NCCL_P2P_DISABLE=1.",
)
@click.option(
    "--accept-length",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Your EAGLE-3 accept length (tokens per verify, bonus included).",
)
@click.option(
    "--metrics-url",
    default=None,
    help="Read the accept length from a fastverify exporter's /metrics.",
)
@click.option(
    "--pool-gb",
    default=8.0,
    show_default=True,
    type=click.FloatRange(min=0.0),
    help="Per-rank GB of random layer weights (round-robin over the layers).",
)
@click.option(
    "--timeout",
    "timeout_s",
    default=300.0,
    show_default=True,
    type=float,
    help="Seconds per profile before its ranks are killed.",
)
@click.option(
    "--env",
    "extra_env",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra variable on top of every profile.",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="fastverifyd config whose [server] env / env_passthrough the ranks also get.",
)
@click.option("--python", default="", help="Interpreter for the rank processes (needs torch).")
@click.option(
    "--logs",
    "logs_dir",
    default="",
    type=click.Path(file_okay=False),
    help="Keep per-rank JSON, NCCL logs and profiler traces in this directory.",
)
@click.option(
    "--output",
    "-o",
    default=None,
    type=click.Path(dir_okay=False),
    help="Also write the JSON report to this file.",
)
@click.option(
    "--plot",
    "plot_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Draw a PNG of the per-profile times and break-even accept lengths.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def rehearse(
    profiles: tuple[str, ...],
    model_config: str,
    draft_config: str | None,
    draft_tokens: int,
    steps: int,
    batch: int,
    context: int,
    nproc: int | None,
    backend: str,
    call: str,
    p2p: str | None,
    accept_length: float | None,
    metrics_url: str | None,
    pool_gb: float,
    timeout_s: float,
    extra_env: tuple[str, ...],
    config_path: str | None,
    python: str,
    logs_dir: str,
    output: str | None,
    plot_path: str | None,
    as_json: bool,
) -> None:
    """Rehearse the model's decode step and EAGLE-3 verify cycle per NCCL profile, in CUDA
    graphs on this host's GPUs, with random weights of the real shapes; report the
    break-even accept length above which speculation beats the baseline."""
    from fastverify.experiments.rehearse import run as rh

    source = "--accept-length" if accept_length is not None else None
    if accept_length is None and metrics_url:
        accept_length = rh.accept_length_from_metrics(metrics_url)
        source = f"live exporter {metrics_url}" if accept_length is not None else None
        if accept_length is None:
            click.echo(
                f"rehearse: no fastverify_spec_accept_length at {metrics_url}; "
                "continuing without an accept length",
                err=True,
            )
    paths = {"p2p-off": ("p2p-off",), "both": ("default", "p2p-off")}.get(p2p or "", ("default",))
    try:
        daemon_env = rh.daemon_extra_env(config_path)
    except rh.PreflightError as exc:
        fail(f"rehearse: {exc}", EXIT_USAGE)
    cfg = rh.RehearseConfig(
        model_config=model_config,
        draft_config=draft_config,
        draft_tokens=draft_tokens,
        steps=steps,
        batch=batch,
        context=context,
        nproc=nproc,
        backend=backend,
        call=call,
        pool_gb=pool_gb,
        paths=paths,
        timeout_s=timeout_s,
        python=python,
        extra_env={**daemon_env, **env_pairs(extra_env)},
        logs_dir=logs_dir,
        accept_length=accept_length,
        accept_length_source=source,
    )
    try:
        loaded = rh.load_profiles(profiles)  # none named: every profile
        report = rh.run_rehearsal(loaded, cfg, on_event=lambda line: click.echo(line, err=True))
    except KeyboardInterrupt:
        fail("rehearse: interrupted (every rank started was stopped)", EXIT_INTERRUPTED)
    except rh.TorchMissing as exc:
        fail(str(exc), EXIT_MISSING_DEPENDENCY)
    except rh.PreflightError as exc:  # RehearseError too: bad config, profile, nproc
        fail(f"rehearse: {exc}", EXIT_USAGE)
    if plot_path:
        Path(plot_path).parent.mkdir(parents=True, exist_ok=True)
        report["plot"] = str(rh.plot(report, Path(plot_path)))
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(to_json(report) + "\n", encoding="utf-8")
    if as_json:
        emit_json(report)
    else:
        _print(report)
        if report.get("plot"):
            click.echo(f"plot: {report['plot']}")
    if any(p["status"] == "failed" for p in report["profiles"]):
        sys.exit(EXIT_PROBLEMS)
