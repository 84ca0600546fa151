"""`fastverifyctl doctor`: everything besides the profile that changes what NCCL sees,
with a fix for each finding, plus the GPU topology and recommended profiles.

Exit codes: 0 nothing to fix (info only), 1 warnings or errors found, 2 usage error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from fastverify.cli.daemon_call import socket_option
from fastverify.cli.options import dir_option, flag, json_option, maybe_count
from fastverify.cli.output import EXIT_OK, EXIT_PROBLEMS, emit_json, table

_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@click.command()
@json_option("Print findings as JSON.")
@click.option(
    "--python",
    "pythons",
    multiple=True,
    help="Also check this interpreter's site paths (the server's; repeatable). "
    "Default: the daemon config's server.python when set.",
)
@dir_option("--home", help="Home directory to check for .nccl.conf (default: $HOME).")
@click.option(
    "--etc",
    "etc_dir",
    type=click.Path(file_okay=False),
    default="/etc",
    show_default=True,
    help="Root of nccl.conf and environment.",
)
@dir_option(
    "--systemd-dir",
    "systemd_dirs",
    help="Unit directories to scan (repeatable; default: the standard ones).",
    multiple=True,
)
@dir_option(
    "--site-dir",
    "site_dirs",
    help="Scan these site directories instead of asking the interpreters.",
    multiple=True,
)
@flag("--no-topology", "Skip nvidia-smi.")
@maybe_count(
    "--tp-size",
    "TP size for SGLang's own NCCL additions (default: the daemon's, else the config's "
    "server.tp_size).",
)
@socket_option
@click.pass_context
def doctor(
    ctx: click.Context,
    as_json: bool,
    pythons: tuple[str, ...],
    home: str | None,
    etc_dir: str,
    systemd_dirs: tuple[str, ...],
    site_dirs: tuple[str, ...],
    no_topology: bool,
    tp_size: int | None,
) -> None:
    """Find every source that changes what a profile means, and recommend profiles."""
    from fastverify.cli.profile_cmds import make_store
    from fastverify.profiles import doctor as doc

    interpreters = list(pythons)
    sglang_args: tuple[str, ...] = ()
    tp_size_given = tp_size
    try:
        from fastverify import config

        server = config.load(None).server
        if not interpreters and server.python:
            interpreters.append(server.python)
        if tp_size is None:
            tp_size = server.tp_size
        sglang_args = tuple(server.extra_args)
    except Exception:  # doctor must run even with a broken config
        pass
    inputs = doc.DoctorInputs(
        env=dict(os.environ),
        home=Path(home) if home else None,
        etc_dir=Path(etc_dir),
        interpreters=interpreters,
        site_dirs=[Path(d) for d in site_dirs] if site_dirs else None,
        check_topology=not no_topology,
        tp_size=tp_size,
        sglang_args=sglang_args,
    )
    if systemd_dirs:
        inputs.systemd_dirs = [Path(d) for d in systemd_dirs]
    ctx.obj = {**(ctx.obj or {}), "profile_dirs": [], "shipped_dir": None}
    store = make_store(ctx)
    # the all-reduce part describes the daemon's engine (its capabilities), else this machine
    from fastverify.cli.engine_view import engine_view

    ev = engine_view(ctx, tp_size=tp_size_given, extra_args=() if tp_size_given else sglang_args)
    daemon_tp = (((ev.status or {}).get("engine") or {}).get("capabilities") or {}).get("tp_size")
    if tp_size_given is None and daemon_tp:  # the daemon's TP, not this shell's config file's
        inputs.tp_size = int(daemon_tp)
    report = doc.run(inputs, store)
    from fastverify.cli.doctor_engine import apply_engine

    apply_engine(
        report,
        ev.host,
        ev.argv,
        ev.status,
        inputs.env,
        {e.name for e in store.entries()},
        interpreters[0] if interpreters else "",
        view=ev.view,
    )
    from fastverify.host.here import doctor_view

    host = doctor_view(ev.status)  # the daemon's fingerprint, and results keyed to another
    findings = sorted(report.findings, key=lambda f: _SEVERITY_ORDER.get(f.severity, 3))
    sglang_rows = [sglang_in_range(py) for py in interpreters or [sys.executable]]
    worst = _worse(report.worst, *(str(r["severity"]) for r in sglang_rows))
    door = _frontdoor(ev.status)
    if as_json:
        fp = {k: v for k, v in host.items() if k != "lines"}
        emit_json({**report.to_dict(), "sglang": sglang_rows, "worst": worst, "fingerprint": fp,
                   "frontdoor": door})  # fmt: skip
    else:
        if findings:
            table(
                ["SEVERITY", "WHAT", "WHERE", "FIX"],
                [[f.severity, f.what, f.where, f.fix] for f in findings],
                title="fastverify doctor",
            )
        if report.recommendations:
            click.echo("Recommended profiles (try in this order):")
            for i, r in enumerate(report.recommendations, start=1):
                click.echo(f"  {i}. {r.profile}: {r.reason}")
        if report.engine_env is not None:
            tp = report.engine_env["tp_size"]
            lines = report.engine_env["lines"] or [
                f"SGLang {report.engine_env['version']} adds nothing to NCCL's environment"
            ]
            click.echo(f"SGLang's own NCCL settings at TP {tp} (on this environment's NCCL_*):")
            for line in lines:
                click.echo(f"  {line}")
        if report.allreduce is not None:
            ar = report.allreduce
            view = (report.engine or {}).get("view") or "this environment"
            click.echo(f"TP all-reduce backend at TP {ar['tp_size']} ({view}):")
            serving = f" (profile {ar['profile']}, {ar.get('evidence') or 'reported'})"
            click.echo(f"  {ar['description']}{serving if ar.get('profile') else ''}")
            can = [b["backend"] for b in ar.get("possible_backends") or [] if b["possible"]]
            click.echo(f"  backends possible: {', '.join(can) or '-'}")
            for note in ar.get("notes") or []:
                click.echo(f"  note: {note}")
        for row in sglang_rows:
            click.echo(f"SGLang ({row['python']}): {row['message']}")
        if door is not None:
            click.echo(door["line"])
        click.echo("\n".join(host["lines"]))
        click.echo(f"status: {worst}")
    sys.exit(EXIT_PROBLEMS if worst in ("error", "warning") else EXIT_OK)


def _frontdoor(status: dict | None) -> dict | None:
    """The daemon's front door and which mode this host's memory allows a switch now:
    {mode, standby (its decision: mode, why), line}; None when off or no daemon answers."""
    door = (status or {}).get("frontdoor") or {}
    if door.get("mode") in (None, "off"):
        return None
    fit = door.get("standby") or {}
    line = f"front door: mode {door['mode']}" + (f"; {fit['why']}" if fit else "")
    if door["mode"] == "hold" and fit.get("mode") == "standby":
        line += ' ([frontdoor] mode = "standby" would start the new engine beside this one)'
    return {"mode": door["mode"], "standby": fit or None, "line": line}


_RANK = {"ok": 0, "info": 1, "warning": 2, "error": 3}


def _worse(*levels: str) -> str:
    return max(levels, key=lambda lv: _RANK.get(lv, 0))


def sglang_in_range(python: str) -> dict[str, object]:
    """The SGLang installed for `python` (package metadata only) against the supported range:
    {python, version, facts_version, supported, severity, message}."""
    from fastverify.engines.sglang import installed_version
    from fastverify.sglang import facts as f

    version = installed_version(python)
    row: dict[str, object] = {"python": python, "version": version, "facts_version": None,
                              "supported": False}  # fmt: skip
    span = f.range_text()
    if version is None:
        msg = f"not installed (the sim plays SGLang; supported range {span})"
        return {**row, "severity": "info", "message": msg}
    try:
        facts = f.resolve(version)
    except f.VersionTooOld as exc:
        return {**row, "severity": "error", "message": f"{exc}; fastverifyd refuses to start"}
    row.update(facts_version=facts.facts_version, supported=facts.supported)
    if facts.warning:
        return {**row, "severity": "warning", "message": f"{version}: {facts.warning}"}
    msg = f"{version}, in the supported range ({span}; facts {facts.facts_version})"
    return {**row, "severity": "ok", "message": msg}
