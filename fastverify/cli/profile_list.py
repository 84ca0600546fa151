"""`fastverifyctl profile list`: every profile with its source, description and validity.

Kept apart from the other profile commands so that listing imports only the profile
store (the same loader and validator as every other command) and, when a daemon socket
exists, the client that asks which profile is active.
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
    """Profiles with their description and source; the active one marked when the daemon answers."""
    store = make_store(ctx)
    status = _daemon_status(ctx)
    active = status.get("profile") if status else None
    rows: list[dict[str, Any]] = []
    for entry, prof, problems in store.list_entries():
        errors = [p for p in problems if p.severity == "error"]
        desc = prof.description if prof else _raw_description(entry)
        row: dict[str, Any] = {
            "name": entry.name,
            "description": desc,
            "source": entry.source,
            "path": entry.file,
            "overrides_shipped": entry.shadows_file is not None,
            "shadows": entry.shadows_file,
            "valid": not errors,
            "problems": [p.to_dict() for p in problems],
            "tags": list(prof.tags) if prof else [],
            "requires": dict(prof.requires) if prof else {},
            "extends": prof.extends if prof else None,
        }
        if status is not None:
            row["active"] = entry.name == active
        rows.append(row)
    if as_json:
        emit_json(rows)
        _note_other_dirs(ctx, status)
        return
    out_rows = []
    for r in rows:
        source = r["source"] + (" (overrides shipped)" if r["overrides_shipped"] else "")
        desc = r["description"] if r["valid"] else "INVALID: " + _first_error(r["problems"])
        mark = "*" if r.get("active") else ""
        out_rows.append([mark, r["name"], source, desc])
    title = None
    if status is None:
        title = "daemon not reachable: active profile unknown"
    table(["", "NAME", "SOURCE", "DESCRIPTION"], out_rows, title=title, no_wrap=("NAME",))
    _note_other_dirs(ctx, status)


def _note_other_dirs(ctx: click.Context, status: dict[str, Any] | None) -> None:
    """Where the daemon on this Unix socket reads user profiles elsewhere (its own --config or
    $FASTVERIFY_PROFILE_DIRS), say so: `profile set` would find profiles this list lacks."""
    from fastverify import paths

    theirs = ((status or {}).get("daemon") or {}).get("profile_dirs")
    if theirs is None or (ctx.find_root().obj or {}).get("host"):
        return  # no daemon, an older one, or another host's directories
    ours = user_dir_strs(ctx)
    if [paths.normalize(d) for d in theirs] == ours:
        return
    click.echo(
        f"note: the daemon reads user profiles from {', '.join(theirs) or '(none)'}, this list "
        f"from {', '.join(ours) or '(none)'}; to list the daemon's: "
        f"FASTVERIFY_PROFILE_DIRS={os.pathsep.join(theirs)} fastverifyctl profile list",
        err=True,
    )


def _daemon_status(ctx: click.Context) -> dict[str, Any] | None:
    """/v1/status when a daemon answers; the client is imported only when the socket
    exists (or a TCP door is given: --host), so offline listing stays fast."""
    if (ctx.find_root().obj or {}).get("host"):
        from fastverify.client import ApiError, DaemonUnavailable

        try:
            status = client_for(ctx, timeout=2.0).status()
        except (DaemonUnavailable, ApiError, OSError, ValueError):
            return None
        return status if isinstance(status, dict) else None
    sock = socket_of(ctx)
    if sock is None:
        from fastverify import paths

        sock = paths.socket_path_str()
    if not os.path.exists(sock):
        return None
    from fastverify.client import try_status

    status = try_status(sock)
    return status if isinstance(status, dict) else None


def _first_error(problems: list[dict[str, Any]]) -> str:
    for p in problems:
        if p["severity"] == "error":
            return f"{p['message']} (line {p['line']})" if p.get("line") else p["message"]
    return ""


def _raw_description(entry: Any) -> str:
    from fastverify.profiles import envfile

    return envfile.parse_file(entry.file, entry.root_dir).meta.get("description", (0, ""))[1]
