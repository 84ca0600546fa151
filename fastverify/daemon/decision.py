"""A tuning decision recorded with the daemon (`POST /v1/decision`, `fastverifyctl tune`).

The daemon keeps the newest decision in `decision.json` (state dir), appends it to the
journal as a history record (`kind: "decision"`, `result: "applied"|"recorded"`; never
`ok`, so state recovery from the journal ignores it) and hands it to the exporter as
`fastverify_decision_info{profile,mode,backend,applied} 1`. Checking a body is here;
the facade persists and announces.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from fastverify.config import MODES

_BACKEND = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
WHY_MAX = 2000


def check_decision(
    body: Mapping[str, Any], profile_problem: Callable[[str], str | None]
) -> dict[str, str]:
    """What is wrong with a decision body, field -> message (empty: nothing)."""
    out: dict[str, str] = {}
    problem = profile_problem(str(body.get("profile", "")))
    if problem is not None:
        out["profile"] = problem
    if body.get("mode") not in MODES:
        out["mode"] = f"must be one of {', '.join(MODES)}, got {body.get('mode')!r}"
    if not _BACKEND.match(str(body.get("backend", ""))):
        out["backend"] = (
            f"must be a backend name such as nccl or pcie_ipc, got {body.get('backend')!r}"
        )
    if len(str(body.get("why", ""))) > WHY_MAX:
        out["why"] = f"at most {WHY_MAX} characters"
    al = body.get("accept_length")
    if al is not None and al < 1:
        out["accept_length"] = f"must be >= 1 (bonus token included), got {al!r}"
    return out


def decision_record(body: Mapping[str, Any], now: float | None = None) -> dict[str, Any]:
    """The stored decision (decision.json) from a checked body."""
    rec = {k: body[k] for k in ("profile", "mode", "backend", "applied", "why")}
    for k in (
        "report",
        "accept_length",
        "acceptance_source",
        "tokens_per_second",
        "adaptive_config",
    ):
        if body.get(k) is not None:
            rec[k] = body[k]
    rec["decided_at"] = time.time() if now is None else now
    return rec


def history_record(rec: dict[str, Any]) -> dict[str, Any]:
    """The journal line for a decision (`GET /v1/history` shows it as kind `decision`)."""
    return {
        "type": "switch",
        "kind": "decision",
        "profile": rec["profile"],
        "mode": rec["mode"],
        "backend": rec["backend"],
        "applied": rec["applied"],
        "result": "applied" if rec["applied"] else "recorded",
        "reason": None,
        "message": rec["why"],
        "report": rec.get("report"),
        "started_at": rec["decided_at"],
        "finished_at": rec["decided_at"],
        "duration_s": 0.0,
    }
