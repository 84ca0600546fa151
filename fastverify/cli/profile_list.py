"""`fastverifyctl profile list`: every profile with its source, description and validity.

The daemon answers the listing (`GET /v1/profiles`: its directories, its host, the active
profile) unless the operator names the directories to read here; listing here (no daemon,
an older one, named directories) imports only the profile store, the same loader and
validator as every other command, and the client only when a daemon socket exists.
"""

from __future__ import annotations

import os
from typing import Any

import click

from fastverify.cli.daemon_call import client_for, socket_option
from fastverify.cli.options import json_option
from fastverify.cli.output import emit_json, table
from fastverify.cli.profile_group import make_store, profile, socket_of, user_dir_strs


@profile.command("list")
@json_option("Print a JSON array.")
@socket_option
@click.pass_context
def list_cmd(ctx: click.Context, as_json: bool) -> None:
    """Profiles with their description and source; the active one marked when the daemon
    answers. The daemon's own list (what `profile set` can switch to) unless `profile --dir`
    names the directories to read here."""
    rows, status = None, None
    named = _dirs_named(ctx)
    if not named:
        rows, status = _daemon_listing(ctx)
    known = rows is not None
    if rows is None:
        from fastverify.profiles.listing import listing

        if named:
            status = _daemon_status(ctx)
        known = status is not None
        rows = listing(make_store(ctx), status.get("profile") if status else None, known=known)
    if as_json:
        emit_json(rows)
        _note_other_dirs(ctx, status, named)
        return
    out_rows = []
    for r in rows:
        source = r["source"] + (" (overrides shipped)" if r["overrides_shipped"] else "")
        desc = r["description"]
        if not r["valid"]:
            from fastverify.profiles.listing import first_error

            desc = "INVALID: " + first_error(r)
        out_rows.append(["*" if r["active"] else "", r["name"], source, desc])
    title = None if known else "daemon not reachable: active profile unknown"
    table(["", "NAME", "SOURCE", "DESCRIPTION"], out_rows, title=title, no_wrap=("NAME",))
    _note_other_dirs(ctx, status, named)


def _dirs_named(ctx: click.Context) -> bool:
    """The operator named the directories to list (`profile --dir`, a shipped directory):
    these, not the daemon's."""
    obj, root = ctx.obj or {}, ctx.find_root().obj or {}
    return bool(obj.get("profile_dirs") or root.get("profile_dirs") or obj.get("shipped_dir"))


def _note_other_dirs(ctx: click.Context, status: dict[str, Any] | None, named: bool) -> None:
    """A listing made here (`named` directories, or a daemon older than its own listing)
    whose daemon on this Unix socket reads user profiles elsewhere (its own --config or
    $FASTVERIFY_PROFILE_DIRS): say so, `profile set` would find profiles this list lacks."""
    theirs = ((status or {}).get("daemon") or {}).get("profile_dirs")
    if theirs is None or (ctx.find_root().obj or {}).get("host"):
        return  # no daemon, an older one, or another host's directories
    from fastverify import paths

    ours = user_dir_strs(ctx)
    if [paths.normalize(d) for d in theirs] == ours:
        return
    how = (
        "fastverifyctl profile list (without --dir)"
        if named
        else f"FASTVERIFY_PROFILE_DIRS={os.pathsep.join(theirs)} fastverifyctl profile list"
    )
    click.echo(
        f"note: the daemon reads user profiles from {', '.join(theirs) or '(none)'}, this list "
        f"from {', '.join(ours) or '(none)'}; to list the daemon's: {how}",
        err=True,
    )


def _daemon_listing(ctx: click.Context) -> tuple[Any, dict[str, Any] | None]:
    """(the daemon's listing, None) when it answers one; (None, its status) from a daemon
    older than `GET /v1/profiles`; (None, None) when no daemon answers. The client is
    imported only when the socket exists (or a TCP door is given: --host), so offline
    listing stays fast."""
    client = _client(ctx)
    if client is None:
        return None, None
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        return client.profiles(), None
    except ApiError as exc:
        if exc.status != 404:
            return None, None
    except (DaemonUnavailable, OSError, ValueError):
        return None, None
    return None, _status_of(client)


def _daemon_status(ctx: click.Context) -> dict[str, Any] | None:
    """/v1/status when a daemon answers (the active profile of a listing made here)."""
    client = _client(ctx)
    return None if client is None else _status_of(client)


def _client(ctx: click.Context) -> Any:
    """A client with a short timeout, or None where no daemon socket exists."""
    if not (ctx.find_root().obj or {}).get("host"):
        sock = socket_of(ctx)
        if sock is None:
            from fastverify import paths

            sock = paths.socket_path_str()
        if not os.path.exists(sock):
            return None
    return client_for(ctx, timeout=2.0)


def _status_of(client: Any) -> dict[str, Any] | None:
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        status = client.status()
    except (DaemonUnavailable, ApiError, OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None
