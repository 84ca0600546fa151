"""`fastverifyctl status | mode | restart | logs | history | server`: daemon commands.

All of them talk to fastverifyd's control API only. Exit codes (fastverify.cli.output):
0 ok, 1 the daemon reported a failure (or `server check` rejected the argv, or `cancel`
found nothing in flight), 2 usage / invalid value, 3 daemon unreachable, 4 busy (another
operation in flight), 5 connection lost, 7 cancelled, 130 interrupted.
`status` exits 0 whenever the daemon answered (read `state` for health).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from fastverify import api_models as m
from fastverify.cli.daemon_call import (
    STATUS_TIMEOUT_S,
    api_error_exit,
    call_daemon,
    client_for,
    socket_option,
    status_command,
    unavailable_exit,
)
from fastverify.cli.groups import SuggestingGroup
from fastverify.cli.options import Decorator, follow_options, json_option, stack
from fastverify.cli.output import emit_json
from fastverify.cli.profile_switch import EXIT_FAILED, _cancel, run_operation
from fastverify.cli.status_cmd import _clock
from fastverify.config import MODES


@click.group("mode", cls=SuggestingGroup, invoke_without_command=True)
@json_option("Without a command: `mode get --json`.")
@socket_option
@click.pass_context
def mode(ctx: click.Context, as_json: bool) -> None:
    """Get or set the decoding mode (baseline|eagle3|adaptive)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(mode_get, as_json=as_json)


@status_command("get")
def mode_get(st: dict[str, Any], as_json: bool) -> None:
    """Print the active mode."""
    if as_json:
        emit_json({"mode": st.get("mode"), "profile": st.get("profile"), "state": st.get("state")})
    else:
        click.echo(st.get("mode"))


mode.add_command(mode_get)


def _start_options(what: str) -> Decorator:
    """--timeout, --no-wait, --queue, --force: how `mode set` and `restart` start the engine
    (`what`: what --no-wait returns after the daemon accepted)."""
    return stack(
        click.option(
            "--timeout",
            "timeout_s",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="Readiness timeout for this start in seconds (then roll back).",
        ),
        click.option(
            "--no-wait", is_flag=True, help=f"Return once the daemon accepted the {what}."
        ),
        click.option(
            "--queue", is_flag=True, help="Wait for an operation in flight instead of failing."
        ),
        click.option(
            "--force", is_flag=True, help="Even while a sweep or tune holds the daemon (its lease)."
        ),
    )


@mode.command("set")
@click.argument("value", type=click.Choice(list(MODES)))
@_start_options("change")
@click.option(
    "--canary",
    is_flag=True,
    help="Declarative daemon (Kubernetes pod): leave the manifest's mode on purpose.",
)
@follow_options
@socket_option
@click.pass_context
def mode_set(
    ctx: click.Context,
    value: str,
    timeout_s: float | None,
    no_wait: bool,
    queue: bool,
    force: bool,
    canary: bool,
    **follow: bool,
) -> None:
    """Restart the engine in mode VALUE with the active profile (rolls back on failure)."""
    body = {"mode": value, "queue": queue, "force": force, "canary": canary or None,
            "timeout_s": timeout_s or None}  # fmt: skip
    sys.exit(run_operation(ctx, m.SET_MODE, body, no_wait=no_wait, **follow))


@click.command("restart")
@_start_options("restart")
@follow_options
@socket_option
@click.pass_context
def restart(
    ctx: click.Context,
    timeout_s: float | None,
    no_wait: bool,
    queue: bool,
    force: bool,
    **follow: bool,
) -> None:
    """Restart the engine with the active profile and mode."""
    body = {"queue": queue, "force": force, "timeout_s": timeout_s or None}
    sys.exit(run_operation(ctx, m.RESTART, body, no_wait=no_wait, **follow))


@click.command("cancel")
@json_option("Print the daemon's answer as JSON.")
@socket_option
@click.pass_context
def cancel(ctx: click.Context, as_json: bool) -> None:
    """Stop the switch (or mode change, restart) in flight; the previous profile is put back.

    Exit 0 cancelled, 1 nothing in flight, 3 daemon unreachable.
    """
    sys.exit(_cancel(client_for(ctx), as_json))


