"""What one server start does with its weights: whether the weight cache serves it (`gate`),
what SGLang's own lines say happened (`WeightsWatch`), the start's `weights` record
("weights: from the cache (N GiB over IPC, X s)" / "weights: from disk (the cache refused:
WHY)", with the split weights / cuda_graph / rest), and the steps around a start over the
controller's core (`WeightSteps`: the gate before the spawn, the fallback to disk after
SGLang refused the cache, the notice a speculative switch gets before anything stops).

Not served by the cache: a trial on dummy weights, speculative modes where the release
refuses them (its daemon exports no draft model; `speculative_refusal` in its facts), a
release without the cache, a server over several nodes. With `auto` a start the cache
should have served and did not (its socket missing, SGLang refused its fingerprint) loads
from disk with a warning and a finding; with `on` it fails.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastverify.config import SPEC_MODES, TRIAL_LOAD_FORMAT, Config
from fastverify.daemon.core import Core
from fastverify.daemon.failures import Failure
from fastverify.daemon.parts import BasePart, Sharing, section
from fastverify.sglang import loglines
from fastverify.sglang import weight_cache as wc

if TYPE_CHECKING:
    from fastverify.daemon.events import EventBus
    from fastverify.daemon.launcher import EngineHandle
    from fastverify.daemon.operations import Operation, StartOf
    from fastverify.daemon.parts import Spawn
    from fastverify.daemon.weight_cache import WeightCache
    from fastverify.engines.base import Engine
    from fastverify.exporters.hub import MetricsHub
    from fastverify.sglang.facts import SGLangFacts

GiB = float(1 << 30)


# ----------------------------------------------------------------------------- the gate


@dataclass(frozen=True)
class Gate:
    """Whether the cache serves a start; `why` says why not (None when it does),
    `expected` whether that is by design (a trial, a speculative mode) rather than a loss,
    `kind` which case: off, release, nodes, trial, speculative, refused, unavailable."""

    use: bool
    why: str | None = None
    expected: bool = True
    kind: str | None = None


def gate(setting: str, facts: SGLangFacts, *, mode: str, load_format: str, nnodes: int) -> Gate:
    """See the module docstring (pure: the setting, the release's facts, the start)."""
    if setting == "off":
        return Gate(False, "weight_cache = off", kind="off")
    cf = wc.of(facts)
    if cf is None:
        why = f"SGLang {facts.version} has no weight cache (it came in 0.5.17)"
        return Gate(False, why, False, "release")
    if nnodes > 1:
        why = "a server over several nodes (fastverifyd runs the cache on one)"
        return Gate(False, why, False, "nodes")
    if load_format == TRIAL_LOAD_FORMAT:
        return Gate(
            False, "a trial on dummy weights (random weights, read from nowhere)", kind="trial"
        )
    if mode in SPEC_MODES and cf.refusal:
        why = f"SGLang {facts.version}'s weight cache does not export draft models"
        return Gate(False, why, kind="speculative")
    return Gate(True)


# ----------------------------------------------------------------------------- a start's lines


@dataclass
class WeightsWatch:
    """What one server start says about its weights (fed every line by the launcher)."""

    facts: SGLangFacts | None  # the release's (None: an engine without SGLang facts)
    asked: bool  # started with --weight-cache-mode client
    events: list[wc.LoaderEvent] = field(default_factory=list)
    load_end_s: float | None = None  # the target's "Load weight end. elapsed=" (first)
    load_mem_gb: float | None = None
    graphs_s: float = 0.0
    engine_config: dict[str, Any] = field(default_factory=dict)
    daemon_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cf = wc.of(self.facts)

    def on_line(self, line: str) -> None:
        if self.facts is None:
            return
        if self.load_end_s is None and (end := wc.load_weight_end(self.facts, line)):
            self.load_end_s, self.load_mem_gb = end
        elif "graph end." in line:
            rec = loglines.capture_record(line)
            if rec and rec.get("role") == "target" and rec.get("elapsed_s") is not None:
                self.graphs_s += float(rec["elapsed_s"])
        if self.cf is None or not self.asked:
            return
        ev = self.cf.loader_event(line)
        if ev is None:
            return
        if ev.kind in ("engine_config", "daemon_config"):
            target = self.engine_config if ev.kind == "engine_config" else self.daemon_config
            target.update(wc.parse_config(line))
        else:
            self.events.append(ev)

    def kinds(self) -> set[str]:
        return {e.kind for e in self.events}

    @property
    def hit(self) -> bool:
        return "loaded" in self.kinds()

    def refusal(self) -> tuple[str, str] | None:
        """(reason, message) when the cache was asked and did not serve: SGLang's words."""
        k = self.kinds()
        if not self.asked or "loaded" in k:
            return None
        if "mismatch" in k:
            diff = wc.differences(self.engine_config, self.daemon_config)
            return "mismatch", f"fingerprint mismatch ({wc.describe_differences(diff)})"
        if "refused" in k:
            return "refused", "its socket refused the connection (the cache daemon died?)"
        if "socket_missing" in k or "fallback" in k:
            found = next((e for e in self.events if e.kind == "socket_missing"), None)
            where = f" at {found.values[0]}" if found and found.values else ""
            return "socket_missing", f"no cache socket{where}"
        return None

    def died(self) -> bool:
        return "daemon_died" in self.kinds()

    def seconds(self) -> float | None:
        """The weights' part of the start: the IPC loader's total, else Load weight end."""
        for e in self.events:
            if e.kind == "loaded" and e.values:
                with contextlib.suppress(ValueError):
                    return float(e.values[-1])
        return self.load_end_s

    def phases(self, ready_s: float | None) -> dict[str, float] | None:
        """The start split: weights, cuda_graph, rest (None before SGLang said both)."""
        weights = self.seconds()
        if ready_s is None or weights is None:
            return None
        graphs = self.graphs_s
        return {
            "weights": round(weights, 3),
            "cuda_graph": round(graphs, 3),
            "rest": round(max(0.0, ready_s - weights - graphs), 3),
        }


PART = "weights"  # the key of this part's state on an engine handle and an operation


@dataclass
class StartWeights:
    """What one engine start keeps of its weights (the handle's `parts[PART]`): the watch of
    its lines, the gate it was started behind, its `weights` record once it came up."""

    watch: WeightsWatch | None = None
    gate: Gate | None = None
    record: dict[str, Any] | None = None


@dataclass
class OpWeights:
    """What one operation keeps of its weights (`op.parts[PART]`): the notice it gave before
    anything stopped, the refusal (reason, why) that starts it again from disk."""

    notice: str | None = None
    refused: tuple[str, str] | None = None


def op_part(op: StartOf) -> OpWeights | None:
    """The weights part of operation `op` (None: it has none)."""
    part: OpWeights | None = op.parts.get(PART)
    return part


def of(h: EngineHandle) -> StartWeights:
    """The weights part of engine handle `h` (an empty one when it has none yet)."""
    part: StartWeights = h.parts.setdefault(PART, StartWeights())
    return part


def load_record(h: EngineHandle | None) -> dict[str, Any] | None:
    """The start's `weights` record (status, result, history), None before it came up
    (or with no engine)."""
    part = h.parts.get(PART) if h is not None else None
    return part.record if part is not None else None


def weights_summary(
    watch: WeightsWatch | None, gate_: Gate, ready_s: float | None, cache_bytes: int | None
) -> dict[str, Any]:
    """The start's `weights` record (result, history, status): where from, how long, why."""
    seconds = watch.seconds() if watch else None
    out: dict[str, Any] = {"source": "disk", "seconds": seconds, "bytes": None, "reason": None}
    if watch is not None:
        out["phases"] = watch.phases(ready_s)
    if watch is not None and watch.hit:
        out.update(source="cache", bytes=cache_bytes)
        size = f"{cache_bytes / GiB:.1f} GiB" if cache_bytes else "size unknown"
        out["text"] = f"weights: from the cache ({size} over IPC, {seconds or 0:.2f} s)"
        return out
    refusal = watch.refusal() if watch is not None else None
    if refusal is not None:
        out.update(reason=refusal[0], why=refusal[1], fallback=True)
        out["text"] = f"weights: from disk (the cache refused: {refusal[1]})"
    else:
        out.update(why=gate_.why, fallback=not gate_.expected)
        if not gate_.expected:
            out["reason"] = gate_.kind
        when = f", {seconds:.2f} s" if seconds is not None else ""
        out["text"] = (
            f"weights: from disk ({gate_.why}{when})" if gate_.why else "weights: from disk"
        )
    return out


# ----------------------------------------------------------------------------- the steps


class WeightSteps(BasePart):
    """The weight cache around each start, over the controller's core (see the module
    docstring): the cache's group (daemon/weight_cache.py), and what the launcher asks of it
    per start (the socket/ready templates for the server, the watch of its lines)."""

    c: Core  # all of it: the configuration, the engine's facts, the findings, the bus

    def __init__(self, core: Core, cache: WeightCache | None = None) -> None:
        """`cache`: the weight cache (None: fastverifyd's own, wired into the launcher: the
        server's environment gets its socket/ready templates, each start's lines are read,
        the client flag is set aside when argvs are compared)."""
        self.c = core
        if cache is None:
            from fastverify.daemon.weight_cache import WeightCache

            cache = WeightCache(core.cfg, core.engine, core.store, say=core.say)
            core.launcher.env_parts.append(cache.env_paths)
            core.launcher.line_readers_for.append(self._reader)
            core.launcher.argv_aside.append(self._aside)
        self.cache = cache

    # ------------------------------------------------------------ the part (parts.py)
    NAME = PART
    STATUS = "weight_cache"
    SECTION = (
        "SGLang's weight-cache daemon as fastverifyd runs it (docs/guides/weight-cache.md): "
        "`{setting, state, available, speculative, restarts, last_failure, mismatch, pid?, "
        "pgid?, ranks?, rank_pids?, adopted?, started_at?, ready_s?, log?, argv?, fingerprint?,"
        " bytes, bytes_source, memory_note?}`"
    )

    def attach(self, bus: EventBus, hub: MetricsHub | None) -> None:
        """The cache's exporter source on `hub`: the group's readiness and the GPU memory it
        holds (published, down, before any start once configured), and each start's hit
        or fallback (the WeightsLoaded event)."""
        if hub is None:
            return
        from fastverify.daemon import events as ev
        from fastverify.exporters.collectors.weight_cache import WeightCacheSource

        source = hub.add(WeightCacheSource(hub))

        def changed() -> None:
            size, _ = self.cache.bytes_held()
            source.set_group(self.cache.state == "ready", size)

        def loaded(e: Any) -> None:
            if isinstance(e, ev.WeightsLoaded):
                source.on_start(e.weights)

        self.cache.on_change = changed
        if self.cache.setting != "off":
            changed()
        bus.subscribe(loaded)

    def status(self) -> dict[str, Any]:
        """The cache's group (`weight_cache.WeightCache.status`), the lines status prints
        (where the serving engine's weights came from, the group) and the modes it serves."""
        st: dict[str, Any] = self.cache.status()
        summary: list[str] = []
        if st.get("setting") != "off" or st.get("pid"):
            load = load_record(self.c.current) or {}
            if load.get("text"):
                summary.append(f"load:       {load['text']}")  # "weights: from the cache (...)"
            size = f", {st['bytes'] / GiB:.1f} GiB" if st.get("bytes") else ""
            who = f" (pid {st['pid']}, {st.get('ranks')} rank(s){size})" if st.get("pid") else ""
            why = ""
            if st.get("state") in ("failed", "mismatch") and st.get("last_failure"):
                why = f": {st['last_failure'].get('message')}"
            summary.append(
                f"weight cache: {st.get('state')}{who} [weight_cache = {st.get('setting')}]{why}"
            )
        serves = st.get("setting") in ("auto", "on") and st.get("available")
        up = st.get("state") in ("ready", "starting")  # failed, stopped, mismatch: from disk
        shared = (
            ["baseline", *(SPEC_MODES if st.get("speculative") else ())] if serves and up else []
        )
        return section(st, summary, shared, st.get("ready_s"))  # its own read of the checkpoint

    def adopt(self) -> str | None:
        note: str | None = self.cache.adopt()  # an adopted server maps the cache's weights
        return note

    def sharing(self, mode: str, load_format: str | None = None) -> Sharing:
        """A baseline engine on real weights started beside the serving one maps the same
        weights when the cache is ready (the standby's memory: theirs plus the cache's once;
        on the sim, the simulated cache's bytes when NVML has none)."""
        if self.cache.setting == "off":
            return Sharing(False, "standby needs the weight cache ([server] weight_cache = off):"
                           " a second engine would load a second copy of the weights")  # fmt: skip
        if (
            self.cache.status().get("state") != "ready"
            or mode != "baseline"
            or load_format == TRIAL_LOAD_FORMAT
        ):
            return Sharing(False, "the weight cache cannot serve this start (a speculative "
                           "mode, a trial on dummy weights, or the cache is down)")  # fmt: skip
        size, _ = self.cache.bytes_held()
        if size is None:
            server = self.c.cfg.server
            size = self.c.engine.simulated_weight_bytes(
                max(1, server.tp_size // max(1, server.nnodes))
            )
        cf = self.cache.facts()  # 0.5.19+ adds the cache's bytes to its pre-load memory
        return Sharing(True, None, size, preloaded=cf is not None and cf.accounts_cached_weights)

    def accepted(
        self, kind: str, mode: str, load_format: str | None, op: Operation
    ) -> dict[str, Any]:
        return {"weights_notice": self.notice(kind, mode, load_format, op)}

    def around_spawn(
        self, op: StartOf, argv: list[str], cancel: threading.Event, spawn: Spawn
    ) -> EngineHandle | Failure:
        return self.spawn_engine(op, argv, cancel, spawn)

    def after_ready(self, op: StartOf, h: EngineHandle) -> Failure | None:
        return self.done(op, h)

    def after_failure(
        self, op: StartOf, h: EngineHandle, failure: Failure, cancel: threading.Event
    ) -> tuple[Failure, bool]:
        failure = self.refused(h, failure)
        return failure, self.again_from_disk(op, h, failure, cancel)

    def result_fields(self, op: Operation, h: EngineHandle) -> dict[str, Any]:
        # where the weights came from, and the notice given before anything stopped
        return {"weight_load": load_record(h), "weights_notice": self.notice_of(op)}

    def engine_fields(self, h: EngineHandle | None) -> dict[str, Any]:
        return {"weight_load": load_record(h)}  # from the cache or disk

    def reconfigure(self, cfg: Config, engine: Engine) -> None:
        self.cache.cfg = cfg
        self.cache.engine = engine

    def shutdown(self) -> None:
        self.cache.shutdown()

    # -------------------------------------------------------------------- the steps
    def _aside(self, argv: list[str]) -> list[str]:
        return wc.strip_flags(argv) if self.cache.setting != "off" else argv

    def _reader(self, h: EngineHandle) -> Any:
        watch = of(h).watch = self._weights_watch(h.argv)
        return watch.on_line

    def _gate_for(
        self, mode: str, load_format: str | None, refused: tuple[str, str] | None = None
    ) -> Gate:
        """The gate of a start of `mode` (`load_format` None: the configuration's), closed
        by the cache's `refused` (kind, why) of an earlier try of the same start."""
        cfg = self.c.cfg
        g = gate(
            self.cache.setting,
            self.c.engine.facts(),
            mode=mode,
            load_format=load_format if load_format is not None else cfg.server.load_format,
            nnodes=cfg.server.nnodes,
        )
        if g.use and refused:
            kind, why = refused
            return Gate(False, f"the cache refused: {why}", expected=False, kind=kind)
        return g

    def _cache_gate(
        self, op: StartOf, argv: list[str], cancel: threading.Event
    ) -> tuple[list[str], Gate, Failure | None]:
        """The argv to spawn (with `--weight-cache-mode client` when the cache serves it,
        after making sure it is ready), the gate, or the failure that ends the start."""
        setting = self.cache.setting
        if setting == "off":
            if self.cache.handle is not None:  # configured off since (SIGHUP): nothing maps it
                self.cache.stop("weight_cache = off")
            return argv, Gate(False, "weight_cache = off", kind="off"), None
        argv = wc.strip_flags(argv)
        # the load format of its argv (a rollback of a trial rolls back on dummy weights)
        from fastverify.engines.sglang import load_format_of

        part = op_part(op)
        g = self._gate_for(
            op.mode, load_format_of(argv), part.refused if part is not None else None
        )
        if not g.use:
            if setting == "on" and not g.expected and g.kind not in ("refused", "mismatch"):
                return argv, g, Failure("weight_cache_unavailable", f'weight_cache = "on": {g.why}')
            return argv, g, None
        failure = self.cache.ensure(cancel, lambda msg: self.c.say(msg), op.profile)
        if failure is None:
            return wc.client_argv(argv), g, None
        if failure.reason == "cancelled" or setting == "on":
            return argv, g, failure
        why = f"the cache is not available: {failure.message}"
        kind = "mismatch" if failure.reason == "weight_cache_mismatch" else "unavailable"
        return argv, Gate(False, why, expected=False, kind=kind), None

    def spawn_engine(
        self, op: StartOf, argv: list[str], cancel: threading.Event, spawn: Spawn
    ) -> EngineHandle | Failure:
        """`spawn` behind the cache's gate: an EngineHandle, or the Failure (or what `spawn`
        returned: a Failure of its own)."""
        argv, g, refusal = self._cache_gate(op, argv, cancel)
        if refusal is not None:
            return refusal
        h = spawn(argv)
        if not isinstance(h, Failure):
            of(h).gate = g
        return h

    def _weights_watch(self, argv: list[str]) -> WeightsWatch:
        asked = any(a == wc.MODE_FLAG and b == wc.CLIENT for a, b in itertools.pairwise(argv))
        try:
            facts = self.c.engine.facts()
        except (AttributeError, ValueError):  # an engine without SGLang facts
            facts = None
        return WeightsWatch(facts, asked)

    def again_from_disk(
        self, op: StartOf, h: EngineHandle, failure: Failure, cancel: threading.Event
    ) -> bool:
        """auto: SGLang refused the cache (fingerprint, dead socket): start the same again,
        from disk, once (the gate sees the refusal in `op.parts[PART]`)."""
        if (
            failure.reason not in ("weight_cache_mismatch", "weight_cache_refused")
            or self.cache.setting != "auto"
            or (part := op.parts.setdefault(PART, OpWeights())).refused
            or cancel.is_set()
        ):
            return False
        part.refused = (
            failure.reason.removeprefix("weight_cache_"),
            failure.message.removeprefix("SGLang refused the weight cache: "),
        )
        self.c.say(
            f"{failure.message}; starting {h.profile}/{h.mode} again from disk",
            logging.WARNING,
        )
        return True

    def notice(
        self, kind: str, mode: str, load_format: str | None, op: Operation | None = None
    ) -> str | None:
        """Said before anything stops: a switch the cache cannot serve by design (a
        speculative mode the release refuses) loads from disk, about how long, and why
        (kept as `op`'s, when given, for its result)."""
        text = self._notice(kind, mode, load_format)
        if op is not None:
            op.parts.setdefault(PART, OpWeights()).notice = text
        return text

    @staticmethod
    def notice_of(op: Operation) -> str | None:
        return part.notice if (part := op_part(op)) is not None else None

    def _notice(self, kind: str, mode: str, load_format: str | None) -> str | None:
        if self.cache.setting == "off":
            return None
        g = self._gate_for(mode, load_format)
        if g.use or g.kind != "speculative":
            return None
        est = self.cache.disk_estimate(mode)
        up = self.cache.status()
        stays = ""
        if up.get("state") == "ready":
            size = f", {up['bytes'] / GiB:.1f} GiB" if up.get("bytes") else ""
            stays = (
                "; the weight cache stays up for the next baseline switch "
                f"(pid {up.get('pid')}{size})"
            )
        return f"this {kind} loads from disk ({est}): {g.why}{stays}"

    def done(self, op: StartOf, h: EngineHandle) -> Failure | None:
        """After a start came up: its `weights` record, the finding and warning of a
        fallback (a failure with `on`), the figures for the next notice and the exporter."""
        from fastverify.daemon import events as ev

        part = of(h)
        g = part.gate or Gate(False, None)
        size, _ = self.cache.bytes_held()
        record = part.record = weights_summary(part.watch, g, h.ready_s, size)
        self.cache.record_time(record["source"], h.mode, h.ready_s)
        watch = part.watch
        if record["source"] == "disk" and watch is not None and watch.load_mem_gb:
            self.cache.record_weight_gb(watch.load_mem_gb)
            self.cache.on_change()  # what the cache holds may be known now
        text = record["text"]
        if record.get("fallback"):
            if self.cache.setting == "on":
                return Failure(
                    "weight_cache_fallback", f'weight_cache = "on" and {text}', log=str(h.log_path)
                )
            self.c.set_finding("weight_cache", f"{h.profile}/{h.mode}: {text}")
            self.c.say(text, logging.WARNING)
        else:
            self.c.clear_finding("weight_cache")
            self.c.say(text)
        self.c.bus.publish(ev.WeightsLoaded(h.profile, h.mode, dict(record)))
        return None

    def refused(self, h: EngineHandle, failure: Failure) -> Failure:
        """A start that failed because SGLang refused the cache (its fingerprint, a dead
        socket) or died with it: that reason, with SGLang's words; the cache is stopped for a
        mismatch (SGLang refuses to disk-load beside another configuration's weights)."""
        watch = of(h).watch
        if watch is None or not watch.asked:
            return failure
        if watch.died():
            return Failure(
                "weight_cache_died",
                "the weight cache died while the server held "
                "its weights (SGLang's watchdog ended the server)",
                failure.line,
                failure.log,
                failure.exit_code,
            )
        refusal = watch.refusal()
        if refusal is None or refusal[0] == "socket_missing":
            return failure
        reason, why = refusal
        if reason == "mismatch":
            self.cache.note_mismatch(why, h.profile)
        else:
            self.cache.stop(f"SGLang: {why}")
        return Failure(
            f"weight_cache_{reason}",
            f"SGLang refused the weight cache: {why}",
            failure.line,
            failure.log,
            failure.exit_code,
        )
