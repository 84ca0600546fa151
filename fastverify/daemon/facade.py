"""The control API's one door into the daemon: `ControlFacade`.

The HTTP handler (api_handler.py) calls only these methods; it never reads the configuration, the
controller's fields, the log ring or the exporter runtime itself.

    status() -> dict                      history(n, before) -> list[dict]
    status_line() -> str                  log_tail(n) / log_since(seq, timeout) / log_seq()
    server_argv(profile, mode, check) -> dict
    operate(kind, name, mode, **request) -> Operation
    cancel() -> Operation | None
    baselines() -> dict                   set_baseline(body) -> dict
    decision() -> dict                    record_decision(body) -> dict
    acceptance() -> dict                  record_acceptance(body) -> dict
    spec_plan() -> dict                   store_spec_plan(body) -> dict
    take_lease(experiment, description, pid, force, caller) -> dict
    release_lease(id, caller) -> dict
    capture_trace(steps | None) -> dict
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

from fastverify import api_answers as a
from fastverify.api_answers import EngineStatus, StatusBody
from fastverify.api_bodies import (
    RecordAcceptanceBody,
    RecordBaselineBody,
    RecordDecisionBody,
    StoreSpecPlanBody,
)
from fastverify.config import weights_label
from fastverify.daemon import events as ev
from fastverify.daemon.baselines import check_baseline, with_concurrency
from fastverify.daemon.controller import Controller
from fastverify.daemon.lease import Leases
from fastverify.daemon.lease import public as public_lease
from fastverify.daemon.observers import ExporterFeed, LiveFigures
from fastverify.daemon.operations import Operation
from fastverify.daemon.profile_listing import CachedListing
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.states import State
from fastverify.daemon.watch import quiet as watch_quiet
from fastverify.engines.sglang import load_format_of
from fastverify.host import here as host_here
from fastverify.lease_record import describe as describe_lease
from fastverify.redact import mask_argv

if TYPE_CHECKING:
    from fastverify.daemon.auth import Caller
    from fastverify.engines.base import Engine

_S = TypeVar("_S", bound="ControlFacade")
_P = ParamSpec("_P")
_R = TypeVar("_R")
_Method = Callable[Concatenate[_S, _P], _R]


def records(what: str) -> Callable[[_Method[_S, _P, _R]], _Method[_S, _P, _R]]:
    """A record endpoint's method: a state dir that refuses the write (read-only, full,
    permissions) is the 507 it is, with what was not recorded, never a 500."""

    def wrap(method: _Method[_S, _P, _R]) -> _Method[_S, _P, _R]:
        @functools.wraps(method)
        def run(self: _S, /, *args: _P.args, **kw: _P.kwargs) -> _R:
            try:
                return method(self, *args, **kw)
            except OSError as exc:
                raise RequestError(
                    507,
                    f"{what} not recorded: the state dir {self.ctl.store.dir} refused the write "
                    f"({exc.strerror or exc}); nothing was changed (make it writable, free "
                    "space)",
                    reason="state_dir_unwritable",
                ) from None

        return run

    return wrap


log = logging.getLogger("fastverifyd.facade")


def _add_parts_fields(body: StatusBody | EngineStatus, fields: dict[str, Any]) -> None:
    """Add what the daemon's parts contribute (their engine fields and status sections):
    fields the body declares as a part's (NotRequired), named by the part at run time."""
    cast(dict[str, Any], body).update(fields)


