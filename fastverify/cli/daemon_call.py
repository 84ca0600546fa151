"""The light part of talking to fastverifyd for every command: one call with its errors
turned into exit codes (`call_daemon`), and the shared wording. Imported on the start-up path
of `fastverifyctl status`, so it holds no click commands and imports nothing heavy.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from fastverify.cli.output import EXIT_BUSY, EXIT_PROBLEMS, EXIT_UNAVAILABLE, EXIT_USAGE, emit_json

STATUS_TIMEOUT_S = 5.0  # a daemon that does not answer /v1/status in this long is unreachable


SOCKET_HELP = (
    "Daemon control socket (also `fastverifyctl --socket PATH CMD` or $FASTVERIFY_SOCKET; "
    "default: /run/fastverify/control.sock as root, else "
    "$XDG_RUNTIME_DIR/fastverify/control.sock)."
)


def _set_socket(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:  # the sub-command's --socket wins over the group's and the variable
        root = ctx.find_root()  # where client_for and every other command reads it
        if not isinstance(root.obj, dict):
            root.obj = {}
        root.obj["socket"] = value
        if ctx.obj is None:
            ctx.obj = root.obj


def socket_option(f: Any) -> Any:
    """`--socket PATH` on a command that talks to the daemon, as well as on `fastverifyctl`
    itself (`fastverifyctl status --socket X` and `fastverifyctl --socket X status` agree)."""
    return click.option(
        "--socket",
        type=click.Path(dir_okay=False),
        default=None,
        expose_value=False,
        callback=_set_socket,
        help=SOCKET_HELP,
    )(f)


def client_for(ctx: click.Context, timeout: float | None = 30.0) -> Any:
    from fastverify.client import ControlClient

    obj = ctx.find_root().obj or {}
    return ControlClient(obj.get("socket"), timeout=timeout)


def unavailable_exit(exc: Exception, as_json: bool) -> int:
    """Print why the daemon cannot be reached (one sentence) and return exit code 3."""
    if as_json:
        emit_json({"error": str(exc), "reachable": False})
    else:
        click.echo(f"error: {exc}", err=True)
    return EXIT_UNAVAILABLE


def call_daemon(
    ctx: click.Context,
    method: str,
    path: str,
    body: Any = None,
    *,
    as_json: bool,
    timeout: float | None = 30.0,
) -> Any:
    """One API call; an unreachable daemon or an API error is printed and exits the CLI."""
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        return client_for(ctx, timeout=timeout).request(method, path, body)
    except DaemonUnavailable as exc:
        sys.exit(unavailable_exit(exc, as_json))
    except ApiError as exc:
        sys.exit(api_error_exit(exc, as_json))


def api_error_exit(exc: Any, as_json: bool) -> int:
    """Print an ApiError's body and return the matching exit code."""
    status = exc.status
    body = exc.body
    if as_json:
        emit_json(dict(body, http_status=status))
    else:
        click.echo(f"error: {body.get('error') or exc}", err=True)
        for problem in body.get("problems", [])[1:]:
            click.echo(f"  {problem}", err=True)
        if status == 409 and body.get("in_flight"):
            click.echo(f"  in flight: {describe_op(body['in_flight'])}", err=True)
    if status == 409:  # busy, unless the daemon says nothing else is in flight
        return EXIT_PROBLEMS if body.get("busy") is False else EXIT_BUSY
    if status in (400, 422):
        return EXIT_USAGE
    return EXIT_PROBLEMS


def describe_op(op: dict[str, Any]) -> str:
    """`switch ring-ll/baseline (id 3f2a, running 12.3 s)`."""
    elapsed = op.get("elapsed_s")
    running = f", running {elapsed:.1f} s" if isinstance(elapsed, int | float) else ""
    return f"{op.get('kind')} {op.get('profile')}/{op.get('mode')} (id {op.get('id')}{running})"
