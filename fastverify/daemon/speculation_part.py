"""Adaptive speculation as a part of the daemon (parts.py): its verifier (`Kept`: a start in
mode adaptive fails when SGLang disabled --speculative-adaptive, adaptive_check.py's rule),
its field of a result (`speculation`: the adaptive config, launch steps and tier candidates
the server started with), the feed of the exporter's speculation source (the acceptance
records and the plan earlier runs stored, each one recorded or stored since) and its status
section (`speculation`: the draft steps SGLang runs now and the seconds at each, live
acceptance, whether the stored plan went stale). It keeps no state of its own per engine:
what an engine drafts with is its argv.
"""

from __future__ import annotations

from typing import Any

from fastverify.config import SPEC_MODES
from fastverify.daemon import acceptance, adaptive_check
from fastverify.daemon import events as ev
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.parts import BasePart, section
from fastverify.daemon.verifier import Check, Context, Finding
from fastverify.sglang.adaptive import FLAG_ADAPTIVE

PART = "speculation"  # its result field and status section
STEPS_FLAG = "--speculative-num-steps"


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

    def __init__(self, core: Any) -> None:
        self.c = core
        self.hub: Any = None  # the exporter's hub (None: no exporter)

    def attach(self, bus: ev.EventBus, hub: Any) -> None:
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

    def result_fields(self, op: Any, h: Any) -> dict[str, Any]:
        return {PART: adaptive_check.summary(list(h.argv))}  # mode adaptive: its plan
