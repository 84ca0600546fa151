"""The controller's front door steps: hold and drain before the engine stops, hold on a
crash, cut over and let the held requests go when an engine serves (the new one, or the
rolled-back one), and the switch's client-side figures in its result. With `mode =
"standby"`, `plan_switch` decides per switch whether the new engine starts beside the serving one
(standby_switch.py runs it; `drain_port` drains the old engine after the cut-over) or the
switch holds, from the memory rule (frontdoor/standby.py) and the serving engine's own figures,
read from its start-up lines.

A part (parts.py): the switch's hooks (`plan_switch`, `before_stop`, `resume_after_cancel`,
`on_crash`, `on_serving`, `switch_figures`, `tick`) are called over every part by the
controller's steps; what it keeps of one operation is a `DoorOp` under `op.parts[PART]`.
A step over the controller's core (core.py). `[frontdoor] mode = "off"` keeps today's
behaviour: no front door, and the result says `mode: none` with the downtime from the
engine's stop to the next READY. The process group is frontdoor_group.py's.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fastverify.config import Config
from fastverify.daemon.frontdoor_group import FrontDoorGroup
from fastverify.daemon.launcher import without_port
from fastverify.daemon.parts import BasePart, section
from fastverify.frontdoor import layout
from fastverify.frontdoor.gate import NAMES_KEPT
from fastverify.frontdoor.standby import EngineMemory, Fit, decide, without_pool

if TYPE_CHECKING:
    from fastverify.daemon.core import Core
    from fastverify.daemon.events import EventBus
    from fastverify.daemon.launcher import EngineHandle
    from fastverify.daemon.operations import Operation
    from fastverify.engines.base import Engine
    from fastverify.exporters.hub import MetricsHub

log = logging.getLogger("fastverifyd.frontdoor")

DRAIN_SLICE_S = 0.25  # a drain asks the front door in slices, so that a cancel ends it at once
# A stopped engine's requests end as soon as the front door reads their connections' close;
# its cuts are taken once they have (this bounds a front door that is slow to read them).
CUTS_WAIT_S = 5.0


PART = "frontdoor"  # its key in op.parts


def engine_port(url: str) -> int:
    return urlsplit(url).port or 80


@dataclass
class DoorOp:
    """What the front door keeps of one operation (`op.parts[PART]`): when the engine went
    down for it, the clients' figures once an engine serves again (the result's `switch`),
    and in mode standby the memory decision."""

    down_at: float | None = None
    figures: dict[str, Any] | None = None
    standby: dict[str, Any] | None = None


def door_op(op: Operation) -> DoorOp:
    """The front door's part of operation `op` (an empty one when it has none yet)."""
    part: DoorOp = op.parts.setdefault(PART, DoorOp())
    return part


