"""Verification, 1 of 4: what a verifier is (one check of a profile's start in up to three
places) and `Verifiers`, the runner that takes a list of them.

    refuse(plan)            before anything is stopped: a `Problem` (the request's error:
                            HTTP status, message, reason) or None
    on_line(h, line, facts) every line the starting engine logs: a `Failure` that ends the
                            start at once (no point in loading weights for a server that
                            will not serve as asked), or None
    verify(h, ctx)          after READY (and again on `fastverifyctl verify`): a `Finding`,
                            ok / failed (with the `Failure`) / skipped, with its evidence;
                            None for a verifier with nothing to check there

A check that has nothing to do in a place inherits `Check`'s no-op. The default list, in
the order the daemon runs it, is checks.default_checks(); the controller runs it through
`Verifiers` and never calls a check by name.

Verification is four modules, read in this order: verifier.py (this one: the protocol and
its runner), checks.py (the daemon's verifiers, in the order it runs them), verify.py (the
proofs the env and nccl verifiers read: the processes' environments, NCCL's own
confirmations), reverify.py (`fastverifyctl verify`: the after-READY place again, on the
engine that serves).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.logs import LineFacts
from fastverify.daemon.resolve import RequestError

if TYPE_CHECKING:
    from fastverify.profiles.model import Profile

OK, FAILED, SKIPPED = "ok", "failed", "skipped"
Say = Callable[..., None]  # say(message, level=logging.INFO, *, stream=True)


@dataclass(frozen=True)
class Plan:
    """A start asked for, before anything is stopped: the resolved profile and argv."""

    kind: str
    name: str
    mode: str
    profile: Profile
    argv: list[str]
    force: bool = False


@dataclass
class Problem:
    """Why a plan is refused before the load (the request's HTTP error)."""

    status: int
    message: str
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, exc: RequestError) -> Problem:
        body = dict(exc.body)
        return cls(exc.status, str(body.pop("error")), body)

    def error(self) -> RequestError:
        return RequestError(self.status, self.message, **self.extra)


@dataclass
class Finding:
    """One verifier's verdict after READY. `evidence`: what it looked at (processes,
    variables, NCCL lines, ranks)."""

    name: str
    status: str  # ok | failed | skipped
    message: str
    failure: Failure | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "evidence": self.evidence,
        }
        if self.failure is not None:
            out["reason"] = self.failure.reason
            if self.failure.line:
                out["line"] = self.failure.line
        return out


@dataclass
class Context:
    """What one verification pass shares between its verifiers: the `details` record (the
    result's `verify`: env, engine_env, nccl, tuner, allreduce), whether this is a re-run
    on a serving engine (`fastverifyctl verify`) and the daemon's `say`."""

    say: Say
    rerun: bool = False
    details: dict[str, Any] = field(default_factory=dict)


class Verifier(Protocol):
    name: str

    def refuse(self, plan: Plan) -> Problem | None: ...

    def on_line(self, h: EngineHandle, line: str, facts: LineFacts) -> Failure | None: ...

    def verify(self, h: EngineHandle, ctx: Context) -> Finding | None: ...


class Check:
    """A verifier's no-ops: subclasses override the places they check."""

    name = "check"

    def refuse(self, plan: Plan) -> Problem | None:
        return None

    def on_line(self, h: EngineHandle, line: str, facts: LineFacts) -> Failure | None:
        return None

    def verify(self, h: EngineHandle, ctx: Context) -> Finding | None:
        return None  # nothing to check after READY

    def ok(self, message: str, **evidence: Any) -> Finding:
        return Finding(self.name, OK, message, evidence=evidence)

    def skipped(self, message: str, **evidence: Any) -> Finding:
        return Finding(self.name, SKIPPED, message, evidence=evidence)

    def failed(self, failure: Failure, **evidence: Any) -> Finding:
        return Finding(self.name, FAILED, failure.message, failure, evidence)


@dataclass
class Verdict:
    """A verification pass: the first failure (None: all ok), the `details` record and
    every verifier's finding (in list order; after a failure, a switch runs no further)."""

    failure: Failure | None
    details: dict[str, Any]
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        return self.failure is None


class Verifiers:
    """A list of verifiers run in order, in each of the three places."""

    def __init__(self, checks: Iterable[Verifier], say: Say | None = None) -> None:
        self.checks: list[Verifier] = list(checks)
        self.say: Say = say or (lambda msg, level=logging.INFO, **_: None)

    def refuse(self, plan: Plan) -> None:
        """RequestError for the first verifier that refuses `plan`; nothing was touched."""
        for check in self.checks:
            problem = check.refuse(plan)
            if problem is not None:
                raise problem.error()

    def on_line(self, h: EngineHandle, line: str, facts: LineFacts) -> None:
        """Feed one line; a failure a verifier reads in it ends the start (`h.line_failure`,
        seen by the launcher's readiness loop)."""
        for check in self.checks:
            failure = check.on_line(h, line, facts)
            if failure is not None and h.line_failure is None:
                h.line_failure = failure
                h.wake.set()

    def verify(self, h: EngineHandle, *, rerun: bool = False) -> Verdict:
        """Run every verifier after READY. A start stops at the first failure (what follows
        it is not run); a re-run (`rerun`) runs them all and reports each."""
        ctx = Context(self.say, rerun)
        findings: list[Finding] = []
        first: Failure | None = None
        for check in self.checks:
            finding = check.verify(h, ctx)
            if finding is None:
                continue
            findings.append(finding)
            if finding.failed and first is None:
                first = finding.failure
                if not rerun:
                    break
        return Verdict(first, ctx.details, findings)
