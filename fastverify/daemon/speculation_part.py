"""Speculation as a part of the daemon (parts.py): its verifiers (`ForcedAcceptance`: a
forced accept length SGLang would not honour is refused before anything stops; `Kept`: a
start in mode adaptive fails when SGLang disabled --speculative-adaptive, adaptive_check.py's
rule), its field of a result (`speculation`: the adaptive config, launch steps and tier
candidates the server started with), the feed of the exporter's speculation source (the
acceptance records and the plan earlier runs stored, each one recorded or stored since) and
its status section (`speculation`: the draft steps SGLang runs now and the seconds at each,
live acceptance, whether the stored plan went stale).

What an engine drafts with is its argv; what it keeps of each engine is the acceptance
SGLang forces on it (SGLANG_SIMULATE_ACC_LEN from [server.env] or the profile: `forced`, in
the engine's record for the daemon that adopts it), which labels the engine's status, its
settings (`acceptance_source`) and the acceptance recorded on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastverify.config import SPEC_MODES
from fastverify.daemon import acceptance, adaptive_check
from fastverify.daemon import events as ev
from fastverify.daemon.launcher import EngineHandle, Launcher
from fastverify.daemon.parts import BasePart, PartCore, section
from fastverify.daemon.verifier import Check, Context, Finding, Plan, Problem
from fastverify.sglang.adaptive import FLAG_ADAPTIVE
from fastverify.sglang.forced import SETTINGS_KEY as ACCEPTANCE_SOURCE
from fastverify.sglang.forced import label_of_record as forced_label

if TYPE_CHECKING:
    from fastverify.daemon.operations import Operation
    from fastverify.exporters.hub import MetricsHub
    from fastverify.profiles.model import Profile

PART = "speculation"  # its result field and status section
FORCED = "forced"  # its field of an engine's record (EngineHandle.kept)
STEPS_FLAG = "--speculative-num-steps"


def forced(h: EngineHandle | None) -> dict[str, Any] | None:
    """The acceptance SGLang forces on engine `h` (sglang.forced.Forced.to_dict); None: the
    drafter's own, a server that does not draft, or no engine."""
    found: dict[str, Any] | None = h.kept.get(FORCED) if h is not None else None
    return found


def forced_acceptance(launcher: Launcher, env: dict[str, str], argv: list[str]) -> Any:
    """The acceptance SGLang will force on a drafting server started with `env` and `argv`
    (`fastverify.sglang.forced`), None when it forces none or does not draft. ForcedError for
    a value SGLang would not honour (`forced_refusal` says it first)."""
    from fastverify.sglang import forced as sglang_forced
    from fastverify.sglang.launch import LaunchArgs

    if LaunchArgs.from_argv(list(argv)).speculative is None:
        return None
    try:
        facts = launcher.engine.facts()
    except ValueError:  # a release below the range: refused at start-up
        return None
    found = sglang_forced.of(env, facts)
    return found.to_dict() if found is not None else None


def forced_refusal(launcher: Launcher, profile: Profile, argv: list[str]) -> str | None:
    """Why the forced acceptance `profile` (or [server.env]) asks for would not serve as
    written; None: fine (or none asked)."""
    from fastverify.sglang.forced import ForcedError

    try:
        forced_acceptance(launcher, launcher.engine_env(profile, "-", None), argv)
    except ForcedError as exc:
        return f"{exc} (set in {launcher.set_where(profile, exc.variable)})"
    return None


class ForcedAcceptance(Check):
    """The verifier (verifier.py): a forced accept length SGLang would not honour is
    refused before anything stops."""

    name = "forced"

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher

    def refuse(self, plan: Plan) -> Problem | None:
        why = forced_refusal(self.launcher, plan.profile, plan.argv)
        if why is None:
            return None
        return Problem(422, f"{plan.name}/{plan.mode}: {why}; nothing was stopped",
                       {"reason": "forced_acceptance_invalid"})  # fmt: skip


class Kept(Check):
    """The verifier (verifier.py): after READY, SGLang kept --speculative-adaptive."""

    name = "adaptive"

    def verify(self, h: EngineHandle, ctx: Context) -> Finding:
        failure = adaptive_check.check(h.argv, str(h.log_path))
        if failure is not None:
            return self.failed(failure, line=failure.line)
        if FLAG_ADAPTIVE not in h.argv:
            return self.skipped("not mode adaptive")
        return self.ok("SGLang serves with --speculative-adaptive")


