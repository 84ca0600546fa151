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

from fastverify.cli.experiment_common import (
    deliver,
    fmt,
    host_fingerprint,
    int_list_option,
    rank_run,
    report_file_option,
    report_json_option,
)
from fastverify.cli.options import (
    backend_option,
    choice_option,
    count_option,
    file_option,
    maybe_count,
    stack,
)
from fastverify.cli.output import EXIT_PROBLEMS, EXIT_USAGE, fail, table
from fastverify.cli.rank_options import Ranks, rank_options


def _fmt(value: Any, digits: int = 2) -> str:
    return fmt(value, digits)  # rehearse's figures are milliseconds: two places


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
    if report.get("label"):
        click.echo(f"label: {report['label']}: {report['note']}")
    click.echo(
        f"wall: {report['wall_s']:.1f} s in all "
        f"(slowest profile {report['wall_s_per_profile'] or 0:.1f} s)"
    )
    if report.get("plot"):
        click.echo(f"plot: {report['plot']}")


def _print_grid(report: dict[str, Any]) -> None:
    toks = report["tokens_per_seq"]
    ar = report["allreduce"]
    rows = []
    for b in report["batch_sizes"]:
        fwd, ratio = report["forward_ms"][str(b)], report["verify_decode_ratio"][str(b)]
        arm = ar["per_forward_ms"][str(b)]
        rows.append((b, "compute ms", *[_fmt(fwd[str(t)]) for t in toks]))
        rows.append(("", "ratio to t=1", *[_fmt(ratio[str(t)]) for t in toks]))
        rows.append(("", "all-reduce ms", *[_fmt(arm[str(t)]) for t in toks]))
        if drafter := report.get("drafter"):
            ext = drafter["extend_ms"][str(b)]
            rows.append(("", "drafter extend ms", *[_fmt(ext[str(t)]) for t in toks]))
            step = _fmt(drafter["step_ms"][str(b)])
            rows.append(("", "draft step ms", step, *[""] * (len(toks) - 1)))
    table(
        ("batch", "per forward", *[f"t={t}" for t in toks]),
        rows,
        title=f"rehearse grid: {report['model']}, shard of TP {report['shard_of_tp']} on "
        f"{report['ranks_run']} rank(s), {report['gpu']}",
    )
    click.echo(f"compute: {report['sources']['forward_ms']}")
    if report.get("drafter"):
        click.echo(f"drafter ({report['drafter']['model']}): {report['sources']['drafter']}")
    click.echo(f"all-reduce ({ar['count_per_forward']} per forward): {ar['source']}")


def _grid(
    fields: dict[str, Any], ranks: Ranks, backend: str, output: str | None, as_json: bool
) -> None:
    """`rehearse --batch-sizes/--tokens/--shard-of-tp`: the compute grid (grid.py; `fields`:
    the model's shape and the grid options as given)."""
    import shlex

    from fastverify.experiments.preflight.hostcheck import NoGpu, PreflightError
    from fastverify.experiments.rehearse import grid

    defaults = {"batch_sizes": grid.DEFAULT_BATCH_SIZES, "tokens": grid.DEFAULT_TOKENS}
    cfg = grid.GridConfig(
        **{**fields, **{k: fields[k] or v for k, v in defaults.items()}},
        **ranks.fields(ranks.env(), backend, share_gpu=False),
        host_fingerprint=host_fingerprint(ranks.config_path),
    )
    command = "fastverifyctl " + shlex.join(sys.argv[1:])
    usage = (grid.GridError, NoGpu, PreflightError)
    with rank_run("rehearse", usage=usage, problems=(grid.GridRunFailed,)):
        report = grid.run_grid(cfg, command, on_event=lambda line: click.echo(line, err=True))
    deliver(report, output, as_json, _print_grid)


