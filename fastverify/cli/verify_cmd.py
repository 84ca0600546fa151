"""`fastverifyctl verify`: run the daemon's after-READY verifiers again on the serving engine
(GET /v1/verify) and show each verdict with its evidence: the processes whose environment
was read, the variables compared, NCCL's own confirmations, the all-reduce backend.

Exit codes (fastverify.cli.output): 0 every verifier ok (or skipped), 1 one failed (or
nothing serves), 3 the daemon is not reachable, 4 an operation is in flight.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import click

from fastverify.api_models import VERIFY
from fastverify.cli.daemon_call import call_daemon, socket_option
from fastverify.cli.options import json_option
from fastverify.cli.output import EXIT_OK, EXIT_PROBLEMS, emit_json, table

MARK = {"ok": "ok", "failed": "FAILED", "skipped": "skipped"}


def _pairs(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items())) or "-"


def _process_detail(p: Mapping[str, Any]) -> str:
    parts = [p["error"]] if p.get("error") else []
    if p.get("missing"):
        parts.append(f"missing {', '.join(p['missing'])}")
    for k, (want, got) in p.get("different", {}).items():
        parts.append(f"{k}={got} (profile: {want})")
    parts += [f"{k}={v} not in the profile" for k, v in p.get("unexpected", {}).items()]
    for k, (want, got) in p.get("overridden", {}).items():
        parts.append(f"{k}={got} (the engine replaced the profile's {want})")
    if p.get("engine_set"):
        parts.append(f"added by the engine: {_pairs(p['engine_set'])}")
    return "; ".join(parts) or "holds the profile"


def _nccl_profile(name: str, ev: Mapping[str, Any]) -> str:
    """What the profile says of a variable NCCL confirmed."""
    bad = {**(ev.get("mismatched") or {}), **(ev.get("overridden") or {})}
    if name in bad:
        return str(bad[name][0])
    if name in (ev.get("engine_added") or {}):
        return "(added by the engine)"
    if name in (ev.get("not_in_profile") or {}):
        return "(not in the profile)"
    return "same"


def _evidence(name: str, ev: Mapping[str, Any]) -> None:
    """One verifier's evidence, as a table where it has rows."""
    if name == "env" and ev.get("processes") is not None:
        click.echo(f"  expected in every process: {_pairs(ev.get('expected') or {})}")
        rows = [
            (p["pid"], p.get("name"), "ok" if p.get("ok") else "differs", _process_detail(p))
            for p in ev["processes"]
        ]
        table(["pid", "process", "verdict", "detail"], rows, no_wrap=["pid"])
    elif name == "nccl" and ev.get("confirmed") is not None:
        confirmed = [(k, v, _nccl_profile(k, ev)) for k, v in sorted(ev["confirmed"].items())]
        title = f"NCCL's 'set by environment' lines ({len(ev.get('files') or [])} file(s))"
        table(["variable", "NCCL says", "profile"], confirmed, title=title)
    elif name == "profile" and ev.get("different"):
        drifted = [(k, got, want) for k, (want, got) in ev["different"].items()]
        table(["variable", "engine runs", "profile now"], drifted)
    else:
        shown = {k: v for k, v in ev.items() if v not in (None, "", [], {})}
        for k, v in shown.items():
            click.echo(f"  {k}: {_pairs(v) if isinstance(v, Mapping) else v}")


@click.command("verify")
@json_option("Print every verifier's verdict as JSON.")
@socket_option
@click.pass_context
def verify(ctx: click.Context, as_json: bool) -> None:
    """Re-run the verifiers on the serving engine: environments, NCCL, all-reduce."""
    answer = call_daemon(ctx, VERIFY, as_json=as_json, timeout=60.0)
    code = EXIT_OK if answer.get("ok") else EXIT_PROBLEMS
    if as_json:
        emit_json(answer)
        sys.exit(code)
    found = answer.get("verifiers") or []
    click.echo(f"{answer.get('profile')}/{answer.get('mode')}, engine pid {answer.get('pid')}")
    table(
        ["verifier", "result", "message"],
        [(f["name"], MARK.get(f["status"], f["status"]), f["message"]) for f in found],
    )
    for f in found:
        if f.get("evidence") and f["status"] != "skipped":
            click.echo(f"\n{f['name']}: {MARK.get(f['status'], f['status'])}")
            if f.get("line"):
                click.echo(f"  line: {f['line']}")
            _evidence(f["name"], f["evidence"])
    click.echo(f"\n{answer.get('message')}")
    sys.exit(code)
