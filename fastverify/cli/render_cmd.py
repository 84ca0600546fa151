"""`fastverifyctl render systemd|compose`: write this host's unit or compose files.

jinja2 is imported only here (through fastverify.render), never on the CLI's common path.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


def _emit(text: str, output: str) -> None:
    if output == "-":
        sys.stdout.write(text)
        return
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    click.echo(f"wrote {path}", err=True)


@click.group()
def render() -> None:
    """Render systemd units and the compose stack for this host."""


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
