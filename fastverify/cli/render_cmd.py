"""`fastverifyctl render systemd|compose|kubernetes`: write this host's unit or compose files,
or a fleet's Kubernetes manifests.

jinja2 is imported only here (through fastverify.render), never on the CLI's common path.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fastverify.cli.groups import SuggestingGroup
from fastverify.durable import atomic_write_text


def _emit(text: str, output: str) -> None:
    if output == "-":
        sys.stdout.write(text)
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
@click.option(
    "--fastverifyd",
    default="/opt/fastverify/bin/fastverifyd",
    show_default=True,
    help="host mode: the daemon's executable.",
)
@click.option(
    "--config", "config_file", default="/etc/fastverify/fastverifyd.toml", show_default=True
)
@click.option(
    "--env-file",
    default="/etc/fastverify/fastverify.env",
    show_default=True,
    help="Optional environment file (EnvironmentFile=-...).",
)
@click.option(
    "--daemon-arg", "extra_args", multiple=True, help="Extra fastverifyd argument (repeatable)."
)
@click.option("--user", default="", help="host mode: run as this user (default root).")
@click.option("--group", default="", help="host mode: with --user, its group.")
@click.option("--watchdog-sec", "watchdog_s", type=int, default=30, show_default=True)
@click.option(
    "--timeout-start-sec",
    "timeout_start_s",
    type=int,
    default=900,
    show_default=True,
    help="Start timeout floor; the daemon extends it while a model loads.",
)
@click.option("--timeout-stop-sec", "timeout_stop_s", type=int, default=120, show_default=True)
@click.option("--restart-sec", "restart_s", type=int, default=5, show_default=True)
@click.option("--start-limit-burst", type=int, default=5, show_default=True)
@click.option(
    "--start-limit-interval-sec", "start_limit_interval_s", type=int, default=600, show_default=True
)
@click.option(
    "--compose-cmd",
    default="/usr/bin/docker compose",
    show_default=True,
    help="container mode: the Compose command (absolute path first).",
)
@click.option(
    "--compose-dir",
    default="/etc/fastverify/compose",
    show_default=True,
    help="container mode: where docker-compose.yml and its .env live.",
)
@click.option("--docs-path", default="/usr/share/doc/fastverify/deployment.md", show_default=True)
def systemd_cmd(mode: str, output: str, **options: object) -> None:
    """Render the systemd unit (fastverifyd.service or fastverify.service)."""
    from fastverify import render as lib

    options["extra_args"] = tuple(options["extra_args"])  # type: ignore[arg-type]
    try:
        text = lib.render_unit(mode, lib.UnitOptions(**options))  # type: ignore[arg-type]
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
@click.option("--image", default=None, help="Image tag (default: fastverify:<version>).")
@click.option("--env-file", default="/etc/fastverify/fastverify.env", show_default=True)
@click.option(
    "--config", "config_file", default="/etc/fastverify/fastverifyd.toml", show_default=True
)
@click.option("--model-dir", default="/models", show_default=True)
@click.option("--hf-cache", default="/var/cache/fastverify/huggingface", show_default=True)
@click.option("--state-dir", default="/var/lib/fastverify", show_default=True)
@click.option(
    "--profile-dir",
    default="/etc/fastverify/profiles",
    show_default=True,
    help="Host directory of operator profiles (mounted read-only).",
)
@click.option("--socket-dir", default="/run/fastverify", show_default=True)
@click.option("--sglang-port", type=int, default=30000, show_default=True)
@click.option("--exporter-port", type=int, default=9464, show_default=True)
@click.option("--prometheus-port", type=int, default=9090, show_default=True)
@click.option("--grafana-port", type=int, default=3000, show_default=True)
@click.option(
    "--grafana-bind",
    default="127.0.0.1",
    show_default=True,
    help="Address Grafana is published on (0.0.0.0 to reach it from other hosts).",
)
def compose_cmd(output_dir: str | None, **options: object) -> None:
    """Render the compose stack's .env (and with --output-dir, the whole stack)."""
    from fastverify import render as lib

    try:
        if options["image"] is None:
            options["image"] = lib.default_image()
        opts = lib.ComposeOptions(**options)  # type: ignore[arg-type]
        if output_dir is None:
            _emit(lib.render_compose_env(opts), "-")
            return
        for path in lib.write_compose_bundle(Path(output_dir), opts):
            click.echo(f"wrote {path}", err=True)
    except lib.RenderError as exc:
        raise click.UsageError(str(exc)) from None


def kube_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of `render kubernetes`, one per `KubeOptions` field (its flag, help,
    default and type are declared there)."""
    import dataclasses

    from fastverify.deploy.kubernetes.options import KubeOptions, flag_name, flag_of

    for f in reversed(dataclasses.fields(KubeOptions)):
        spec = flag_of(f)
        kw: dict[str, Any] = {"help": spec.help or None, "show_default": spec.show_default}
        if spec.switch and f.default is False:
            kw.update(is_flag=True, default=False)
        elif spec.switch:  # --no-X: on unless given
            kw.update(flag_value=False, default=True)
        elif spec.multiple:
            kw.update(multiple=True)
        else:
            kw["default"] = f.default
            if spec.choices:
                kw["type"] = click.Choice(list(spec.choices))
            elif spec.low is not None or spec.high is not None:
                kw["type"] = click.IntRange(spec.low, spec.high)
            elif spec.file:
                kw["type"] = click.Path(dir_okay=False)
            elif "int" in str(f.type):
                kw["type"] = int
        command = click.option(flag_name(f), f.name, **kw)(command)
    return command


@render.command("kubernetes")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    required=True,
    help="Write the manifests here (one file per kind; `kubectl apply -f DIR`).",
)
@kube_options
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@click.pass_context
def kubernetes_cmd(ctx: click.Context, output_dir: str, as_json: bool, **options: object) -> None:
    """Render the fleet's Kubernetes manifests (docs/kubernetes.md).

    Exit codes: 0 written, 2 bad options, profile, decision record or configuration."""
    from fastverify import render as base
    from fastverify.cli.output import EXIT_USAGE, emit_json, fail
    from fastverify.deploy.kubernetes.options import KubeOptions
    from fastverify.deploy.kubernetes.render import render as render_kube
    from fastverify.deploy.kubernetes.render import write_bundle

    try:
        bundle = render_kube(KubeOptions.from_flags(**options))
        written = write_bundle(Path(output_dir), bundle)
    except base.RenderError as exc:
        fail(f"error: {exc}", EXIT_USAGE)
    except OSError as exc:
        fail(f"error: cannot write {output_dir}: {exc.strerror or exc}", EXIT_USAGE)
    notes = bundle.notes + _failed_here(ctx, bundle.profile, bundle.mode)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if as_json:
        emit_json(
            {
                "files": [str(p) for p in written],
                "profile": bundle.profile,
                "mode": bundle.mode,
                "workload": bundle.workload,
                "gpus_per_node": bundle.gpus_per_node,
                "tp_size": bundle.tp_size,
                "profile_checksum": bundle.profile_checksum,
                "config_checksum": bundle.config_checksum,
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
        f"{bundle.workload}: {bundle.profile}/{bundle.mode}, {bundle.gpus_per_node} GPUs per pod"
        f" (SGLang TP {bundle.tp_size}); next: kubectl apply"
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