class ControlFacade:
    def __init__(
        self,
        ctl: Controller,
        engine_reason: str,
        figures: LiveFigures,
        feed: ExporterFeed | None = None,
    ) -> None:
        self.ctl = ctl
        self.engine_reason = engine_reason
        self.figures = figures
        self.feed = feed
        self.config_error: str | None = None
        self.canary: dict[str, Any] | None = None  # declarative mode: an explicit --canary
        self.leases = Leases()  # an experiment's hold on the daemon (fastverify.daemon.lease)
        self._listing = CachedListing()  # GET /v1/profiles
        self._caps: dict[tuple[str, ...], dict[str, Any] | None] = {}  # engine capabilities
        self._caps_pending: set[tuple[str, ...]] = set()
        self._caps_lock = threading.Lock()

    # ------------------------------------------------------------------ status
    def status_line(self) -> str:
        """One-line summary for systemd's STATUS= (e.g. "serving tree-ll/eagle3 82.4 tok/s")."""
        with self.ctl._lock:  # one snapshot: the state, the engine and the operation
            return self._status_line()

    def _status_line(self) -> str:
        c = self.ctl
        prof = c.active.get("profile") or "-"
        mode = c.active.get("mode") or "-"
        st = c.state
        if st == State.READY:
            tps = self.figures.tokens_per_second()
            rate = f" {tps:.1f} tok/s" if tps else ""
            sim = " (simulated)" if c.engine.simulated else ""
            return f"serving {prof}/{mode}{rate}{sim}"
        op = c.op
        if st in (State.STARTING, State.ROLLING_BACK) and op is not None:
            h = c.current
            pct = h.progress.get("percent") if h else None
            what = f" {pct:.0f}%" if pct is not None else ""
            verb = "rolling back to" if st == State.ROLLING_BACK else "starting"
            target = (
                c.active if st == State.ROLLING_BACK else {"profile": op.profile, "mode": op.mode}
            )
            return f"{verb} {target['profile']}/{target['mode']}{what}"
        if st == State.FAILED and c.last_failure:
            return f"failed: {c.last_failure.get('reason')} ({prof}/{mode})"
        return f"{st.lower()} {prof}/{mode}"

    def status(self) -> StatusBody:
        c = self.ctl
        identity = self.engine_identity()  # the engine adapter's: no state read under the lock
        with c._lock:
            h = c.current
            op = c.op
            alive = h is not None and h.alive()
            engine: EngineStatus = {
                "name": c.engine.name,
                "pid": h.pid if h is not None and alive else None,
                "pgid": h.pgid if h is not None and alive else None,
                "url": h.url if h is not None else c.cfg.server.url,
                "simulated": c.engine.simulated,
                "reason": self.engine_reason,
                "engine_env": h.engine_env if h is not None else None,
                "log": str(h.log_path) if h is not None else None,
                "started_at": h.started_at if h is not None else None,
                "start_seconds": h.ready_s if h is not None else None,
                "ready_by": h.ready_by if h is not None else None,
                "progress": dict(h.progress) if h is not None else None,
                "adopted": h.adopted if h is not None else False,
                "weights": weights_label(load_format_of(h.argv)) if h is not None else None,
                # the watch of SGLang's /health_generate after READY (daemon/watch.py)
                "health": h.watch.health() if h is not None and alive and h.watch else None,
                "identity": identity,
                "capabilities": None,  # below, outside the lock
            }
            for part in c.parts:  # what a part keeps of this engine (its tuner, its weights' load)
                _add_parts_fields(engine, part.engine_fields(h))
            argv = list(h.argv) if h is not None else None
            sections = [part.STATUS for part in c.parts if part.STATUS is not None]
            out: StatusBody = {
                "state": str(c.state),
                "since": c.since,
                "profile": c.active.get("profile"),
                "mode": c.active.get("mode"),
                "engine": engine,
                "last_good": c.last_good["profile"] if c.last_good else None,
                "last_good_mode": c.last_good["mode"] if c.last_good else None,
                "last_failure": _failure_view(c.last_failure, c.state, h if alive else None),
                "switch_in_flight": dict(op.describe()) if op is not None else None,
                "queued": len(c.slot.queued()),
                "restarts": {"total": sum(c.restarts.values()), "by_reason": dict(c.restarts)},
                "recovery": c.recovery_status(),
                "trial": engine["weights"] == "dummy",  # --load-format dummy: a timing trial
                "tokens_per_second": self.figures.tokens_per_second(),
                "status_line": self.status_line(),
                "config": {"source": c.cfg.source, "error": self.config_error},
                "declarative": self._declarative(),
                "lease": public_lease(self.leases.current()),
                "decision": self._decision_now(),
                "sglang": _sglang_summary(c.engine),
                "findings": [
                    *c.store.findings,
                    *c.findings.values(),
                    *filter(None, [c.store.journal_problem]),
                ],
                "daemon": {
                    "pid": os.getpid(),
                    "state_dir": str(c.store.dir),
                    "profile_dirs": [str(d) for d in c.cfg.profile_dirs],
                    "fingerprint": host_here.load(c.store.dir),
                },
                "parts": sections,  # each part's section, in order (below)
            }
        for part in c.parts:  # outside the lock: a part may ask the system (NVML, a socket)
            if part.STATUS is not None:
                _add_parts_fields(out, {part.STATUS: part.status()})
        # outside the lock: the first answer for an argv may probe the host (nvidia-smi)
        engine["capabilities"] = self.capabilities(argv)
        return out

    def engine_identity(self) -> dict[str, Any]:
        """Which engine measures and serves here: `{kind, version, simulated}` (kind "sglang"
        or "sim"; the SGLang release it is or plays). Every decision and result file carries
        it, so that a simulated figure is never read as a measurement of hardware."""
        eng = self.ctl.engine
        return {
            "kind": eng.name,
            "version": (_sglang_summary(eng) or {}).get("version"),
            "simulated": bool(eng.simulated),
        }

    def capabilities(self, argv: list[str] | None) -> dict[str, Any] | None:
        """The engine's all-reduce capabilities for the argv it serves (else the configured
        one): fastverify.engines.allreduce_host.capabilities, kept per argv. A real engine's
        first answer probes the host (nvidia-smi, FlashInfer in the server's interpreter:
        seconds), so it runs in the background and status says it is under way meanwhile."""
        c = self.ctl
        try:
            if argv is None:
                _, argv = c.resolver.resolve(*c.resolver.defaults(None, None, c.active))
        except Exception as exc:  # status must answer even when the engine cannot say
            return {"error": f"cannot tell the engine's all-reduce capabilities: {exc}"}
        key = tuple(argv)
        with self._caps_lock:
            if key in self._caps:
                return self._caps[key]
            if c.engine.simulated:  # the sim's host is known without probing anything
                self._caps = {key: self._probe_caps(list(argv))}
                return self._caps[key]
            if key not in self._caps_pending:
                self._caps_pending.add(key)
                threading.Thread(target=self._probe_async, args=(key,), daemon=True,
                                 name="engine-capabilities").start()  # fmt: skip
        return {"error": "probing the engine's host (nvidia-smi, FlashInfer); ask again shortly"}

    def _probe_caps(self, argv: list[str]) -> dict[str, Any] | None:
        from fastverify.daemon.allreduce_part import host_of
        from fastverify.engines.allreduce_host import capabilities

        try:
            host = host_of(self.ctl.launcher, argv)
            return capabilities(host, argv) if host is not None else None
        except Exception as exc:
            return {"error": f"cannot tell the engine's all-reduce capabilities: {exc}"}

    def _probe_async(self, key: tuple[str, ...]) -> None:
        caps = self._probe_caps(list(key))
        with self._caps_lock:
            self._caps = {key: caps}
            self._caps_pending.discard(key)

    def _decision_now(self) -> dict[str, Any] | None:
        """The newest tuning decision and whether it is what serves now (`serving`): a
        manual switch away from it leaves the decision recorded but no longer serving."""
        rec = self.ctl.store.load_json("decision.json")
        if not rec or not rec.get("profile"):
            return None
        c = self.ctl
        h = c.current
        trial = h is not None and weights_label(load_format_of(h.argv)) == "dummy"
        serving = (
            c.state == State.READY
            and (c.active.get("profile"), c.active.get("mode")) == (rec["profile"], rec["mode"])
            and not trial
        )
        keys = ("profile", "mode", "backend", "applied", "decided_at", "report", "engine")
        return {**{k: rec.get(k) for k in keys}, "serving": serving}

    def _declarative(self) -> dict[str, Any] | None:
        """Declarative mode (Kubernetes): what the manifest declares, and a canary if any."""
        cfg = self.ctl.cfg
        if not cfg.daemon.declarative:
            return None
        return {
            "profile": cfg.daemon.default_profile,
            "mode": cfg.server.mode,
            "source": cfg.source,
            "canary": dict(self.canary) if self.canary else None,
        }

    def _check_declarative(
        self, kind: str, name: str | None, mode: str | None, canary: bool
    ) -> dict[str, str] | None:
        """Declarative mode: a switch away from the declared profile/mode needs `canary`."""
        cfg = self.ctl.cfg
        if not cfg.daemon.declarative or kind not in ("switch", "mode"):
            return None
        target = self.ctl.resolver.defaults(name, mode, self.ctl.active)
        declared = (cfg.daemon.default_profile, cfg.server.mode)
        if target == declared:
            return None  # back to the declared state: always allowed, ends a canary
        if not canary:
            raise RequestError(
                403,
                f"this daemon is declarative: its profile and mode come from its configuration"
                f" ({cfg.source or 'defaults'}: {declared[0]}/{declared[1]}), e.g. a Kubernetes"
                f" manifest; switching to {target[0]}/{target[1]} here would make the cluster's"
                " desired state and the daemon disagree. Change the manifest and roll it out"
                " (docs/guides/kubernetes.md), or try it on this pod only with --canary"
                " (status shows it)",
                reason="declarative",
                declared={"profile": declared[0], "mode": declared[1]},
            )
        return {"profile": target[0], "mode": target[1]}

    def profiles(self) -> list[a.ProfileListed]:
        """Every profile of the daemon's store (its directories, its engine's host), the
        active one marked."""
        return self._listing.rows(self.ctl.resolver.profiles, self.ctl.active.get("profile"))

    def history(self, n: int, before: float | None = None) -> list[a.HistoryRecord]:
        """A page of the history: the newest `n` records finished before `before` (the
        journal's `switch` records: the daemon wrote them)."""
        return cast(list[a.HistoryRecord], self.ctl.store.history(n, before))

    # ------------------------------------------------------------------ logs
    def log_tail(self, n: int) -> list[dict[str, Any]]:
        return self.ctl.ring.tail(n)

    def log_since(self, seq: int, timeout: float) -> list[dict[str, Any]]:
        return self.ctl.ring.since(seq, timeout)

    def log_seq(self) -> int:
        return self.ctl.ring.seq

    # ------------------------------------------------------------------ argv
    def server_argv(self, profile: str | None, mode: str | None, check: bool) -> a.ServerArgv:
        c = self.ctl
        name, mode = c.resolver.defaults(profile, mode, c.active)
        _, argv = c.resolver.resolve(name, mode)
        return {
            "engine": c.engine.name,
            "simulated": c.engine.simulated,
            "profile": name,
            "mode": mode,
            "argv": mask_argv(argv),
            "check": cast(a.ArgvCheck, c.resolver.check_argv(argv).to_dict()) if check else None,
        }

    # ------------------------------------------------------------------ operations
    def operate(self, kind: str, name: str | None, mode: str | None, **request: Any) -> Operation:
        """Check declarative mode (`canary`), then Controller.request, which checks the lease
        once the request is valid and not `unchanged` (`lease`: the experiment's own operation,
        fastverify.daemon.lease; `force` overrides another's)
        with the rest of the request (force, queue, timeout_s, withdrawn, restart,
        load_format, eagle3_steps, caller: who asked; the result and history record carry
        it as `by`)."""
        lease, canary = request.pop("lease", None), request.pop("canary", False)
        what = {"switch": f"switch to {name}", "mode": f"switch to mode {mode}"}.get(kind, kind)
        caller = request.get("caller")
        holder = caller.identity if caller is not None else ""
        force = request.get("force", False)
        target = self._check_declarative(kind, name, mode, canary)
        overridden: list[Any] = []  # the lease this request overrides (force), if any

        def gate() -> None:  # after validation: a typo is refused as one, lease or not
            overridden.append(self.leases.check(lease, force, what, holder))

        op = self.ctl.request(kind, name, mode, **request, gate=gate)
        if overridden and overridden[0] is not None:
            self._record_override(overridden[0], what, caller)
        if self.ctl.cfg.daemon.declarative and kind in ("switch", "mode"):
            self.canary = None if target is None else {**target, "since": time.time(), "op": op.id}
        return op

    def cancel(self, caller: Caller | None = None) -> Operation | None:
        return self.ctl.cancel(caller)

    # ------------------------------------------------------------------ leases
    def take_lease(
        self,
        experiment: str,
        description: str,
        pid: int | None,
        force: bool = False,
        caller: Caller | None = None,
    ) -> a.Lease:
        """A lease bound to `caller`'s identity (the answer holds its id: the holder's only)."""
        holder = caller.identity if caller is not None else ""
        lease, overridden = self.leases.take(experiment, description, pid, force, holder)
        if overridden is not None:
            self._record_override(overridden, f"{experiment} lease", caller)
        log.info("lease taken: %s", describe_lease(lease))
        return cast(a.Lease, lease)

    def _record_override(self, lease: dict[str, Any], what: str, caller: Any) -> None:
        """A forced operation or lease over another's lease: one history record (kind
        `lease_override`) that names both, and a warning in the log."""
        by = caller.by if caller is not None else "fastverifyd"
        now = time.time()
        message = f"{what} by {by} overrode the lease of {describe_lease(lease)}"
        log.warning("%s", message)
        rec = {"type": "switch", "kind": "lease_override", "result": "overridden",
               "reason": "forced", "message": message, "by": by,
               "lease": public_lease(lease), "profile": self.ctl.active.get("profile"),
               "mode": self.ctl.active.get("mode"), "started_at": now, "finished_at": now,
               "duration_s": 0.0}  # fmt: skip
        if caller is not None:
            rec["caller"] = caller.to_dict()
        try:
            self.ctl.store.append_journal(rec)
        except OSError as exc:
            log.error("cannot record a lease override in the journal: %s", exc)

    def release_lease(self, lease_id: str, caller: Caller | None = None) -> a.Released:
        lease = self.leases.release(lease_id, caller.identity if caller is not None else "")
        if lease is None:
            raise RequestError(404, f"no lease {lease_id!r} is in force", reason="no_lease")
        log.info("lease released: %s", describe_lease(lease))
        return {"released": cast(a.Lease, lease)}

    # ------------------------------------------------------------------ baselines
    def baselines(self) -> dict[str, a.ProfileBaselines]:
        return cast(dict[str, a.ProfileBaselines], self.ctl.store.load_baselines())

    @records("baseline")
    def set_baseline(self, request: RecordBaselineBody) -> a.BaselineRecord:
        """Validate, persist (baselines.json) and announce a baseline measurement.
        RequestError(422) names every bad field (`fields`: field -> what is wrong)."""
        now = time.time()
        _refuse(check_baseline(request, self._profile_problem, now), "invalid_baseline")
        body: Mapping[str, Any] = request  # its values checked (concurrency given, ...)
        rec: a.BaselineRecord = {
            "profile": body["profile"],
            "tokens_per_second": float(body["tokens_per_second"]),
            "per_request_tokens_per_second": float(body["per_request_tokens_per_second"]),
            "measured_at": float(
                body["measured_at"] if body.get("measured_at") is not None else now
            ),
            "concurrency": int(body["concurrency"]),
        }
        if body.get("accept_length") is not None:  # EAGLE-3 with real weights (trial sweeps)
            rec["accept_length"] = float(body["accept_length"])
            rec["acceptance_source"] = str(body.get("acceptance_source") or "measured")
        store = self.ctl.store
        with self.ctl._lock:
            data = store.load_baselines()
            data[rec["profile"]] = with_concurrency(data.get(rec["profile"]), dict(rec))
            store.save_baselines(data)
        self.ctl.bus.publish(
            ev.BaselineRecorded(
                rec["profile"],
                rec["tokens_per_second"],
                rec["per_request_tokens_per_second"],
                rec["measured_at"],
                rec["concurrency"],
            )
        )
        return rec

    # ------------------------------------------------------------------ decision
    def decision(self) -> a.DecisionRecord | None:
        """The newest decision (None: none recorded)."""
        return cast(a.DecisionRecord, self.ctl.store.load_json("decision.json")) or None

    @records("decision")
    def record_decision(
        self, body: RecordDecisionBody, caller: Caller | None = None
    ) -> a.DecisionRecord:
        """Validate, persist (decision.json + a history record) and announce a tuning
        decision (fastverify.daemon.decision). RequestError(422) names every bad field."""
        from fastverify.daemon import decision as dec

        _refuse(dec.check_decision(body, self._profile_problem), "invalid_decision")
        rec = dec.decision_record(body)
        rec["engine"] = self.engine_identity()  # the daemon's own account, never the client's
        if caller is not None:
            rec["by"] = caller.by
        with self.ctl._lock:
            self.ctl.store.save_json("decision.json", rec)
            self.ctl.store.append_decision(dec.history_record(rec))
        self.ctl.bus.publish(ev.DecisionRecorded(rec["profile"], rec["mode"], rec["backend"],
                                                 bool(rec["applied"])))  # fmt: skip
        return cast(a.DecisionRecord, rec)

    # ------------------------------------------------------------------ speculation
    def acceptance(self) -> a.AcceptanceCurves:
        """{"profile/mode/steps": record} (fastverify.daemon.acceptance)."""
        from fastverify.daemon import acceptance

        return {"curves": cast(dict[str, a.AcceptanceRecord], acceptance.load(self.ctl.store))}

    @records("acceptance")
    def record_acceptance(self, body: RecordAcceptanceBody) -> a.AcceptanceRecord:
        from fastverify.daemon import acceptance, speculation_part

        with self.ctl._lock:
            handle = self.ctl.current
        rec = acceptance.record(self.ctl.store, handle, body, speculation_part.forced(handle))
        self.ctl.bus.publish(ev.AcceptanceRecorded(rec))
        self.ctl.say(
            f"acceptance recorded for {rec['profile']}/{rec['mode']} at {rec['steps']} steps "
            f"({rec['verifies']} verify passes, {rec['weights']} weights"
            + ("" if rec["usable"] else f"; not usable: {rec['why_not_usable']}")
            + ")"
        )
        return cast(a.AcceptanceRecord, rec)

    def spec_plan(self) -> a.SpecPlan | None:
        """The stored plan (None: none stored)."""
        from fastverify.daemon import acceptance

        return cast(a.SpecPlan, self.ctl.store.load_json(acceptance.PLAN_FILE)) or None

    @records("speculation plan")
    def store_spec_plan(self, body: StoreSpecPlanBody) -> a.SpecPlan:
        from fastverify.daemon import acceptance

        with self.ctl._lock:
            stored = acceptance.save_plan(self.ctl.store, body)
        self.ctl.bus.publish(ev.PlanStored(stored))  # the speculation part tells the exporter
        self.ctl.say(f"speculation plan stored; adaptive config {stored['adaptive_config']}")
        return cast(a.SpecPlan, stored)

    def _profile_problem(self, name: str) -> str | None:
        from fastverify.profiles.store import name_problem

        problem = name_problem(name)
        if problem is not None:
            return problem
        if self.ctl.resolver.profiles.find(name) is None:
            return f"no profile named {name!r} (see `fastverifyctl profile list`)"
        return None

    # ------------------------------------------------------------------ traces
    def capture_trace(
        self, steps: int | None, cancelled: Callable[[], bool] | None = None
    ) -> a.TraceCapture:
        """One profile window now: 409 when the exporter is off, the engine is idle or
        another window still runs after the capture timeout (nothing started); 502 when the
        window failed (it was stopped on the server and removed); `cancelled()` (the client
        went away) stops it."""
        from fastverify.exporters.runtime import CaptureRefused, CaptureTimedOut, EngineIdle

        # `busy: false` on a 409: nothing else is in flight, the capture cannot be done now
        # (the CLI exits 1 for these, 4 only when another operation or window is in flight).
        runtime = self.feed.runtime if self.feed is not None else None
        if runtime is None:
            raise RequestError(
                409,
                "the exporter is off (start fastverifyd with --metrics-listen)",
                reason="exporter_off",
                busy=False,
            )
        from fastverify.sglang.facts import FeatureMissing

        try:  # SGLang before 0.5.11 names no step spans: a window would time nothing
            self.ctl.engine.facts().require("step_spans", "trace capture")
        except FeatureMissing as exc:
            raise RequestError(422, str(exc), reason="sglang_feature_missing") from None
        if steps is None:
            steps = self.ctl.cfg.exporter.trace_steps  # range: api_requests.MIRRORS
        if self.ctl.state != State.READY:
            raise RequestError(
                409,
                f"no engine is serving (state {self.ctl.state}): nothing to profile",
                busy=self.ctl.op is not None,
            )
        try:  # a background window in progress is waited for, not a refusal
            window: dict[str, Any] = runtime.capture(
                steps,
                cancelled,
                wait_s=runtime.capture_timeout_s,
                quiet=watch_quiet,  # the watch's checks are not traffic
            )
            return cast(a.TraceCapture, window)
        except EngineIdle as exc:
            raise RequestError(409, str(exc), reason="capture_refused", busy=False) from None
        except CaptureRefused as exc:
            raise RequestError(409, str(exc), reason="capture_refused") from None
        except CaptureTimedOut as exc:
            raise RequestError(502, f"trace capture failed: {exc}", reason="timed_out") from None
        except Exception as exc:
            raise RequestError(502, f"trace capture failed: {exc}") from None


def _refuse(problems: dict[str, str], reason: str) -> None:
    """RequestError(422) naming every bad field (`fields`: field -> what is wrong), if any."""
    if problems:
        message = "; ".join(f"field {k!r}: {v}" for k, v in problems.items())
        raise RequestError(422, message, fields=problems, reason=reason)


def _failure_view(
    failure: dict[str, Any] | None, state: State, serving: Any
) -> dict[str, Any] | None:
    """The last failure, with `current`: False once an engine that started after it serves
    READY, or when it was a standby's that never took traffic while the serving engine served
    on (`kept_serving`): a past problem, not this engine's."""
    if not failure:
        return None
    past = (
        state == State.READY
        and serving is not None
        and (
            bool(failure.get("kept_serving"))
            or float(failure.get("at") or 0) <= float(serving.started_at or 0)
        )
    )
    return {**failure, "current": not past}


def _sglang_summary(engine: Engine) -> dict[str, Any] | None:
    """The server's SGLang and the facts serving it (status's `sglang`), None if unknown."""
    try:
        summary: dict[str, Any] = engine.facts().summary()
        return summary
    except ValueError as exc:  # below the range: the daemon refuses at start-up
        return {"error": str(exc)}
