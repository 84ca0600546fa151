"""Verification, 4 of 4 (verifier.py tells the story): `GET /v1/verify` (`fastverifyctl
verify`), the after-READY verifiers again, on the engine that serves now, each reported
(ok / failed / skipped, with its evidence).

Read-only: the engine keeps serving whatever the verdict (the answer says what drifted;
`fastverifyctl restart` or a switch acts on it). Refused with 409 while nothing serves or
an operation is in flight (its own verification is under way).
"""

from __future__ import annotations

import logging
from typing import cast

from fastverify import api_answers as a
from fastverify.daemon.controller import Controller
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.states import State


def rerun(ctl: Controller) -> a.Verification:
    """The verdict of every verifier on the serving engine (see the module docstring):
    `{ok, profile, mode, pid, engine_id, reason, message, verifiers: [{name, status,
    message, evidence, reason?, line?}]}`."""
    with ctl._lock:
        h, state, op = ctl.current, ctl.state, ctl.op
    if op is not None:
        raise RequestError(
            409,
            f"a {op.kind} to {op.profile}/{op.mode} is in flight (it verifies its own "
            "engine); verify once it is done",
            in_flight=op.describe(),
            reason="busy",
        )
    if state != State.READY or h is None or not h.serving:
        raise RequestError(
            409,
            f"no engine is serving (state {state}): nothing to verify",
            reason="not_serving",
            busy=False,
        )
    verdict = ctl.verifiers.verify(h, rerun=True)
    failed = [f for f in verdict.findings if f.failed]
    if failed:
        names = ", ".join(f.name for f in failed)
        message = f"{h.profile}/{h.mode} (pid {h.pid}): {names} failed: {failed[0].message}"
        ctl.say(f"verify: {message}", logging.WARNING)
    else:
        done = sum(1 for f in verdict.findings if f.status == "ok")
        message = f"{h.profile}/{h.mode} (pid {h.pid}): {done} verifier(s) ok"
        ctl.say(f"verify: {message}")
    return {
        "ok": verdict.ok,
        "profile": h.profile,
        "mode": h.mode,
        "pid": h.pid,
        "engine_id": h.engine_id,
        "reason": verdict.failure.reason if verdict.failure else None,
        "message": message,
        "verifiers": [cast(a.VerifierResult, f.to_dict()) for f in verdict.findings],
    }
