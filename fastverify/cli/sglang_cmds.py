"""`fastverifyctl sglang facts [VERSION]` and `fastverifyctl sglang versions`: the facts of
each SGLang release fastverify knows (fastverify/sglang/facts, read from each release's
wheel), and the supported range with what differs between releases.

Without VERSION, `facts` asks the daemon which SGLang its server runs (status `sglang`).
Only the one data file asked for is read; nothing heavy is imported.
"""

from __future__ import annotations

from typing import Any

import click

from fastverify.cli.daemon_call import socket_option
from fastverify.cli.groups import SuggestingGroup
from fastverify.cli.options import json_option
from fastverify.cli.output import EXIT_USAGE, emit_json, fail, table


@click.group("sglang", cls=SuggestingGroup)
def sglang() -> None:
    """SGLang releases: their facts (flags, metrics, spans, logs) and the supported range."""


@sglang.command("facts")
@click.argument("version", required=False)
@json_option("Print the facts as JSON.")
@socket_option
@click.pass_context
def facts_cmd(ctx: click.Context, version: str | None, as_json: bool) -> None:
    """One release's facts (default: the SGLang the daemon's server runs)."""
    from fastverify.sglang import facts as f

    if version is None:
        from fastverify.api_models import STATUS
        from fastverify.cli.daemon_call import call_daemon

        st = call_daemon(ctx, STATUS, as_json=as_json, timeout=10.0)
        sg = st.get("sglang") or {}
        if not sg.get("version"):
            fail(
                f"the daemon did not report its server's SGLang ({sg.get('error') or 'unknown'});"
                " name a VERSION",
                EXIT_USAGE,
            )
        version = str(sg["version"])
    try:
        facts = f.resolve(version)
    except f.VersionTooOld as exc:
        fail(f"error: {exc}", EXIT_USAGE)
    if as_json:
        emit_json(facts.to_json())
        return
    _print(facts)


def _print(facts: object) -> None:
    from fastverify.sglang.facts import SGLangFacts

    assert isinstance(facts, SGLangFacts)
    feats = facts.features
    click.echo(f"SGLang {facts.version}: facts of {facts.facts_version} ({_where(facts)})")
    if facts.warning:
        click.echo(f"WARNING: {facts.warning}")
    click.echo(
        f"flag generation: {facts.flag_generation}; verify span: "
        f"{facts.verify_stage or 'none (no step spans)'}; server info: "
        f"{facts.server_info_endpoint}"
    )
    on = [k for k, v in feats.items() if v is True]
    off = [k for k, v in feats.items() if v is False]
    click.echo(f"features: {', '.join(on) or '-'}")
    click.echo(f"lacks:    {', '.join(off) or '-'}")
    click.echo(f"flags:    {len(facts.flags)} long flags (--json lists them)")
    nccl = facts.env["nccl_added"]
    click.echo(f"NCCL variables the server sets: {', '.join(nccl) or '-'}")
    click.echo(f"SGLANG_* variables: {len(facts.env['sglang_vars'])}")
    click.echo(f"log formats: {', '.join(facts.log_formats)}")
    rows = [(name, ", ".join(labels)) for name, labels in facts.metrics.items()]
    table(["metric", "labels"], rows, title=f"{len(rows)} sglang:* metrics")


def _where(facts: object) -> str:
    from fastverify.sglang.facts import SGLangFacts

    assert isinstance(facts, SGLangFacts)
    if facts.supported:
        return "in the supported range"
    return "NOT SUPPORTED: newer than the range"


@sglang.command("versions")
@json_option("Print the range as JSON.")
def versions_cmd(as_json: bool) -> None:
    """The SGLang releases fastverify supports and what differs between them."""
    from fastverify.sglang import facts as f
    from fastverify.sglang import metrics as m

    # the series fastverify reads (fastverify.sglang.metrics)
    watched = (*m.SCHEDULER_GAUGES, *m.SCHEDULER_COUNTERS, *m.TOKENIZER_COUNTERS,
               *m.TOKENIZER_GAUGES, *m.HISTOGRAMS)  # fmt: skip
    rows: list[dict[str, Any]] = []
    prev = None
    for v in f.known_versions():
        facts = f.resolve(v)
        feats = facts.features
        n_flags, n_metrics = len(facts.flags), len(facts.metrics)
        changed: list[str] = []
        if prev is not None:
            for k, val in feats.items():
                if prev.features.get(k) != val:
                    changed.append(f"{k}={val}")
            added = sorted(set(facts.env["nccl_added"]) - set(prev.env["nccl_added"]))
            if added:
                changed.append("sets " + ",".join(added))
            if facts.decode_old_form != prev.decode_old_form:
                changed.append("decode line 'Decode batch, ...'")
            if facts.decode_accept_rate and not prev.decode_accept_rate:
                changed.append("decode line 'accept rate'")
            new_metrics = sorted(
                n for n in watched if facts.has_metric(n) and not prev.has_metric(n)
            )
            if new_metrics:
                changed.append("metrics " + ",".join(new_metrics))
        rows.append(
            {
                "version": v,
                "flag_generation": facts.flag_generation,
                "pcie_ipc_allreduce": bool(feats.get("pcie_ipc_allreduce")),
                "adaptive_speculation": bool(feats.get("adaptive_speculation")),
                "verify_span": facts.verify_stage,
                "flags": n_flags,
                "metrics": n_metrics,
                "changed": changed,
            }
        )
        prev = facts
    if as_json:
        emit_json({"oldest": f.oldest(), "newest": f.newest(), "versions": rows})
        return
    table(
        ["version", "flags gen", "PCIe-IPC", "adaptive spec", "verify span", "#flags",
         "#metrics", "changed from the release before"],
        [
            (r["version"], r["flag_generation"], _yes(r["pcie_ipc_allreduce"]),
             _yes(r["adaptive_speculation"]), r["verify_span"] or "-", r["flags"], r["metrics"],
             "; ".join(r["changed"]) or "-")
            for r in rows
        ],
        title=f"SGLang {f.range_text()} (newer: newest facts + a warning; "
        "older: refused)",
    )  # fmt: skip


def _yes(value: bool) -> str:
    return "yes" if value else "no"
