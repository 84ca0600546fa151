"""`fastverifyctl preflight`: every candidate profile's all-reduces measured by rank
workers before a server is touched (and `--derive-tuner`), one table per profile.

torch is never imported here: the rank workers import it in their own processes.
Exit codes: 0 ok; 1 a profile failed preflight; 2 usage (the nccl backend without GPUs:
pass --backend gloo); 6 torch missing; 130 interrupted (the ranks are stopped)."""

from __future__ import annotations

import sys
from typing import Any

import click

from fastverify.cli.experiment_common import (
    deliver,
    fmt,
    host_fingerprint,
    int_list,
    rank_run,
    report_file_option,
    report_json_option,
)
from fastverify.cli.options import (
    backend_option,
    count_option,
    dir_option,
    file_option,
    flag,
)
from fastverify.cli.output import EXIT_PROBLEMS, EXIT_USAGE, fail, table
from fastverify.cli.rank_options import Ranks, rank_options

# ----------------------------------------------------------------------------- preflight


def _print_preflight(report: dict[str, Any]) -> None:
    for prof in report["profiles"]:
        rows = []
        for s in prof["sizes"]:
            e, g = s["eager"], s["graph"]
            graph_state = g["capture"] if g["capture"] != "ok" else f"ok/{g['replay']}"
            eb, gb = e.get("batch") or {}, g.get("batch") or {}
            rows.append((
                fmt(s["tokens"]), s["bytes"], fmt(e.get("p50_us")), fmt(e.get("p99_us")),
                fmt(eb.get("per_op_mean_us")), fmt(eb.get("busbw_gbs"), 2), graph_state,
                fmt(g.get("p50_us")), fmt(gb.get("per_op_p50_us")),
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
        (p["profile"], p["status"], fmt(p["wall_s"]), fmt(p.get("init_s"), 2),
         ", ".join(f"{k}={v}" for k, v in p["nccl"]["confirmed"].items()) or "-")
        for p in report["profiles"]
    ]  # fmt: skip
    if len(report["profiles"]) > 1 and report.get("winners"):
        table(
            ("tokens", "bytes", "fastest in-graph", "us", "x next", "fastest b2b", "us", "x next"),
            [
                (fmt(w["tokens"]), w["bytes"], w.get("graph_winner") or "-",
                 fmt((w.get("graph_us") or {}).get(w.get("graph_winner"))),
                 fmt(w.get("graph_margin"), 2), w.get("eager_winner") or "-",
                 fmt((w.get("eager_us") or {}).get(w.get("eager_winner"))),
                 fmt(w.get("eager_margin"), 2))
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
@rank_options(
    timeout_s=180.0,
    nproc_help="Ranks (one per GPU). Default: every visible GPU.",
    logs_help="Keep per-rank JSON and NCCL debug logs in this directory.",
)
@count_option(
    "--hidden-size", 7168, "The model's hidden size (7168 for DeepSeek-V3/Kimi-K2 class models)."
)
@click.option(
    "--tokens",
    default="1,2,3,4,8,16,32,64,128,512,2048,8192",
    show_default=True,
    help="Tokens per forward; message = hidden size x tokens x 2 bytes (decode/verify sizes "
    "1-64, prefill sizes 128-8192).",
)
@click.option("--sizes", default=None, help="Explicit message sizes in bytes instead of --tokens.")
@count_option("--iters", 50, "Timed all-reduces (and graph replays) per size.")
@count_option("--warmup", 5, "Untimed all-reduces per size first.", low=0)
@count_option(
    "--graph-ops",
    20,
    "All-reduces captured in one graph for the in-graph per-op time (0: skip).",
    low=0,
)
@backend_option("gloo: CPU-only testing of the orchestration.", hidden=True)
@report_file_option
@click.option(
    "--derive-tuner",
    "derive_tuner",
    default=None,
    metavar="NAME",
    help="Measure every algorithm/protocol per size and write NAME.tuner.csv + NAME.env "
    "(a tuner profile; see docs/guides/tuner.md). PROFILES: at most one, the base (nccl-default).",
)
@dir_option(
    "--tuner-dir", help="With --derive-tuner: where to write (default: the user profile dir)."
)
@flag("--fresh", "With --derive-tuner: ignore saved measurements.")
@file_option(
    "--nccl-csv",
    help="With --derive-tuner: also write the table as NCCL's example tuner plugin reads it "
    "(NCCL_TUNER_CONFIG_FILE; its column order).",
)
@click.option("--fake-costs", default="", hidden=True, help="gloo testing only.")
@report_json_option
def preflight(
    profiles: tuple[str, ...],
    ranks: Ranks,
    hidden_size: int,
    tokens: str,
    sizes: str | None,
    iters: int,
    warmup: int,
    graph_ops: int,
    backend: str,
    output: str | None,
    derive_tuner: str | None,
    tuner_dir: str | None,
    fresh: bool,
    nccl_csv: str | None,
    fake_costs: str,
    as_json: bool,
) -> None:
    """NCCL all-reduce + CUDA-graph check per profile on the GPUs, without a model."""
    from fastverify.experiments.preflight import hostcheck as pf_host
    from fastverify.experiments.preflight import inputs as pf_inputs
    from fastverify.experiments.preflight import run as pf

    if derive_tuner is not None:
        tuner = {"name": derive_tuner, "tuner_dir": tuner_dir, "fresh": fresh, "nccl_csv": nccl_csv}
        _derive_tuner(tuner, profiles, ranks, hidden_size, tokens, sizes, backend, fake_costs,
                      output, as_json)  # fmt: skip
        return
    if nccl_csv:
        fail("preflight: --nccl-csv needs --derive-tuner NAME", EXIT_USAGE)

    try:
        daemon_env = pf_inputs.daemon_extra_env(ranks.config_path)
    except pf_host.PreflightError as exc:
        fail(f"preflight: {exc}", EXIT_USAGE)
    cfg = pf.PreflightConfig(
        hidden_size=hidden_size, tokens=int_list(tokens, "--tokens"),
        sizes_bytes=int_list(sizes, "--sizes") if sizes else (), iters=iters, warmup=warmup,
        graph_ops=graph_ops,
        **ranks.fields({**daemon_env, **ranks.env()}, backend),
    )  # fmt: skip
    try:
        with rank_run("preflight"):
            loaded = pf_inputs.load_profiles(profiles)
            report = pf.run_preflight(loaded, cfg, on_event=lambda line: click.echo(line, err=True))
    except pf_host.PreflightError as exc:  # no GPU for nccl, unknown profile: usage, as rehearse
        usage = isinstance(exc, pf_host.NoGpu) or "profile" in str(exc)
        fail(f"preflight: {exc}", EXIT_USAGE if usage else EXIT_PROBLEMS)
    report["fingerprint"] = host_fingerprint(ranks.config_path)  # the daemon's host, when known
    deliver(report, output, as_json, _print_preflight)
    # a skipped candidate (pcie-ipc without FlashInfer's PCIe-IPC here) is not a failure
    if any(p["status"] not in ("ok", "skipped") for p in report["profiles"]):
        sys.exit(EXIT_PROBLEMS)


def _derive_tuner(
    tuner: dict[str, Any], profiles: tuple[str, ...], ranks: Ranks, hidden_size: int,
    tokens: str, sizes: str | None, backend: str, fake_costs: str, output: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """`preflight --derive-tuner NAME` (fastverify.experiments.derive_tuner.cmd; `tuner`: NAME,
    --tuner-dir, --fresh and --nccl-csv)."""
    from fastverify.experiments.derive_tuner import cmd
    from fastverify.experiments.derive_tuner import derive as dt
    from fastverify.experiments.preflight.hostcheck import PreflightError

    if len(profiles) > 1:
        fail("preflight --derive-tuner: give at most one base profile", EXIT_USAGE)
    ctx = click.get_current_context()
    if sizes:
        size_list = int_list(sizes, "--sizes")
    elif ctx.get_parameter_source("tokens") == click.core.ParameterSource.DEFAULT:
        size_list = dt.sizes_from_tokens(dt.DEFAULT_TOKENS, hidden_size)
    else:
        size_list = dt.sizes_from_tokens(int_list(tokens, "--tokens"), hidden_size)
    try:
        with rank_run("preflight", usage=(PreflightError,), resume=True):
            report, lines = cmd.run_cli(
                base=profiles[0] if profiles else "nccl-default", nproc=ranks.nproc,
                sizes=size_list, rounds=3, channels=dt.DEFAULT_CHANNELS,
                extra_env=ranks.env(), backend=backend, python=ranks.python,
                timeout_s=max(ranks.timeout_s, 300.0), fake_costs=fake_costs,
                echo=lambda line: click.echo(line, err=True), **tuner,
            )  # fmt: skip
    except dt.DeriveError as exc:
        fail(f"preflight --derive-tuner: {exc}", EXIT_PROBLEMS)
    deliver(report, output, as_json, lambda _report: click.echo("\n".join(lines)))