class DoorSteps(BasePart):
    """See the module docstring. Its switch's figures are every result's (`core.result`:
    `switch`), not a field of its own."""

    c: Core  # all of it: the configuration, the operation running, the standby's weights

    def __init__(self, core: Core) -> None:
        self.c = core
        self.group = (
            FrontDoorGroup(core.cfg, core.store, core.say, self._serving_port)
            if layout.enabled(core.cfg)
            else None
        )
        self.problem: str | None = None
        self._next_try = 0.0  # a front door that keeps failing is retried 1 s, 2 s, ... 60 s apart
        self._backoff = 1.0
        # What the front door should do, level-triggered: serve this port (an engine serves
        # READY there) or hold (None). Set with the command that says it, under `_intent`;
        # the main loop's tick and a (re)started front door are brought back to it, so a
        # command lost to a front door that was restarting or not answering is not lost.
        self.want: int | None = None
        self._intent = threading.Lock()
        if self.group is not None:
            # every engine's memory figures, read from its start-up lines (standby's rule)
            core.launcher.line_readers_for.append(_memory_reader)
            core.launcher.adopted_readers_for.append(_memory_reader)
            # the engines take turns on two internal ports: an argv is the same whichever
            core.launcher.argv_aside.append(without_port)
            # a standby start's pool flags, appended for that start only (standby.with_pool)
            core.launcher.argv_aside.append(without_pool)

    @property
    def mode(self) -> str:
        """What a switch that stops the engine uses: "hold" with a front door, "none"
        without one (a standby switch says "standby": `plan_switch`)."""
        return "none" if self.group is None else "hold"

    def plan_switch(self, op: Operation) -> Fit | None:
        """Whether `op` starts its engine beside the serving one (mode standby, an engine
        serving READY, the memory rule's yes): the decision, said before anything starts;
        None when the front door is not in standby mode or nothing serves to stand beside."""
        c = self.c
        h = c.current
        if (
            self.group is None
            or c.cfg.frontdoor.mode != "standby"
            or h is None
            or not (h.serving and h.alive())
        ):
            return None
        fit = standby_fit(c, op.mode, c.op_weights(op))
        door_op(op).standby = fit.to_dict()
        tail = "" if fit.mode == "standby" else "; this switch holds"
        c.say(f"front door: {fit.why}{tail}")
        return fit

    def standby_port(self) -> int:
        """The internal port the serving engine does not use (the two take turns)."""
        first = int(self.c.cfg.server.port)
        second = int(self.c.cfg.frontdoor.standby_port or first + 1)
        h = self.c.current
        return second if h is not None and engine_port(h.url) == first else first

    def drain_port(self, op: Operation, port: int) -> dict[str, Any] | None:
        """After a standby cut-over: the old engine's requests in flight get up to
        `drain_timeout_s` to finish; what is still in flight then will be cut."""
        timeout = self.c.cfg.frontdoor.drain_timeout_s
        t0 = time.monotonic()
        deadline = t0 + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            step = min(left, DRAIN_SLICE_S)
            drained = self._call("drain", wait_s=step + 10, timeout_s=step, port=port)
            if drained is None or drained.get("drained") or left <= step:
                break
        op.phases["drain"] = round(time.monotonic() - t0, 4)
        if drained and not drained.get("drained"):
            self.c.say(f"front door: {drained['in_flight']} request(s) still in flight on the "
                       f"old engine after {timeout:g} s; stopping it cuts them",
                       logging.WARNING)  # fmt: skip
        elif drained and op.phases["drain"] >= 0.05:
            self.c.say(f"front door: the old engine drained in {op.phases['drain']:.2f} s")
        return drained

    def kept(self, op: Operation) -> None:
        """A standby engine that failed never took traffic: the old engine served on, no
        downtime; the front door's figures since the last cut-over (a stream the old engine
        cut meanwhile is counted here, and taken out of the next record)."""
        status = self._call("status") if self.group is not None else None
        episode = dict(status["episode"]) if status and status.get("episode") else {}
        taken = self._call("take_cuts") or {}
        cuts: dict[str, Any] = {k: taken[k] for k in ("cut", "cut_requests") if k in taken}
        door = door_op(op)
        door.figures = {"mode": "standby", "held": 0, "longest_wait_s": 0.0, "refused": 0, "cut": 0,
                   "cut_requests": [], **episode, **cuts, "downtime_s": 0.0,
                   "kept_serving": True, "standby": door.standby}  # fmt: skip

    def cuts_since_cut_over(self, op: Operation, port: int) -> None:
        """The old engine's streams its stop cut (counted by the front door since the
        cut-over, once each of its requests on `port` has ended) go into the switch's
        figures, and out of the front door's episode: the next record does not name them."""
        done = door_op(op).figures
        if done is None or self.group is None:
            return
        taken = self._call("take_cuts", wait_s=CUTS_WAIT_S + 10, timeout_s=CUTS_WAIT_S,
                           port=port)  # fmt: skip
        if taken and "cut" in taken:
            done["cut"] = int(done.get("cut") or 0) + int(taken["cut"])
            done["cut_requests"] = [*done.get("cut_requests", []),
                                    *taken.get("cut_requests", [])][:NAMES_KEPT]  # fmt: skip

    def _serving_port(self) -> int | None:
        """The port the front door should send to now: the engine that serves READY there,
        unless a switch or a crash holds (a front door started now sends there)."""
        h = self.c.current
        if self.want is None or h is None or not (h.serving and h.alive()):
            return None
        return self.want if engine_port(h.url) == self.want else None

    # ------------------------------------------------------------------ process group
    def adopt(self) -> str | None:
        """Before the first engine starts (clients wait for it there): adopt the front door
        a killed daemon left, or start one that holds until the engine serves."""
        if self.group is None:  # a front door an earlier run left on the public port: ours
            return FrontDoorGroup(self.c.cfg, self.c.store).stop_leftover() or None
        message = self.group.adopt()
        if message:
            self.c.say(message)
        if not self.group.alive():
            self._spawn()
        return None

    def _spawn(self) -> None:
        group = self.group
        assert group is not None  # only called with the front door on
        port = self._serving_port()
        message = group.spawn(hold=port is None, serve_port=port)
        self.problem = None if group.alive() else message
        self.c.say(message, logging.INFO if self.problem is None else logging.ERROR)
        if self.problem is None:
            self._backoff = 1.0
        else:
            self._next_try = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, 60.0)

    def tick(self) -> None:
        """From the main loop: a front door whose start failed is tried again (an exit after
        it ran is the group's own restart, with its backoff); a running one that holds while
        an engine serves READY is told where it serves."""
        if self.group is None or self.c.shutting_down.is_set():
            return
        if not self.group.failed():
            self._reconcile()
            return
        if self.group.alive() or time.monotonic() < self._next_try:
            return
        self.c.say("front door: not running; starting it again", logging.WARNING)
        self._spawn()

    def _reconcile(self) -> None:
        """Level-triggered cut-over: the front door serves the port it should (`want`)."""
        if self.group is None or not self.group.alive() or not self._intent.acquire(False):
            return  # a switch step is talking to it now
        try:
            port = self._serving_port()
            if port is None:
                return
            try:
                st = self.group.call("status", wait_s=0.5)
            except (OSError, ValueError):
                return  # not answering: asked again on the next tick
            if st.get("state") == "serving" and st.get("port") == port:
                return
            self.c.say(f"front door: {st.get('state')} while the engine on port {port} serves; "
                       "sending the requests there")  # fmt: skip
            self._call("serve", port=port)
        finally:
            self._intent.release()

    def shutdown(self) -> None:
        if self.group is not None:
            self.group.stop()

    def _call(self, op: str, wait_s: float = 5.0, **fields: Any) -> dict[str, Any] | None:
        if self.group is None:
            return None
        try:
            return self.group.call(op, wait_s=wait_s, **fields)
        except (OSError, ValueError) as exc:
            self.c.say(f"front door: {op} failed: {exc}", logging.WARNING)
            return None

    # ------------------------------------------------------------------ switch steps
    def before_stop(self, op: Operation) -> None:
        """The engine is about to stop: new requests wait, the ones in flight get up to
        `drain_timeout_s` to finish; what is still in flight then will be cut."""
        door = door_op(op)
        door.down_at = time.monotonic()
        if self.group is None or self.c.current is None:
            return
        held = self._command(None, "hold")
        timeout = self.c.cfg.frontdoor.drain_timeout_s
        if held and held.get("in_flight"):
            self.c.say(f"front door: holding new requests; {held['in_flight']} in flight get up "
                       f"to {timeout:g} s to finish")  # fmt: skip
        t0 = time.monotonic()
        drained = self._drain(t0 + timeout, op.cancel)
        op.phases["drain"] = round(time.monotonic() - t0, 4)
        if op.cancel.is_set():
            return  # the controller puts the serving engine back (resume)
        if drained and drained.get("drained") and held and held.get("in_flight"):
            self.c.say(f"front door: drained in {op.phases['drain']:.2f} s")
        if drained and not drained.get("drained"):
            self.c.say(
                f"front door: {drained['in_flight']} request(s) still in flight after "
                f"{timeout:g} s; stopping the engine cuts them",
                logging.WARNING,
            )

    def _command(self, want: int | None, op: str, **fields: Any) -> dict[str, Any] | None:
        """Say what the front door should do now (`want`) and tell it."""
        with self._intent:
            self.want = want
            return self._call(op, **fields)

    def _drain(self, deadline: float, cancel: threading.Event) -> dict[str, Any] | None:
        """The front door's drain up to `deadline`, asked in slices so that a cancel of the
        switch ends it within one slice (the old engine then serves on: resume)."""
        while True:
            left = max(0.0, deadline - time.monotonic())
            step = min(left, DRAIN_SLICE_S)
            drained = self._call("drain", wait_s=step + 10, timeout_s=step)
            if drained is None or drained.get("drained") or left <= step or cancel.is_set():
                return drained

    def resume_after_cancel(self, op: Operation) -> bool:
        """A switch cancelled before its engine stopped: the serving engine keeps serving and
        the requests held meanwhile go to it. False when there is none to go back to."""
        h = self.c.current
        if h is None or not (h.serving and h.alive()):
            return False
        self.c.say("front door: switch cancelled during the drain; the serving engine serves on")
        self.on_serving(h)
        return True

    def on_crash(self) -> None:
        """The serving engine died: new requests wait for the restarted one."""
        if self.group is not None:
            self._command(None, "hold")

    def on_serving(self, h: EngineHandle) -> None:
        """An engine serves (a switch's, a rollback's, a restart's or an adopted one): the
        front door sends the held requests there; the figures go to the operation."""
        op = self.c.op
        door = op.parts.get(PART) if op is not None else None
        figures: dict[str, Any] | None = None
        if self.group is not None:
            port = engine_port(h.url)
            reply = self._command(port, "serve", port=port)
            figures = dict(reply["episode"]) if reply and "episode" in reply else None
        elif door is not None and door.down_at is not None:
            down = time.monotonic() - door.down_at
            figures = {"downtime_s": round(down, 4), "held": 0, "longest_wait_s": 0.0,
                       "refused": None, "cut": None, "cut_requests": []}  # fmt: skip
        if op is not None and figures is not None:
            door = door_op(op)
            standby = {"standby": door.standby} if door.standby else {}
            beside = (door.standby or {}).get("mode") == "standby"
            door.figures = {"mode": "standby" if beside else self.mode, **figures, **standby}

    def switch_figures(self, op: Operation) -> dict[str, Any] | None:
        """The switch's client-side figures for its result (None when it stopped nothing)."""
        door: DoorOp | None = op.parts.get(PART)
        if door is None:
            return None
        if door.figures is not None:
            return door.figures
        if door.down_at is None:
            return None
        if self.group is None:
            return {"mode": "none", "downtime_s": None, "held": 0, "longest_wait_s": 0.0,
                    "refused": None, "cut": None, "cut_requests": []}  # fmt: skip
        status = self._call("status")
        episode = dict(status["episode"]) if status else {}
        return {"mode": self.mode, **episode, "still_holding": True}

    def status(self) -> dict[str, Any]:
        """`status`'s `frontdoor`: mode, state (serving / holding / no_engine / down), counts,
        and its line in `fastverifyctl status`."""
        fields = self._fields()
        return section(fields, _lines(fields) if self.group is not None else [], [])

    def _fields(self) -> dict[str, Any]:
        if self.group is None:
            return {"mode": "off"}
        out: dict[str, Any] = {
            "mode": self.c.cfg.frontdoor.mode,
            "listen": layout.public_url(self.c.cfg),
            "pid": self.group.pid,
            "restarts": self.group.restarts,
        }
        if self.problem:
            out["problem"] = self.problem
        if self.group is not None:  # what a standby switch now would decide (doctor: hold too)
            mode = self.c.active.get("mode") or "baseline"
            out["standby"] = standby_fit(self.c, mode, self.c.cfg.server.load_format).to_dict()
        if not self.group.alive():
            return {**out, "state": "down"}
        reply = self._call("status", wait_s=2.0)
        if reply is None:
            return {**out, "state": "unreachable"}
        keep = ("state", "port", "in_flight", "waiting", "queue_size", "max_wait_s", "totals",
                "last_episode")  # fmt: skip
        return {**out, **{k: reply.get(k) for k in keep}}

    # ------------------------------------------------------------ the part (parts.py)
    NAME = PART
    STATUS = "frontdoor"
    SECTION = (
        "the front door on the server's public port (`[frontdoor]`): `{mode}` when off, else "
        "`{mode, listen, pid, restarts, state: serving|holding|no_engine|down, port, in_flight,"
        " waiting, queue_size, max_wait_s, totals: {requests, held, refused, cut, switches}, "
        "last_episode, standby?: {mode, why}}`; `standby` (mode standby): whether a second "
        "engine fits beside the serving one now, from its memory and what the parts would "
        "share with it"
    )

    def attach(self, bus: EventBus, hub: MetricsHub | None) -> None:
        """The front door's exporter source on `hub` (only when it runs one)."""
        if hub is not None and self.group is not None:
            from fastverify.exporters.collectors.frontdoor import FrontDoorSource

            hub.add(FrontDoorSource(hub, self.metrics))

    def reconfigure(self, cfg: Config, engine: Engine) -> None:
        """The front door keeps the configuration it was started with until it restarts."""

    def metrics(self) -> dict[str, Any] | None:
        """The counts and the hold-time histogram, for the exporter (None when off or down)."""
        if self.group is None or not self.group.alive():
            return None
        try:
            return self.group.call("status", wait_s=2.0)
        except (OSError, ValueError):
            return None


