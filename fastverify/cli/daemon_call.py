"""The light part of talking to fastverifyd for every command: one call with its errors
turned into exit codes (`call_daemon`; `daemon_failures` for a command's own wording;
`daemon_run` for an experiment run through the daemon, `sweep` and `tune`), the commands
that show the daemon's status (`status_command`: `status`, `mode get`, `profile current`),
and the shared wording. Imported on the start-up path of `fastverifyctl status`, so it
imports nothing heavy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from fastverify.cli.hints import carry_door
from fastverify.cli.options import json_option
from fastverify.cli.output import (
    EXIT_BUSY,
    EXIT_INTERRUPTED,
    EXIT_PROBLEMS,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    daemon_exit,
    emit_json,
    fail,
)

Show = Callable[[dict[str, Any], bool], None]  # what a status command prints: (status, --json)

STATUS_TIMEOUT_S = 5.0  # a daemon that does not answer /v1/status in this long is unreachable


SOCKET_HELP = (
    "Daemon control socket (also `fastverifyctl --socket PATH CMD` or $FASTVERIFY_SOCKET; "
    "default: /run/fastverify/control.sock as root, else "
    "$XDG_RUNTIME_DIR/fastverify/control.sock)."
)


# How to reach a daemon over TCP (`docker -H tcp://... --tlsverify` alike): option, key in
# the root's ctx.obj, environment variable, help. `fastverifyctl` takes them before the
# command (reading the variables), every command that talks to the daemon after it.
DOOR_OPTIONS: tuple[tuple[str, str, str, str], ...] = (
    ("--host", "host", "FASTVERIFY_HOST",
     "Daemon's TCP door, tcp://HOST:PORT (instead of the Unix socket)."),
    ("--token-file", "token_file", "FASTVERIFY_TOKEN_FILE",
     "File holding the bearer token for --host (chmod 600; TOKEN or NAME:TOKEN)."),
    ("--tls-ca", "tls_ca", "FASTVERIFY_TLS_CA",
     "CA that signed the daemon's certificate: TLS to --host (else the system's CAs)."),
    ("--tls-cert", "tls_cert", "FASTVERIFY_TLS_CERT",
     "Client certificate for a daemon that requires one (mutual TLS), with --tls-key."),
    ("--tls-key", "tls_key", "FASTVERIFY_TLS_KEY", "The --tls-cert's private key (chmod 600)."),
)  # fmt: skip


def _setter(key: str) -> Any:
    def store(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:  # the command's option wins over the group's and the variable
            root = ctx.find_root()  # where client_for and every other command reads it
            if not isinstance(root.obj, dict):
                root.obj = {}
            root.obj[key] = value
            if ctx.obj is None:
                ctx.obj = root.obj
            carry_door(door_args(root.obj))

    return store


def door_args(obj: Any) -> list[str]:
    """The door options in `obj` (the root's ctx.obj: --socket and DOOR_OPTIONS) as arguments,
    for the hints this command prints (cli/hints.py)."""
    if not isinstance(obj, dict):
        return []
    flags = [("--socket", "socket"), *((flag, key) for flag, key, _e, _t in DOOR_OPTIONS)]
    return [arg for flag, key in flags if obj.get(key) for arg in (flag, str(obj[key]))]


def socket_option(f: Any) -> Any:
    """`--socket PATH` and the TCP door's options (DOOR_OPTIONS) on a command that talks to
    the daemon, as well as on `fastverifyctl` itself (`fastverifyctl status --socket X` and
    `fastverifyctl --socket X status` agree)."""
    f = click.option("--socket", type=click.Path(dir_okay=False, readable=False), default=None,
                     expose_value=False, callback=_setter("socket"),
                     help=SOCKET_HELP)(f)  # fmt: skip
    for flag, key, _env, text in reversed(DOOR_OPTIONS):
        f = click.option(flag, default=None, expose_value=False, callback=_setter(key),
                         help=text)(f)  # fmt: skip
    return f


def client_for(ctx: click.Context, timeout: float | None = 30.0) -> Any:
    """The daemon's client: its Unix socket, or its TCP door (--host) with the token and TLS
    files given; a bad option or credential file exits 2 saying which and why."""
    from fastverify.client import ControlClient

    obj = ctx.find_root().obj or {}
    host = obj.get("host")
    door = {key: obj.get(key) for _f, key, _e, _t in DOOR_OPTIONS[1:] if obj.get(key)}
    if not host:
        if door:
            flags = ", ".join(f"--{k.replace('_', '-')}" for k in door)
            _usage(f"{flags} need --host tcp://HOST:PORT (FASTVERIFY_HOST)")
        return ControlClient(obj.get("socket"), timeout=timeout)
    from fastverify import credentials

    scheme, _, hostport = host.partition("://")
    _h, _, port = hostport.rpartition(":")
    if scheme != "tcp" or not _h or not port.isdigit():
        _usage(f"--host {host!r}: expected tcp://HOST:PORT")
    try:
        token_file = door.get("token_file")
        token = credentials.read_client_token(token_file) if token_file else None
        tls = None
        if door.keys() & {"tls_ca", "tls_cert", "tls_key"}:
            tls = credentials.client_context(
                door.get("tls_ca") or "", door.get("tls_cert") or "", door.get("tls_key") or ""
            )
    except credentials.CredentialError as exc:
        _usage(str(exc))
    return ControlClient(tcp=hostport, token=token, tls=tls, timeout=timeout)


def _usage(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_USAGE)


def unavailable_exit(exc: Exception, as_json: bool) -> int:
    """Print why the daemon cannot be reached (one sentence) and return exit code 3 (8:
    it refused this client)."""
    if as_json:
        emit_json({"error": str(exc), "reachable": False})
    else:
        click.echo(f"error: {exc}", err=True)
    return daemon_exit(exc, EXIT_UNAVAILABLE)


def call_daemon(
    ctx: click.Context, ep: Any, *, as_json: bool, timeout: float | None = 30.0, **fields: Any
) -> Any:
    """One call of endpoint `ep` (fastverify.api_models) with `fields`; an unreachable daemon
    or an API error is printed and exits the CLI."""
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        return client_for(ctx, timeout=timeout).call(ep, **fields)
    except DaemonUnavailable as exc:
        sys.exit(unavailable_exit(exc, as_json))
    except ApiError as exc:
        sys.exit(api_error_exit(exc, as_json))


def status_command(name: str, json_help: str | None = None) -> Callable[[Show], click.Command]:
    """A command `name` that reads the daemon's status and hands it, with --json, to the
    function it decorates (`show(st, as_json)`; its docstring is the command's help)."""

    def decorate(show: Show) -> click.Command:
        @click.command(name, help=show.__doc__)
        @json_option(json_help)
        @socket_option
        @click.pass_context
        def command(ctx: click.Context, as_json: bool = False) -> None:
            # the API's models, imported when a command asks the daemon (not for `--version`,
            # `--help` or an offline `profile list`, which import this module too)
            from fastverify.api_models import STATUS

            show(call_daemon(ctx, STATUS, as_json=as_json, timeout=STATUS_TIMEOUT_S), as_json)

        return command

    return decorate


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
    if exc.refused:  # no or a wrong token, or the backoff after failures
        return EXIT_REFUSED
    if status == 409:  # busy, unless the daemon says nothing else is in flight
        return EXIT_PROBLEMS if body.get("busy") is False else EXIT_BUSY
    if status in (400, 422):
        return EXIT_USAGE
    return EXIT_PROBLEMS


@contextmanager
def daemon_run(
    cmd: str,
    *,
    busy: type[BaseException],
    usage: type[BaseException],
    unreachable: Callable[[], str],
    interrupted: str,
) -> Iterator[None]:
    """An experiment run through the daemon (`sweep`, `tune`), its failures as the command's
    exit codes, each printed as `CMD: what`: another experiment's lease (`busy`) 4, the
    errors in `usage` 2, Ctrl-C 130 (`interrupted`: what is said); the daemon unreachable 3,
    its message followed by `unreachable()` (how to go on)."""
    from fastverify.client import DaemonUnavailable

    try:
        yield
    except busy as exc:  # before `usage`: a lease is an error of the experiment's too
        fail(f"{cmd}: {exc}", EXIT_BUSY)
    except usage as exc:
        fail(f"{cmd}: {exc}", EXIT_USAGE)
    except DaemonUnavailable as exc:
        fail(f"{exc}{unreachable()}", daemon_exit(exc, EXIT_UNAVAILABLE))
    except KeyboardInterrupt:
        fail(f"{cmd}: {interrupted}", EXIT_INTERRUPTED)


@contextmanager
def daemon_failures(
    unreachable: str = "{}", answered: str = "daemon: {}", detail: str = ""
) -> Iterator[None]:
    """One exchange with the daemon whose failures end the command: unreachable exit 3 (8:
    it refused this client), `unreachable` saying so (its `{}`: the error); an error answer
    exit 1 (8: a refusal), `answered` saying so (its `{}`: the answer's field `detail`, else
    the error)."""
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        yield
    except DaemonUnavailable as exc:
        fail(unreachable.format(exc), daemon_exit(exc, EXIT_UNAVAILABLE))
    except ApiError as exc:
        said = exc.body.get(detail) if detail else None
        fail(answered.format(said or exc), daemon_exit(exc, EXIT_PROBLEMS))


def describe_op(op: dict[str, Any]) -> str:
    """`switch ring-ll/baseline by uid 1000 (alice) pid 42 fastverifyctl (id 3f2a, running
    12.3 s)`."""
    elapsed = op.get("elapsed_s")
    running = f", running {elapsed:.1f} s" if isinstance(elapsed, int | float) else ""
    by = f" by {op['by']}" if op.get("by") else ""
    return f"{op.get('kind')} {op.get('profile')}/{op.get('mode')}{by} (id {op.get('id')}{running})"