class SpeculationPart(BasePart):
    """The part over the controller's core (see the module docstring)."""

    NAME = PART
    STATUS = PART
    SECTION = (
        "a drafting mode with the exporter on: `{active_steps, fixed_steps, seconds_at_steps: "
        '{"STEPS": s}, live_acceptance: {"STEPS": {requests, accept_length: {"K": L}}}, '
        "plan_stale, plan_why, replan}`: the draft steps SGLang runs now, the decoding seconds "
        "at each, the accept length of the requests that finished while SGLang ran one step "
        "count their whole life, and whether the stored plan went stale, with the commands that"
        " re-plan"
    )

    def __init__(self, core: PartCore) -> None:
        self.c = core
        self.hub: MetricsHub | None = None  # the exporter's hub (None: no exporter)
        launcher: Launcher = core.launcher
        launcher.keepers[FORCED] = lambda env, argv: forced_acceptance(launcher, env, argv)

    def engine_fields(self, h: EngineHandle | None) -> dict[str, Any]:
        """SGLANG_SIMULATE_ACC_LEN in its environment: SGLang forces the accept length."""
        f = forced(h)
        return {"forced_acceptance": f,
                "acceptance_source": forced_label(f) if h is not None else None}  # fmt: skip

    def settings(self, h: EngineHandle) -> dict[str, str]:
        """A drafting server's `acceptance_source`: "forced (SGLANG_SIMULATE_ACC_LEN=L)" when
        SGLang forces its accept length, else "measured"."""
        return {ACCEPTANCE_SOURCE: forced_label(forced(h))} if h.mode in SPEC_MODES else {}

    def attach(self, bus: ev.EventBus, hub: MetricsHub | None) -> None:
        """Feed the hub's speculation source: each acceptance record and stored plan."""
        if hub is None:
            return
        self.hub = hub

        def recorded(e: ev.Event) -> None:
            if isinstance(e, ev.AcceptanceRecorded):
                hub.speculation.on_acceptance(e.record)
            elif isinstance(e, ev.PlanStored):
                hub.speculation.set_plan(e.plan)

        bus.subscribe(recorded)

    def adopt(self) -> str | None:
        """At start-up: what earlier runs measured and planned, for live acceptance to be
        compared with (the plan goes stale)."""
        if self.hub is None:
            return None
        for rec in acceptance.load(self.c.store).values():
            if isinstance(rec, dict) and {"profile", "mode", "steps"} <= rec.keys():
                self.hub.speculation.on_acceptance(rec)
        self.hub.speculation.set_plan(self.c.store.load_json(acceptance.PLAN_FILE))
        return None

    def status(self) -> dict[str, Any] | None:
        """Active draft steps and seconds at each (the exporter's reading of SGLang's
        sglang:spec_num_steps), for a drafting mode; None otherwise or without the
        exporter. `fixed_steps`: mode eagle3's configured step count (its argv), which it
        always runs."""
        with self.c._lock:
            profile, mode = self.c.active.get("profile"), self.c.active.get("mode")
            h = self.c.current
        if mode not in SPEC_MODES or self.hub is None:
            return None
        argv = list(h.argv) if h is not None else []
        fixed = None
        if mode == "eagle3" and STEPS_FLAG in argv[:-1]:
            fixed = int(argv[argv.index(STEPS_FLAG) + 1])
        r = self.hub.speculation.reading()
        seconds = {
            steps: round(secs, 3)
            for (p, m, steps), secs in r["steps_seconds"].items()
            if (p, m) == (profile, mode)
        }
        drift = r["drift"] or {}
        live = {
            str(steps): {"requests": row["requests"],
                         "accept_length": {str(k): v for k, v in row["accept_length"].items()}}
            for steps, row in r["live"].items()
        }  # fmt: skip
        fields = {"active_steps": r["active_steps"], "seconds_at_steps": seconds,
                  "fixed_steps": fixed, "live_acceptance": live,
                  "plan_stale": bool(drift.get("stale")), "plan_why": drift.get("why"),
                  "replan": drift.get("replan")}  # fmt: skip
        return section(fields, [], [])

    def result_fields(self, op: Operation, h: EngineHandle) -> dict[str, Any]:
        return {PART: adaptive_check.summary(list(h.argv))}  # mode adaptive: its plan