def _lines(fd: dict[str, Any]) -> list[str]:
    """The front door on the public port: its state and what it held, cut and refused; in
    mode standby, what a switch now would do, and why."""
    totals = fd.get("totals") or {}
    counts = (
        f"; {fd.get('waiting', 0)} held now, {fd.get('in_flight', 0)} in flight; since start "
        f"{totals.get('held', 0)} held, {totals.get('cut', 0)} cut, "
        f"{totals.get('refused', 0)} refused"
        if totals
        else ""
    )
    where = f" -> engine port {fd['port']}" if fd.get("port") else ""
    problem = f": {fd['problem']}" if fd.get("problem") else ""
    out = [f"front door: {fd.get('state')} on {fd.get('listen')}{where} (pid {fd.get('pid')}, "
           f"mode {fd['mode']}){counts}{problem}"]  # fmt: skip
    if fd.get("standby") and fd["mode"] == "standby":
        out.append(f"  a switch now: {fd['standby']['why']}")
    return out


def _memory_reader(h: EngineHandle) -> Any:
    """Each engine's memory figures (standby.EngineMemory) from its start-up lines."""
    memory = h.parts.setdefault("memory", EngineMemory())
    return memory.read


def standby_fit(core: Core, mode: str, load_format: str | None = None) -> Fit:
    """The decision for a switch to `mode` (`load_format`: "dummy" for a trial) from what
    this host reports now: what the parts let a second engine share with the serving one
    (parts.Sharing: the weights and their bytes), the serving engine's start-up figures, one
    GPU's memory (the engine's reading: nvidia-smi, or the sim's simulated GPU)."""
    shares = [s for part in core.parts if (s := part.sharing(mode, load_format)) is not None]
    sharing = next((s for s in shares if s.serves), shares[0] if shares else None)
    serves = sharing is not None and sharing.serves
    h = core.current
    memory = h.parts.get("memory") if h is not None and serves else None
    return decide(
        sharing=sharing,
        gpu_bytes=core.engine.gpu_bytes() if serves else None,
        tp=max(1, core.cfg.server.tp_size // max(1, core.cfg.server.nnodes)),
        engine=memory.figures() if memory is not None else None,
        kv_tokens=memory.kv_tokens if memory is not None else None,
        free_alone=memory.free_alone if memory is not None else None,
        kv_share=core.cfg.frontdoor.standby_kv_share,
        cold_tokens=memory.cold_tokens if memory is not None else None,
    )
