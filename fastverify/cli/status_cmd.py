"""`fastverifyctl status`: the daemon's and the engine's state, in words or as JSON.

Kept apart from the other daemon commands so that this most-run command imports only click,
the output helpers and the client (start-up time: see benchmarks/bench_cli.py). Exit 0
whenever the daemon answered (read `state` for health), 3 when it cannot be reached.
"""

from __future__ import annotations

import time
from typing import Any

import click

from fastverify.api_models import PART_SUMMARY
from fastverify.cli.daemon_call import describe_op, status_command
from fastverify.cli.output import emit_json


def _ago(ts: float | None) -> str:
    if not ts:
        return "-"
    d = max(0.0, time.time() - ts)
    if d < 120:
        return f"{d:.0f}s ago"
    if d < 7200:
        return f"{d / 60:.0f}m ago"
    return f"{d / 3600:.1f}h ago"


def _recovery(rec: dict[str, Any]) -> str:
    """`1/3 retries of ring-ll/baseline (the last good profile), next in 118 s`
    (daemon/recovery.py)."""
    target = rec.get("target") or {}
    what = f"{target.get('profile')}/{target.get('mode')} ({target.get('why')})"
    text = f"{rec.get('retries', 0)}/{rec.get('limit', 0)} retries of {what}"
    if rec.get("spent"):
        text += ": spent (FAILED stays; declarative: /livez answers 503)"
    elif rec.get("running"):
        text += ", one running"
    elif rec.get("next_in_s") is not None:
        text += f", next in {rec['next_in_s']:.0f} s"
    if rec.get("last"):
        text += f" (last: {rec['last']})"
    return text