@click.group("logs", cls=SuggestingGroup, invoke_without_command=True)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("-n", "lines", type=click.IntRange(min=0), default=50, show_default=True)
@json_option("One JSON object per line.")
@socket_option
@click.pass_context
def logs(ctx: click.Context, follow: bool, lines: int, as_json: bool) -> None:
    """Show (or follow) the daemon's and engine's log."""
    if ctx.invoked_subcommand is not None:
        return
    import json

    from fastverify.client import ApiError, DaemonUnavailable

    try:
        events = client_for(ctx, timeout=None).logs(n=lines, follow=follow,
                                                     answer_timeout=STATUS_TIMEOUT_S)  # fmt: skip
        for ev in events:
            if as_json:
                click.echo(json.dumps(ev))
            else:
                mark = "*" if ev.get("source") == "daemon" else "|"
                stamp = time.strftime("%H:%M:%S", time.localtime(ev.get("ts", 0)))
                click.echo(f"{stamp} {mark} {ev.get('line')}")
    except DaemonUnavailable as exc:
        sys.exit(unavailable_exit(exc, as_json))
    except ApiError as exc:
        sys.exit(api_error_exit(exc, as_json))
    except KeyboardInterrupt:
        pass


@click.command("history")
@click.option(
    "-n",
    "limit",
    type=click.IntRange(min=0),
    default=0,
    help="Only the last N records (0: all, read from the daemon a page at a time).",
)
@json_option()
@socket_option
@click.pass_context
def history(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Switch journal: every start, switch, rollback and crash restart, and who asked
    ("by": uid, pid and command on the Unix socket; certificate subject or token name on
    TCP; fastverifyd for its own start-up and crash restarts)."""
    from fastverify.cli.output import table
    from fastverify.cli.switch_figures import clients_cell
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        records = client_for(ctx, timeout=30.0).history(limit or None)
    except DaemonUnavailable as exc:
        sys.exit(unavailable_exit(exc, as_json))
    except ApiError as exc:
        sys.exit(api_error_exit(exc, as_json))
    if as_json:
        emit_json(records)
        return
    rows = [
        (
            _clock(r.get("started_at")),
            r.get("kind"),
            f"{r.get('profile')}/{r.get('mode')}",
            _weights(r),
            r.get("result"),
            r.get("reason") or "",
            f"{r.get('duration_s', 0):.2f}s",
            clients_cell(r),
            r.get("by") or "",
            r.get("log") or "",
        )
        for r in records
    ]
    table(["started", "kind", "profile/mode", "weights", "result", "reason", "took", "clients",
           "by", "log"], rows)  # fmt: skip


def _weights(r: dict[str, Any]) -> str:
    """`dummy (trial)`, `dummy (trial, 2 steps)` for a timing trial's own draft steps."""
    if r.get("weights") != "dummy":
        return r.get("weights") or ""
    steps = r.get("eagle3_steps")
    return f"dummy (trial, {steps} step{'s' * (steps != 1)})" if steps else "dummy (trial)"


@click.group("server", cls=SuggestingGroup)
def server() -> None:
    """Server argv: show and check with SGLang's parser."""


@server.command("check")
@click.option("--profile", default=None, help="Profile (default: the active one).")
@click.option("--mode", type=click.Choice(list(MODES)), default=None)
@json_option()
@socket_option
@click.pass_context
def server_check(ctx: click.Context, profile: str | None, mode: str | None, as_json: bool) -> None:
    """Print the server argv the daemon would run and the engine parser's verdict.

    Exit 0 when accepted (or when no parser is available to check), 1 when rejected.
    """
    import shlex

    out = call_daemon(ctx, m.SERVER_ARGV, as_json=as_json, timeout=600, check=True,
                      profile=profile or None, mode=mode or None)  # fmt: skip
    check = out.get("check") or {}
    if as_json:
        emit_json(out)
    else:
        click.echo(f"engine:  {out.get('engine')}{' (simulated)' if out.get('simulated') else ''}")
        click.echo(f"profile: {out.get('profile')} ({out.get('mode')})")
        click.echo("argv:    " + shlex.join(out.get("argv") or []))
        verdict = {True: "ok", False: "REJECTED", None: "not checked"}[check.get("ok")]
        click.echo(f"check:   {verdict}: {check.get('message')}")
    if check.get("ok") is False:
        sys.exit(EXIT_FAILED)


# `fastverifyctl logs parse FILE`: offline log parsing (cli/logparse_cmd.py).
from fastverify.cli.logparse_cmd import parse as _logs_parse  # noqa: E402

logs.add_command(_logs_parse)