# Grid mode's options: the compute per forward per cell instead of the verify cycle per profile.
grid_options = stack(
    click.option(
        "--batch-sizes",
        callback=int_list_option,
        default=None,
        help="Grid mode: batch sizes, e.g. 1,2,4,8,16,32,64 (compute per forward per cell).",
    ),
    click.option(
        "--tokens",
        callback=int_list_option,
        default=None,
        help="Grid mode: tokens per sequence per forward, e.g. 1,2,3,4,5,6,7,8 (must hold 1).",
    ),
    maybe_count(
        "--shard-of-tp",
        "Grid mode: run on ONE GPU the shard one rank of TP N holds (compute only).",
    ),
    file_option(
        "--allreduce-from",
        help="Grid mode: a preflight report from the host, for the all-reduce time per forward.",
        exists=True,
    ),
    click.option("--allreduce-profile", default=None, help="Grid mode: that report's profile."),
    choice_option(
        "--allreduce-backend",
        ("nccl", "pcie_ipc"),
        "nccl",
        "Grid mode without --allreduce-from: the column of SGLang's published table.",
    ),
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
@count_option(
    "--draft-tokens",
    3,
    "K drafted tokens per cycle; the verify pass runs K+1 tokens per sequence "
    "(SGLang: --speculative-num-steps K, --speculative-num-draft-tokens K+1, topk 1).",
    short="-k",
)
@count_option("--steps", 30, "Timed graph replays per phase.")
@count_option("--batch", 1, "Sequences per step.", short="-b")
@count_option("--context", 1024, "KV-cache tokens per sequence the attention reads.")
@rank_options(
    timeout_s=300.0,
    nproc_help="Ranks = tensor-parallel size (one per GPU). Default: every visible GPU.",
    logs_help="Keep per-rank JSON, NCCL logs and profiler traces in this directory.",
)
@backend_option("gloo: CPU-only run of the orchestration (tiny configs, no graphs).")
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
@report_file_option
@file_option(
    "--plot",
    "plot_path",
    help="Draw a PNG of the per-profile times and break-even accept lengths.",
)
@grid_options
@report_json_option
def rehearse(
    profiles: tuple[str, ...],
    model_config: str,
    draft_config: str | None,
    draft_tokens: int,
    steps: int,
    batch: int,
    context: int,
    ranks: Ranks,
    backend: str,
    p2p: str | None,
    accept_length: float | None,
    metrics_url: str | None,
    pool_gb: float,
    output: str | None,
    plot_path: str | None,
    as_json: bool,
    **grid_mode: Any,  # grid_options' values, as given
) -> None:
    """Rehearse the model's decode step and EAGLE-3 verify cycle per NCCL profile, in CUDA
    graphs on this host's GPUs, with random weights of the real shapes; report the
    break-even accept length above which speculation beats the baseline."""
    from fastverify.experiments.rehearse import run as rh

    # what the grid and the rehearsal both take: the model, and how each step is timed
    shape: dict[str, Any] = {"model_config": model_config, "draft_config": draft_config,
                             "steps": steps, "context": context, "pool_gb": pool_gb}  # fmt: skip
    if grid_mode["batch_sizes"] or grid_mode["tokens"] or grid_mode["shard_of_tp"]:
        if profiles:
            fail(f"rehearse: grid mode (--batch-sizes/--tokens/--shard-of-tp) runs no NCCL "
                 f"profile; drop {' '.join(profiles)} (compute only; the all-reduce comes from "
                 "--allreduce-from or the published table)", EXIT_USAGE)  # fmt: skip
        _grid({**shape, **grid_mode}, ranks, backend, output, as_json)
        return
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
        daemon_env = rh.daemon_extra_env(ranks.config_path)
    except rh.PreflightError as exc:
        fail(f"rehearse: {exc}", EXIT_USAGE)
    cfg = rh.RehearseConfig(
        **shape,
        draft_tokens=draft_tokens,
        batch=batch,
        paths=paths,
        accept_length=accept_length,
        accept_length_source=source,
        **ranks.fields({**daemon_env, **ranks.env()}, backend),
    )
    # RehearseError is a PreflightError too: bad config, profile, nproc
    with rank_run("rehearse", usage=(rh.PreflightError,)):
        loaded = rh.load_profiles(profiles)  # none named: every profile
        report = rh.run_rehearsal(loaded, cfg, on_event=lambda line: click.echo(line, err=True))
    if plot_path:
        Path(plot_path).parent.mkdir(parents=True, exist_ok=True)
        report["plot"] = str(rh.plot(report, Path(plot_path)))
    deliver(report, output, as_json, _print)
    if any(p["status"] == "failed" for p in report["profiles"]):
        sys.exit(EXIT_PROBLEMS)
