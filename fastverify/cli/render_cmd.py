"""`fastverifyctl render systemd|compose|kubernetes`: write this host's unit or compose files,
or a fleet's Kubernetes manifests.

Each command's options are declared once, as the fields of its renderer's options
(`UnitOptions`, `ComposeOptions`, `KubeOptions`; fastverify.flags). jinja2 is imported only
when a unit or the compose stack is rendered, never on the CLI's common path.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from fastverify import render as lib
from fastverify.cli.groups import SuggestingGroup
from fastverify.cli.options import flag_options, json_option
from fastverify.cli.output import emit_file
from fastverify.deploy.kubernetes.options import KubeOptions
from fastverify.durable import atomic_write_text
from fastverify.flags import from_flags


def _emit(text: str, output: str) -> None:
    if output == "-":
        emit_file(text)
        return
    path = Path(output)
    atomic_write_text(path, text, mode=0o644)
    click.echo(f"wrote {path}", err=True)


@click.group(cls=SuggestingGroup)
def render() -> None:
    """Render systemd units, the compose stack, or Kubernetes manifests."""


@render.command("systemd")
@click.option(
    "--mode",
    type=click.Choice(["host", "container"]),
    default="host",
    show_default=True,
    help="host: fastverifyd under systemd; container: the compose stack under systemd.",
)
@click.option(
    "--output", "-o", default="-", show_default=True, help="File to write, or - for stdout."
)
@flag_options(lib.UnitOptions)
def systemd_cmd(mode: str, output: str, **options: object) -> None:
    """Render the systemd unit (fastverifyd.service or fastverify.service)."""
    try:
        text = lib.render_unit(mode, from_flags(lib.UnitOptions, **options))
    except lib.RenderError as exc:
        raise click.UsageError(str(exc)) from None
    _emit(text, output)


@render.command("compose")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write docker-compose.yml, prometheus.yml, grafana/ and .env here; "
    "without it, print the .env.",
)
@flag_options(lib.ComposeOptions)
def compose_cmd(output_dir: str | None, **options: object) -> None:
    """Render the compose stack's .env (and with --output-dir, the whole stack)."""
    try:
        opts = from_flags(lib.ComposeOptions, **options)
        if output_dir is None:
            _emit(lib.render_compose_env(opts), "-")
            return
        for path in lib.write_compose_bundle(Path(output_dir), opts):
            click.echo(f"wrote {path}", err=True)
    except lib.RenderError as exc:
        raise click.UsageError(str(exc)) from None


@render.command("kubernetes")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    required=True,
    help="Write the manifests here (one file per kind; `kubectl apply -f DIR`).",
)
@flag_options(KubeOptions)
@json_option("Print what was written as JSON.")
@click.pass_context
def kubernetes_cmd(ctx: click.Context, output_dir: str, as_json: bool, **options: object) -> None:
    """Render the fleet's Kubernetes manifests (docs/guides/kubernetes.md).

    Exit codes: 0 written, 2 bad options, profile, decision record or configuration."""
    from fastverify.cli.output import EXIT_USAGE, emit_json, fail
    from fastverify.deploy.kubernetes.render import render as render_kube
    from fastverify.deploy.kubernetes.render import write_bundle

    try:
        bundle = render_kube(KubeOptions.from_flags(**options))
        written = write_bundle(Path(output_dir), bundle)
    except lib.RenderError as exc:
        fail(f"error: {exc}", EXIT_USAGE)
    except OSError as exc:
        fail(f"error: cannot write {output_dir}: {exc.strerror or exc}", EXIT_USAGE)
    plan = bundle.plan
    notes = bundle.notes + _failed_here(ctx, plan.profile, plan.mode)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if as_json:
        emit_json(
            {
                "files": [str(p) for p in written],
                "profile": plan.profile,
                "mode": plan.mode,
                "workload": plan.workload,
                "gpus_per_node": plan.gpus,
                "tp_size": plan.tp_size,
                "profile_checksum": plan.profile_checksum,
                "config_checksum": plan.config_checksum,
                "notes": notes,
                "layout": bundle.layout,
                "prerequisites": bundle.prerequisites,
            }
        )
        return
    for path in written:
        click.echo(f"wrote {path}", err=True)
    click.echo("the model volume must hold: " + "; ".join(bundle.layout))
    needs = f" (needs: {'; '.join(bundle.prerequisites)})" if bundle.prerequisites else ""
    click.echo(
        f"{plan.workload}: {plan.profile}/{plan.mode}, {plan.gpus} GPUs per pod"
        f" (SGLang TP {plan.tp_size}); next: kubectl apply"
        f"{' --server-side' if options['server_side'] else ''} --dry-run=server -f {output_dir}"
        f"{needs}"
    )


def _failed_here(ctx: click.Context, profile: str, mode: str) -> list[str]:
    """Notes for a profile/mode this host's daemon saw fail to start (CUDA-graph capture,
    NCCL, OOM, ...): the fleet's pods on the same hardware would fail the same way. Nothing
    when no daemon answers here."""
    from fastverify.cli.daemon_call import client_for
    from fastverify.client import DaemonUnavailable

    try:
        history = client_for(ctx, timeout=2.0).history()
    except (DaemonUnavailable, OSError, ValueError, RuntimeError):
        return []
    failed = [
        r
        for r in history
        if isinstance(r, dict)
        and (r.get("profile"), r.get("mode")) == (profile, mode)
        and r.get("result") in ("rolled_back", "failed")
        and r.get("reason") not in (None, "cancelled")
    ]
    if not failed:
        return []
    last = failed[-1]
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(last.get("started_at") or 0))
    weights = " on dummy weights (a trial)" if last.get("weights") == "dummy" else ""
    return [
        f"{profile}/{mode} failed on this host's daemon {len(failed)} time(s), last at "
        f"{when}{weights}: {last.get('reason')} ({last.get('message') or ''}); pods on the "
        "same GPUs and SGLang fail the same way (fastverifyctl history)"
    ]