def _clock(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


@status_command("status", "Print the daemon's status as JSON.")
def status(st: dict[str, Any], as_json: bool) -> None:
    """Daemon and engine state."""
    if as_json:
        emit_json(st)
        return
    eng = st.get("engine") or {}
    sim = " (simulated)" if eng.get("simulated") else ""
    lines = [
        f"state:      {st.get('state')} since {_clock(st.get('since'))} ({_ago(st.get('since'))})",
        f"profile:    {st.get('profile')} ({st.get('mode')})",
        *(
            [
                "weights:    dummy (a trial: random output, timings only; "
                f"`fastverifyctl profile set {st.get('profile')}` loads the real weights)"
            ]
            if st.get("trial")
            else []
        ),
        f"last good:  {st.get('last_good') or '-'}"
        + (f" ({st.get('last_good_mode')})" if st.get("last_good_mode") else ""),
        f"engine:     {eng.get('name')}{sim} pid {eng.get('pid') or '-'} {eng.get('url') or ''}",
        f"            {eng.get('reason')}",
    ]
    sg = st.get("sglang") or {}
    if sg.get("version"):
        where = "in the supported range" if sg.get("supported") else "NOT SUPPORTED"
        lines.append(f"sglang:     {sg['version']} (facts {sg.get('facts_version')}; {where})")
    if sg.get("warning"):
        lines.append(f"WARNING:    {sg['warning']}")
    if eng.get("adopted"):  # no load of this daemon's: the time is its wait for readiness
        waited = eng.get("start_seconds") or 0
        lines.append("adopted:    from the previous fastverifyd (its load was not timed here;"
                     f" it answered {waited:.2f} s after the adoption)")  # fmt: skip
    elif eng.get("start_seconds"):
        by = " (by /model_info and /health_generate)" if eng.get("ready_by") == "endpoints" else ""
        lines.append(f"ready in:   {eng['start_seconds']:.2f} s{by}")
    lines += _parts(st)
    if st.get("tokens_per_second"):
        lines.append(f"throughput: {st['tokens_per_second']:.1f} tok/s")
    forced = eng.get("forced_acceptance")
    if forced:  # every acceptance figure below is SGLang's choice, not the drafter's
        lines.append(f"acceptance: {forced['label']} ({forced.get('method')}): SGLang sets "
                     "the accept length; figures are labelled forced, not measured")  # fmt: skip
    spec = st.get("speculation") or {}
    if spec.get("fixed_steps") is not None:  # EAGLE-3 always runs its configured steps
        lines.append(f"draft steps: {spec['fixed_steps']} (fixed: --speculative-num-steps)")
    elif spec.get("active_steps") is not None:  # adaptive moves between its tiers' candidates
        lines.append(f"draft steps: {spec['active_steps']} now (adaptive)")
        at = spec.get("seconds_at_steps") or {}
        spent = ", ".join(f"{k} steps {v:.0f} s" for k, v in sorted(at.items(), key=lambda x:
                                                                      int(x[0])))  # fmt: skip
        if spent:
            lines.append(f"time at steps: {spent} (decoding, every {st.get('profile')}/"
                         f"{st.get('mode')} engine since the daemon started)")  # fmt: skip
    for steps, row in sorted((spec.get("live_acceptance") or {}).items()):
        curve = "  ".join(f"{k}:{v:.2f}" for k, v in row["accept_length"].items())
        lines.append(f"live accept: at {steps} steps, {row['requests']} finished requests: "
                     f"L(k) {curve}")  # fmt: skip
    if spec.get("plan_stale"):
        lines.append(f"plan:       STALE: {spec['plan_why']}; re-plan: {spec['replan']}")
    ar = eng.get("allreduce") or {}
    if ar.get("description") and eng.get("pid"):  # confirmed at verify (TP all-reduces)
        how = f" [{ar['evidence']}]" if ar.get("evidence") else ""
        lines.append(f"all-reduce: {ar['description']}{how}")
    caps = eng.get("capabilities") or {}
    if caps.get("possible_backends"):  # the engine's own capabilities (one source of truth)
        can = ", ".join(b["backend"] for b in caps["possible_backends"] if b["possible"])
        lines.append(f"backends:   possible: {can} ({(caps.get('host') or {}).get('view')})")
    checks = eng.get("health") or {}
    if checks.get("failed_checks"):
        lines.append(f"health:     {checks['summary']}; /readyz answers 503")
    if eng.get("log"):
        lines.append(f"log:        {eng['log']}")
    flight = st.get("switch_in_flight")
    if flight:
        lines.append(f"in flight:  {describe_op(flight)}")
    lines += _lease_and_decision(st)
    prog = eng.get("progress") or {}
    if st.get("state") not in ("READY", "STOPPED", "FAILED") and prog.get("phase"):
        pct = prog.get("percent")
        pct_s = f" {pct:.0f}%" if isinstance(pct, int | float) else ""
        lines.append(f"progress:   {prog['phase']}{pct_s}: {prog.get('message') or ''}".rstrip())
    fail_ = st.get("last_failure")
    if fail_:
        label = "last failure:" if fail_.get("current", True) else "earlier failure:"
        when = _clock(fail_.get("at"))
        if fail_.get("current", True):
            past = ""
        elif fail_.get("kept_serving"):
            past = f" (at {when}, a standby start; the engine serving now served on)"
        else:
            past = f" (at {when}, before the engine serving now started)"
        lines.append(f"{label} {fail_.get('reason')}: {fail_.get('message')}{past}")
        if fail_.get("log"):
            lines.append(f"              log: {fail_['log']}")
    restarts = st.get("restarts") or {}
    if restarts.get("total"):
        by = ", ".join(f"{k}={v}" for k, v in sorted((restarts.get("by_reason") or {}).items()))
        lines.append(f"restarts:   {restarts['total']} ({by})")
    rec = st.get("recovery") or {}
    if rec.get("retries") or rec.get("next_in_s") is not None or rec.get("spent"):
        lines.append(f"recovery:   {_recovery(rec)}")
    decl = st.get("declarative")
    if decl:
        lines.append(
            f"declared:   {decl.get('profile')} ({decl.get('mode')}) by {decl.get('source') or '-'}"
        )
        if decl.get("canary"):
            can = decl["canary"]
            lines.append(
                f"canary:     {can.get('profile')} ({can.get('mode')}) since "
                f"{_clock(can.get('since'))}: this pod differs from its manifest on purpose"
            )
    cfg = st.get("config") or {}
    if cfg.get("error"):
        lines.append(f"config:     {cfg['error']}")
    for finding in st.get("findings") or []:
        lines.append(f"note:       {finding}")
    click.echo("\n".join(lines))


def _parts(st: dict[str, Any]) -> list[str]:
    """The lines each of the daemon's parts says of itself (its status section's summary)."""
    return [
        line
        for name in st.get("parts") or []
        for line in (st.get(name) or {}).get(PART_SUMMARY) or []
    ]


def _lease_and_decision(st: dict[str, Any]) -> list[str]:
    """The experiment holding the daemon (its lease) and the tuning decision: whether it is
    what serves now."""
    out = []
    lease = st.get("lease")
    if lease:
        from fastverify.cli.term import safe

        pid = f"pid {lease['pid']}, " if lease.get("pid") else ""
        about = safe(str(lease.get("description") or "-"), newlines=False)  # one line
        out.append(
            f"experiment: {lease.get('experiment')} running ({pid}since "
            f"{_clock(lease.get('since'))}): {about}; other "
            "clients' switches are refused (409) unless --force"
        )
    dec = st.get("decision")
    if dec:
        what = f"{dec.get('profile')}/{dec.get('mode')} backend {dec.get('backend')}"
        when = f"decided {_clock(dec.get('decided_at'))}"
        if dec.get("serving"):
            out.append(f"decision:   {what} ({when}): serving")
        else:
            out.append(
                f"decision:   {what} ({when}): NOT serving ({st.get('profile')}/"
                f"{st.get('mode')} serves; `fastverifyctl profile set {dec.get('profile')} "
                f"--mode {dec.get('mode')}` puts it back)"
            )
    return out
