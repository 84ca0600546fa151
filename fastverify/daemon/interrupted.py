"""Requests a killed daemon never answered: closed by the next daemon's start-up.

Every request is journaled (a `request` record: who asked, what served) before it acts; its
result record (`type: switch`, same id) follows when it ends. A request left without a result
(the daemon was killed -9, or the host lost power, mid-operation) is found at start-up and
closed once the start-up's own operation (the adoption or the start) has settled: result
`interrupted`, reason `daemon_restarted`, `by` who asked, and `outcome`, what became of it:
`adopted` (its engine was adopted and serves what it asked for), `started` (what it asked for
was started again), or `failed` (it did not take effect; `put_back` names what serves instead,
the last good, or nothing).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from fastverify.daemon import events as ev
from fastverify.daemon.controller import Controller
from fastverify.daemon.operations import Operation

log = logging.getLogger("fastverifyd.reconcile")

RESULT, REASON = "interrupted", "daemon_restarted"


def unfinished(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The journal's requests that have no result record, oldest first."""
    finished = {r.get("id") for r in records if r.get("type") == "switch"}
    return [r for r in records if r.get("type") == "request" and r.get("id") not in finished]


def pending(ctl: Controller) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the unfinished requests, the journal they were read from), before start-up asks for
    anything itself."""
    records = ctl.store.read_journal()
    return unfinished(records), records


def close_after(
    ctl: Controller,
    found: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    op: Operation | None,
) -> None:
    """Close the requests `pending` found when `op` (the start-up's operation) ends, right
    after its own record and before its answer; at once when there is none (nothing could be
    started)."""
    requests, records = found
    if not requests:
        return
    if op is None:
        _close(ctl, requests, records, None, None)
        return
    once = threading.Lock()  # held by whichever closes them: the event, or an early end

    def on_event(e: ev.Event) -> None:
        if isinstance(e, ev.OperationFinished) and e.op_id == op.id and once.acquire(False):
            ctl.bus.unsubscribe(on_event)
            _close(ctl, requests, records, op.kind, dict(e.record))

    ctl.bus.subscribe(on_event)
    if op.done and once.acquire(False):
        ctl.bus.unsubscribe(on_event)
        _close(ctl, requests, records, op.kind, dict(op.result) if op.result else None)


def _close(
    ctl: Controller,
    requests: list[dict[str, Any]],
    records: list[dict[str, Any]],
    kind: str | None,
    answer: dict[str, Any] | None,
) -> None:
    ok = answer is not None and answer.get("result") in ("ok", "rolled_back")
    serving = dict(answer.get("serving") or {}) if ok and answer else {}
    for req in requests:
        rec = record(req, records, kind, serving, answer)
        ctl.say(f"{rec['kind']} {rec['profile']}/{rec['mode']} asked by {rec['by']}: "
                f"{rec['message']}", logging.WARNING)  # fmt: skip
        try:
            ctl.store.append_journal(rec)
        except OSError as exc:
            log.error("cannot append to the journal: %s", exc)


def record(
    req: dict[str, Any],
    records: list[dict[str, Any]],
    kind: str | None,
    serving: dict[str, Any],
    answer: dict[str, Any] | None,
) -> dict[str, Any]:
    """The result record that closes `req` (see the module docstring)."""
    target = (req.get("profile"), req.get("mode"))
    now = time.time()
    started = float(req.get("ts") or now)
    # the last trace the killed daemon left of it: a state transition made by it
    last = max([started, *(float(r.get("ts") or 0) for r in records if r.get("op") == req["id"])])
    what = f"{target[0]}/{target[1]}"
    if serving and (serving.get("profile"), serving.get("mode")) == target:
        outcome, put_back = ("adopted" if kind == "adopt" else "started"), None
        after = (
            f"its engine was adopted and serves {what}"
            if outcome == "adopted"
            else f"{what} was started again and serves"
        )
    else:
        outcome = "failed"
        put_back = serving or None
        after = (
            f"it did not take effect; the last good {serving['profile']}/{serving['mode']}"
            " was put back"
            if serving
            else "it did not take effect and nothing serves: "
            + str((answer or {}).get("message") or "the start-up failed")
        )
    return {
        "type": "switch",
        "id": req["id"],
        "kind": req.get("kind"),
        "result": RESULT,
        "reason": REASON,
        "profile": target[0],
        "mode": target[1],
        "message": f"interrupted (daemon restarted): fastverifyd stopped before it answered; "
        f"{after}",
        "outcome": outcome,
        "put_back": put_back,
        "log": None,
        "line": None,
        "by": req.get("by") or "fastverifyd",
        "caller": req.get("caller"),
        "previous": req.get("previous"),
        "serving": {"profile": serving.get("profile"), "mode": serving.get("mode")},
        "started_at": started,
        "interrupted_at": last,
        "finished_at": now,
        "duration_s": round(last - started, 3),
    }
