"""The supervisor: one engine, one operation at a time, switch/rollback/crash-restart.

Operations (each runs in its own thread, holds the operation lock, and streams events):

- `start`   (daemon start-up): start the saved active profile (or the default).
- `adopt`   (daemon start-up after a crash): a live engine group from engine.pid that is
            provably ours is followed to readiness instead of being restarted.
- `switch`  (POST /v1/profile), `mode` (POST /v1/mode), `restart` (POST /v1/restart):
            stop the engine group -> wait for GPU memory release -> start with the clean
            environment -> readiness (health + ready line) -> verify -> READY; on failure
            classify, journal, and roll back to the last good (profile, mode).
- `crash_restart`: the engine died after READY: BACKOFF (exponential), restart; more than
            `restart_burst` crashes within `restart_window_s` -> FAILED (API still answers;
            the next successful switch recovers).

Validation (profile load, argv build, the engine's own argv parser) happens before the
operation lock is taken and before anything running is touched: an invalid request
changes nothing. Every state transition and every operation result is journaled.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from fastverify.config import MODES, Config
from fastverify.daemon import failures, logs, procs, verify
from fastverify.daemon.failures import Failure
from fastverify.daemon.notify import Notifier
from fastverify.daemon.states import State, check_transition
from fastverify.daemon.statestore import StateStore
from fastverify.engines.base import ArgvCheck, Engine, EngineArgError

log = logging.getLogger("fastverifyd.supervisor")
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# Operations counted as profile switches by the exporter (start-up and crash restarts are not).
SWITCH_KINDS = ("switch", "mode")


class RequestError(Exception):
    """A request the API answers with an HTTP error: `status`, `body`."""

    def __init__(self, status: int, message: str, **extra: Any):
        self.status = status
        self.body = {"error": message, **extra}
        self.reason: str = extra.get("reason") or "invalid_request"
        super().__init__(message)


class Cancelled(Exception):
    """The operation was cancelled (shutdown or a switch pre-empting a backoff)."""


def _now() -> float:
    return time.time()


def _pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --------------------------------------------------------------------------- operations
class Operation:
    """One in-flight operation: its identity, an append-only event list, and its result."""

    def __init__(self, kind: str, profile: str, mode: str):
        self.id = secrets.token_hex(4)
        self.kind = kind
        self.profile = profile
        self.mode = mode
        self.started_at = _now()
        self.t0 = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self.result: dict[str, Any] | None = None
        self.cancel = threading.Event()
        self.verify: dict[str, Any] | None = None
        self.phases: dict[str, float] = {}  # seconds per pipeline phase
        self._cond = threading.Condition()

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "profile": self.profile,
            "mode": self.mode,
            "started_at": self.started_at,
            "elapsed_s": round(time.monotonic() - self.t0, 3),
        }

    def moved(self) -> bool:
        """True once the operation has changed the daemon's state (it is past its start)."""
        with self._cond:
            return any(e["event"] == "state" for e in self.events)

    def emit(self, event: str, **data: Any) -> None:
        with self._cond:
            self.events.append({"event": event, "ts": _now(), **data})
            self._cond.notify_all()

    def finish(self, result: dict[str, Any]) -> None:
        with self._cond:
            self.result = result
            self.events.append({"event": "result", "ts": _now(), **result})
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        with self._cond:
            self._cond.wait_for(lambda: self.result is not None, timeout)
            return self.result

    def iter_events(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Every event from the first, blocking for new ones, ending with the result."""
        i = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._cond:
                while i >= len(self.events):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return
                    self._cond.wait(remaining if remaining is not None else 1.0)
                batch = self.events[i:]
                i = len(self.events)
            for ev in batch:
                yield ev
                if ev["event"] == "result":
                    return


# --------------------------------------------------------------------------- engine handle
@dataclass
class EngineHandle:
    engine_id: str
    pid: int
    pgid: int
    create_time: float | None
    argv: list[str]
    log_path: Path
    profile: str
    mode: str
    url: str
    expected_nccl: dict[str, str]
    proc: Any = None  # subprocess.Popen when we spawned it, None when adopted
    tail: logs.LogTail | None = None
    started_mono: float = field(default_factory=time.monotonic)
    started_at: float = field(default_factory=_now)
    ready_line: bool = False
    serving: bool = False
    expected_exit: bool = False
    exit_code: int | None = None
    exited: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)  # ready line or exit
    progress: dict[str, Any] = field(default_factory=dict)
    nccl_debug_dir: Path | None = None
    ready_s: float | None = None
    adopted: bool = False
    worker_pids: tuple[int, ...] = ()  # descendants verified at READY (the TP workers)

    def alive(self) -> bool:
        return not self.exited.is_set()

    def pid_info(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "pgid": self.pgid,
            "create_time": self.create_time,
            "engine_id": self.engine_id,
            "argv": self.argv,
            "log": str(self.log_path),
            "profile": self.profile,
            "mode": self.mode,
            "url": self.url,
            "expected_nccl": self.expected_nccl,
            "nccl_debug_dir": str(self.nccl_debug_dir) if self.nccl_debug_dir else None,
            "started_at": self.started_at,
            "daemon_pid": os.getpid(),
        }


# --------------------------------------------------------------------------- supervisor
class Supervisor:
    def __init__(
        self,
        cfg: Config,
        engine: Engine,
        engine_reason: str,
        store: StateStore,
        notifier: Notifier | None = None,
        hub: Any = None,
        profile_store: Any = None,
    ):
        self.cfg = cfg
        self.engine = engine
        self.engine_reason = engine_reason
        self.store = store
        self.notifier = notifier or Notifier(None)
        self.hub = hub
        self.runtime: Any = None  # ExporterRuntime, set by main
        if profile_store is None:
            from fastverify.profiles.store import ProfileStore

            profile_store = ProfileStore(user_dirs=cfg.profile_dirs)
        self.profiles = profile_store
        self.ring = logs.LogRing()
        self._lock = threading.RLock()
        self._op_lock = threading.Lock()
        self.state = State.STOPPED
        self.since = _now()
        self.op: Operation | None = None
        self.current: EngineHandle | None = None
        self.active: dict[str, str | None] = {"profile": None, "mode": None}
        self.last_good: dict[str, str] | None = None
        self.last_failure: dict[str, Any] | None = None
        self.crash_times: collections.deque[float] = collections.deque()
        self.restarts: collections.Counter[str] = collections.Counter()
        self.tokens_per_second: float | None = None
        self.config_error: str | None = None
        self.shutting_down = threading.Event()
        self._argv_checks: dict[tuple[str, ...], ArgvCheck] = {}
        self._threads: list[threading.Thread] = []
        self.on_state_change: list[Callable[[State], None]] = []

    # ------------------------------------------------------------------ helpers
    def daemon_log(self, message: str, level: int = logging.INFO) -> None:
        log.log(level, message)
        self.ring.add(message, source="daemon")
        op = self.op
        if op is not None and op.result is None:
            op.emit("log", line=message, source="daemon")

    def _set_state(self, new: State, why: str = "") -> None:
        with self._lock:
            old = self.state
            check_transition(old, new)
            if old == new:
                return
            self.state = new
            self.since = _now()
            op = self.op
        rec = {"type": "transition", "from": str(old), "to": str(new), "ts": self.since}
        if why:
            rec["why"] = why
        if op is not None:
            rec["op"] = op.id
            op.emit("state", state=str(new), previous=str(old), why=why)
        with contextlib.suppress(OSError):
            self.store.append_journal(rec)
        log.info("state %s -> %s%s", old, new, f" ({why})" if why else "")
        if new in (State.STARTING, State.ROLLING_BACK):
            self.notifier.extend_timeout(self.extend_seconds())
        self.notifier.status(self.status_line())
        self._feed_hub_engine()
        for cb in list(self.on_state_change):
            with contextlib.suppress(Exception):
                cb(new)

    def extend_seconds(self) -> float:
        return 30.0

    def status_line(self) -> str:
        """One-line summary for systemd's STATUS= (e.g. "serving tree-ll/eagle3 82.4 tok/s")."""
        prof = self.active.get("profile") or "-"
        mode = self.active.get("mode") or "-"
        st = self.state
        if st == State.READY:
            tps = f" {self.tokens_per_second:.1f} tok/s" if self.tokens_per_second else ""
            sim = " (simulated)" if self.engine.simulated else ""
            return f"serving {prof}/{mode}{tps}{sim}"
        op = self.op
        if st in (State.STARTING, State.ROLLING_BACK) and op is not None:
            h = self.current
            pct = h.progress.get("percent") if h else None
            what = f" {pct:.0f}%" if pct is not None else ""
            verb = "rolling back to" if st == State.ROLLING_BACK else "starting"
            return f"{verb} {op.profile}/{op.mode}{what}"
        if st == State.FAILED and self.last_failure:
            return f"failed: {self.last_failure.get('reason')} ({prof}/{mode})"
        return f"{st.lower()} {prof}/{mode}"

    def _hub(self, method: str, *args: Any, **kw: Any) -> None:
        if self.hub is None:
            return
        try:
            getattr(self.hub, method)(*args, **kw)
        except Exception:
            log.exception("exporter hub %s failed", method)

    def _feed_hub_engine(self) -> None:
        if self.hub is None:
            return
        settings: dict[str, str] = {}
        h = self.current
        if h is not None:
            settings = dict(h.expected_nccl)
        self._hub(
            "set_engine",
            self.state == State.READY,
            self.active.get("profile"),
            self.active.get("mode"),
            settings,
            self.engine.name,
            h.url if h is not None else None,
        )

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        with self._lock:
            h = self.current
            op = self.op if (self.op is not None and self.op.result is None) else None
            engine: dict[str, Any] = {
                "name": self.engine.name,
                "pid": h.pid if h is not None and h.alive() else None,
                "pgid": h.pgid if h is not None and h.alive() else None,
                "url": h.url if h is not None else self.cfg.server.url,
                "simulated": self.engine.simulated,
                "reason": self.engine_reason,
                "engine_env": getattr(self, "engine_rules", None),  # [sglang] added vars
                "log": str(h.log_path) if h is not None else None,
                "started_at": h.started_at if h is not None else None,
                "start_seconds": h.ready_s if h is not None else None,
                "progress": dict(h.progress) if h is not None else None,
                "adopted": h.adopted if h is not None else False,
            }
            return {
                "state": str(self.state),
                "since": self.since,
                "profile": self.active.get("profile"),
                "mode": self.active.get("mode"),
                "engine": engine,
                "last_good": self.last_good["profile"] if self.last_good else None,
                "last_good_mode": self.last_good["mode"] if self.last_good else None,
                "last_failure": dict(self.last_failure) if self.last_failure else None,
                "switch_in_flight": op.describe() if op is not None else None,
                "restarts": {
                    "total": sum(self.restarts.values()),
                    "by_reason": dict(self.restarts),
                },
                "tokens_per_second": self.tokens_per_second,
                "status_line": self.status_line(),
                "config": {"source": self.cfg.source, "error": self.config_error},
                "findings": list(self.store.findings),
                "daemon": {"pid": os.getpid(), "state_dir": str(self.store.dir)},
            }

    def history(self) -> list[dict[str, Any]]:
        return self.store.history()

    def reconfigure(self, cfg: Config, engine: Engine) -> None:
        """Adopt a re-read configuration (SIGHUP): profile dirs, engine settings (used from
        the next start on), restart and timeout policy."""
        from fastverify.profiles.store import ProfileStore

        with self._lock:
            self.cfg = cfg
            if engine.name == self.engine.name:
                self.engine = engine
            self.profiles = ProfileStore(user_dirs=cfg.profile_dirs)
            self._argv_checks.clear()

    # ------------------------------------------------------------------ baselines
    def baselines(self) -> dict[str, Any]:
        return self.store.load_baselines()

    def set_baseline(self, body: dict[str, Any]) -> dict[str, Any]:
        """Persist a baseline measurement (baselines.json) and hand it to the exporter hub."""
        rec = {
            "profile": body["profile"],
            "tokens_per_second": float(body["tokens_per_second"]),
            "per_request_tokens_per_second": float(body["per_request_tokens_per_second"]),
            "measured_at": float(body.get("measured_at") or _now()),
        }
        with self._lock:
            data = self.store.load_baselines()
            data[rec["profile"]] = rec
            self.store.save_baselines(data)
        self._hub(
            "set_baseline",
            rec["profile"],
            rec["tokens_per_second"],
            rec["per_request_tokens_per_second"],
            rec["measured_at"],
        )
        return rec

    def _load_baselines_into_hub(self) -> None:
        for rec in self.store.load_baselines().values():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                self._hub(
                    "set_baseline",
                    rec["profile"],
                    float(rec["tokens_per_second"]),
                    float(rec["per_request_tokens_per_second"]),
                    float(rec["measured_at"]),
                )

    # ------------------------------------------------------------------ validation
    def resolve(self, name: str, mode: str, force: bool = False) -> tuple[Any, list[str]]:
        """Load the profile and build + check the argv; RequestError(422) when invalid."""
        from fastverify.profiles.model import ProfileError

        if mode not in MODES:
            raise RequestError(
                422, f"mode {mode!r}: expected one of {', '.join(MODES)}", reason="invalid_mode"
            )
        try:
            profile = self.profiles.load(name, force=force, allow_path=False)
        except ProfileError as exc:
            problems = [str(p) for p in exc.problems]
            raise RequestError(
                422,
                f"invalid profile {name!r}: {problems[0] if problems else exc}",
                problems=problems,
                reason="invalid_profile",
            ) from None
        try:
            argv = self.engine.build_argv(self.cfg.server, mode, profile.requires)
        except EngineArgError as exc:
            raise RequestError(
                422, f"cannot build the server argv for {name}/{mode}: {exc}", reason="config_error"
            ) from None
        return profile, argv

    def check_argv(self, argv: list[str]) -> ArgvCheck:
        key = tuple(argv)
        hit = self._argv_checks.get(key)
        if hit is None:
            hit = self.engine.check_argv(argv)
            if hit.ok is not None:
                self._argv_checks[key] = hit
        return hit

    # ------------------------------------------------------------------ requests
    def request(
        self,
        kind: str,
        name: str | None,
        mode: str | None,
        *,
        force: bool = False,
        queue: bool = False,
        timeout_s: float | None = None,
    ) -> Operation:
        """Validate, then start an operation thread; raises RequestError (409/422/503)."""
        if self.shutting_down.is_set():
            raise RequestError(503, "fastverifyd is shutting down")
        name = name or self.active.get("profile") or self.cfg.daemon.default_profile
        mode = mode or self.active.get("mode") or self.cfg.server.mode
        if not queue:
            self._refuse_if_busy()
        t0 = time.monotonic()
        profile, argv = self.resolve(name, mode, force)
        verdict = self.check_argv(argv)
        validate_s = time.monotonic() - t0
        if verdict.ok is False:
            raise RequestError(
                422,
                f"argv rejected for {name}/{mode}: {verdict.message}",
                argv=logs.mask_argv(argv),
                reason="argv_rejected",
            )
        problem = self.store.check_writable()
        if problem:
            raise RequestError(
                507,
                f"{problem}; {kind} refused, nothing was stopped or changed",
                reason="state_dir_unwritable",
            )
        op = Operation(kind, name, mode)
        if not self._acquire(queue, op):
            self._refuse_if_busy()
            raise RequestError(409, "another operation is in flight")
        op.started_at, op.t0 = _now(), time.monotonic()  # it starts now (a queued one waited)
        op.phases["validate"] = round(validate_s, 4)
        with self._lock:
            self.op = op
        op.emit("accepted", op=op.describe(), argv=logs.mask_argv(argv), check=verdict.to_dict())
        self._spawn_thread(self._run_op, op, profile, argv, timeout_s)
        return op

    def _refuse_if_busy(self) -> None:
        op = self.op
        if op is not None and op.result is None and self.state == State.READY and op.moved():
            op.wait(2.0)  # READY again: the operation is only writing its record
        if op is not None and op.result is None:
            raise RequestError(
                409,
                f"a {op.kind} to {op.profile}/{op.mode} is in flight "
                f"(started {time.monotonic() - op.t0:.1f} s ago); retry later or ask to queue",
                in_flight=op.describe(),
            )

    def _acquire(self, queue: bool, claimant: Operation) -> bool:
        op = self.op
        # A crash restart waiting out its backoff (or failed) yields to an explicit request.
        if (
            op is not None
            and op.kind == "crash_restart"
            and self.state in (State.BACKOFF, State.FAILED)
        ):
            op.cancel.set()
            return self._op_lock.acquire(timeout=10)
        if queue:
            while not self.shutting_down.is_set():
                if self._op_lock.acquire(timeout=0.5):
                    return True
            return False
        # Not queued: the lock is taken only when free, or when its holder has already answered
        # and is about to release it. Taking and publishing happen under one lock, so of two
        # requests arriving together exactly one runs; the other sees it in flight (409).
        deadline = time.monotonic() + 1.0
        while True:
            with self._lock:
                if self._op_lock.acquire(blocking=False):
                    self.op = claimant
                    return True
                holder = self.op
            if holder is None or holder.result is None or time.monotonic() > deadline:
                return False
            time.sleep(0.005)

    def _spawn_thread(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=f"op-{target.__name__}", daemon=True)
        self._threads = [x for x in self._threads if x.is_alive()]
        self._threads.append(t)
        t.start()

    # ------------------------------------------------------------------ the pipeline
    def _run_op(
        self, op: Operation, profile: Any, argv: list[str], timeout_s: float | None
    ) -> None:
        try:
            result = self._switch(op, profile, argv, timeout_s)
        except Exception as exc:  # never leave a caller without an answer
            log.exception("operation %s failed unexpectedly", op.id)
            result = self._result(op, "failed", reason="internal_error", message=str(exc))
            with contextlib.suppress(Exception):
                self._journal_op(op, result)
        op.finish(result)
        self._op_lock.release()

    def _result(self, op: Operation, result: str, **kw: Any) -> dict[str, Any]:
        out = {
            "id": op.id,
            "kind": op.kind,
            "result": result,
            "profile": op.profile,
            "mode": op.mode,
            "reason": None,
            "message": None,
            "log": None,
            "line": None,
            "duration_s": round(time.monotonic() - op.t0, 3),
            "serving": {"profile": self.active.get("profile"), "mode": self.active.get("mode")},
        }
        out.update(kw)
        return out

    def _switch(
        self, op: Operation, profile: Any, argv: list[str], timeout_s: float | None
    ) -> dict:
        prev_active = dict(self.active)
        self.daemon_log(
            f"{op.kind}: {prev_active.get('profile')}/{prev_active.get('mode')}"
            f" -> {op.profile}/{op.mode}"
        )
        if op.kind in ("switch", "mode", "restart"):
            self._hub("on_restart", op.kind)
        t0 = time.monotonic()
        self._stop_current(op, why=f"{op.kind} to {op.profile}/{op.mode}")
        op.phases["stop"] = round(time.monotonic() - t0, 4)
        self._set_state(State.STARTING, f"{op.kind} {op.profile}/{op.mode}")
        with self._lock:
            self.active = {"profile": op.profile, "mode": op.mode}
        outcome = self._start_and_verify(op, profile, argv, timeout_s)
        if isinstance(outcome, EngineHandle):
            return self._succeeded(op, outcome, prev_active)
        return self._failed(op, outcome, prev_active)

    def _stop_current(self, op: Operation | None, why: str) -> None:
        h = self.current
        if h is None:
            return
        if h.alive():
            self._set_state(State.STOPPING, why)
        self._stop_handle(h)

    def _stop_handle(self, h: EngineHandle) -> procs.StopResult:
        h.expected_exit = True
        h.serving = False
        alive_pids = [p.pid for p in procs.group_members(h.pgid)]
        res = procs.stop_group(h.pgid, self.cfg.daemon.stop_grace_s, proc=h.proc)
        if res.signal_used != "none":
            self.daemon_log(
                f"stopped engine group {h.pgid} ({res.signal_used}, {res.duration_s:.2f} s)"
                + (f"; still present: {res.leftover}" if res.leftover else "")
            )
        released, how = procs.wait_gpu_release(alive_pids, self.cfg.daemon.gpu_release_timeout_s)
        if not released:
            self.daemon_log(f"GPU memory not released: {how}", logging.WARNING)
        if h.tail is not None:
            h.tail.stop()
        if self.current is h:
            self.store.clear_pid()
            self._hub(
                "set_engine",
                False,
                self.active.get("profile"),
                self.active.get("mode"),
                {},
                self.engine.name,
                None,
            )
        return res

    def _engine_env(self, profile: Any, engine_id: str, debug_dir: Path | None) -> dict[str, str]:
        from fastverify.profiles.effective import effective_env

        extra: dict[str, str] = {}
        extra.update(self.engine.extra_env())
        for name in self.cfg.server.env_passthrough:
            if name in os.environ:
                extra[name] = os.environ[name]
        extra.update(self.cfg.server.env)
        if debug_dir is not None:
            extra.update(
                {
                    "NCCL_DEBUG": "INFO",
                    "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING",
                    "NCCL_DEBUG_FILE": str(debug_dir / "%h.%p.log"),
                }
            )
        extra[procs.ENGINE_ID_VAR] = engine_id
        return effective_env(profile, base_env=os.environ, extra=extra)

    def _spawn(self, op: Operation, profile: Any, argv: list[str]) -> EngineHandle:
        engine_id = secrets.token_hex(8)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        base = f"{stamp}-{profile.name}-{op.mode}-{engine_id[:6]}"
        log_path = self.store.logs_dir / f"{base}.log"
        debug_dir = None
        if self.cfg.daemon.nccl_debug:
            debug_dir = self.store.logs_dir / f"{base}.nccl"
            debug_dir.mkdir(parents=True, exist_ok=True)
        env = self._engine_env(profile, engine_id, debug_dir)
        expected = verify.nccl_part({k: v for k, v in env.items() if k != procs.ENGINE_ID_VAR})
        secrets_ = logs.secret_values(env)
        # Name the engine before it exists: a daemon killed between the spawn and the pid
        # file below finds the unrecorded group by this id at its next start.
        self.store.write_pid({"engine_id": engine_id, "pending": True, "argv": argv})
        proc = procs.spawn(argv, env, log_path)
        with contextlib.suppress(OSError):
            self.store.prune_logs(protect=(log_path,))
        h = EngineHandle(
            engine_id=engine_id,
            pid=proc.pid,
            pgid=proc.pid,
            create_time=procs.create_time(proc.pid),
            argv=argv,
            log_path=log_path,
            profile=profile.name,
            mode=op.mode,
            url=self._url(),
            expected_nccl=expected,
            proc=proc,
            nccl_debug_dir=debug_dir,
        )
        with self._lock:
            self.current = h
        self.store.write_pid(h.pid_info())
        h.tail = logs.LogTail(
            log_path, lambda line: self._on_line(h, line), secrets=secrets_
        ).start()
        self._watch(h)
        self.daemon_log(f"engine started: pid {h.pid}, log {log_path}")
        op.emit("engine", pid=h.pid, log=str(log_path), argv=logs.mask_argv(argv))
        return h

    def _url(self) -> str:
        s = self.cfg.server
        host = "127.0.0.1" if s.host in ("0.0.0.0", "", "::") else s.host
        return f"http://{host}:{s.port}"

    def _watch(self, h: EngineHandle) -> None:
        def run() -> None:
            code: int | None = None
            if h.proc is not None:
                code = h.proc.wait()
            else:
                with contextlib.suppress(psutil.NoSuchProcess):
                    psutil.Process(h.pid).wait()
            h.exit_code = code
            h.exited.set()
            h.wake.set()
            self._on_exit(h)

        threading.Thread(target=run, name=f"watch-{h.pid}", daemon=True).start()

    def _on_line(self, h: EngineHandle, line: str) -> None:
        self.ring.add(line)
        self._hub("on_log_line", line)
        prog = logs.parse_progress(line)
        op = self.op
        if prog is not None:
            phase, pct, msg = prog
            h.progress = {"phase": phase, "percent": pct, "message": msg}
            if phase == "ready":
                h.ready_line = True
                h.wake.set()
            if op is not None and op.result is None:
                op.emit("progress", phase=phase, percent=pct, message=msg)
        tps = logs.parse_throughput(line)
        if tps is not None and h.serving:
            self.tokens_per_second = tps
        if op is not None and op.result is None and self.current is h:
            op.emit("log", line=line, source="engine")

    def _probe(self, url: str, timeout: float = 1.0) -> bool:
        try:
            # Never through an http_proxy from the daemon's environment: the engine is local.
            with _DIRECT.open(url + self.engine.health_path(), timeout=timeout) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _await_ready(self, op: Operation, h: EngineHandle, timeout_s: float) -> Failure | None:
        deadline = h.started_mono + timeout_s
        last_extend = time.monotonic()
        while True:
            h.wake.clear()
            if op.cancel.is_set() or self.shutting_down.is_set():
                return Failure(
                    "cancelled", "operation cancelled (daemon shutting down)", log=str(h.log_path)
                )
            if h.exited.is_set():
                if h.tail is not None:
                    h.tail.stop()
                return failures.classify(
                    list(h.tail.recent) if h.tail else [],
                    exit_code=h.exit_code,
                    log=str(h.log_path),
                )
            if (h.ready_line or h.adopted) and self._probe(h.url):
                h.ready_s = time.monotonic() - h.started_mono
                return None
            now = time.monotonic()
            if now >= deadline:
                return failures.classify(
                    list(h.tail.recent) if h.tail else [],
                    exit_code=None,
                    log=str(h.log_path),
                    timed_out=True,
                    timeout_s=timeout_s,
                )
            if now - last_extend > 10:
                self.notifier.extend_timeout(self.extend_seconds())
                last_extend = now
            h.wake.wait(0.02 if h.ready_line else 0.1)

    def _verify(self, op: Operation, h: EngineHandle) -> tuple[Failure | None, dict[str, Any]]:
        rules = self.engine.engine_env(h.argv, h.expected_nccl)  # [sglang] engine-added vars
        self.engine_rules = rules.to_dict() if rules is not None else None  # [sglang] status
        report = verify.check_process_env(
            h.pid, h.expected_nccl, self.engine.engine_owned_nccl, engine_env=rules
        )
        details: dict[str, Any] = {"env": report.to_dict()}
        op.emit("verify", ok=report.ok, message=report.message)
        self.daemon_log(f"verify: {report.message}")
        if not report.ok:
            reason = report.reason or "env_mismatch"
            return Failure(reason, report.message, log=str(h.log_path)), details
        if h.nccl_debug_dir is not None:
            nccl = verify.check_nccl_debug(
                sorted(h.nccl_debug_dir.glob("*")), h.expected_nccl, engine_env=rules
            )
            details["nccl"] = nccl
            if nccl["ok"] is False:
                bad = {**nccl["mismatched"], **nccl["overridden"]}
                diffs = "; ".join(f"{k}={got} (profile: {want})" for k, (want, got) in bad.items())
                return Failure(
                    nccl["reason"] or "env_mismatch", f"NCCL reports {diffs}", log=str(h.log_path)
                ), details
            if nccl["ok"] is None:
                self.daemon_log("verify: NCCL printed no 'set by environment' lines (yet)")
            else:
                self.daemon_log(f"verify: NCCL confirms {len(nccl['confirmed'])} variable(s)")
        return None, details

    def _start_and_verify(
        self,
        op: Operation,
        profile: Any,
        argv: list[str],
        timeout_s: float | None,
        adopt: EngineHandle | None = None,
    ) -> EngineHandle | Failure:
        """Spawn (or adopt), wait for readiness, verify. The engine is stopped on failure."""
        timeout = timeout_s or self.cfg.daemon.readiness_timeout_s
        h = adopt or self._spawn(op, profile, argv)
        failure = self._await_ready(op, h, timeout)
        details: dict[str, Any] = {}
        if failure is None:
            op.phases.setdefault("engine_ready", round(h.ready_s or 0.0, 4))
            self._set_state(State.VERIFYING, f"engine ready after {h.ready_s:.2f} s")
            t0 = time.monotonic()
            failure, details = self._verify(op, h)
            op.phases.setdefault("verify", round(time.monotonic() - t0, 4))
        if failure is None:
            op.verify = details
            h.worker_pids = tuple(
                c["pid"] for c in details["env"]["processes"] if c["pid"] != h.pid
            )
            return h
        self.daemon_log(
            f"{op.kind} {h.profile}/{h.mode} failed: {failure.message} (log: {h.log_path})",
            logging.WARNING,
        )
        self._stop_handle(h)
        return failure

    def _succeeded(self, op: Operation, h: EngineHandle, prev: dict[str, Any]) -> dict[str, Any]:
        t0 = time.monotonic()
        h.serving = True
        with self._lock:
            self.active = {"profile": h.profile, "mode": h.mode}
            self.last_good = {"profile": h.profile, "mode": h.mode}
            if op.kind != "crash_restart":
                self.crash_times.clear()
        self._save_state()
        self.store.write_pid(dict(h.pid_info(), verified=True))
        self._set_state(State.READY, f"{h.profile}/{h.mode} verified")
        self._hub("set_engine_start_seconds", h.ready_s or 0.0)
        if op.kind in SWITCH_KINDS:
            self._hub("on_switch", "ok")
        if not self.notifier.ready_sent:
            self.notifier.ready(self.status_line())
        result = self._result(
            op,
            "ok",
            log=str(h.log_path),
            engine_ready_s=round(h.ready_s or 0.0, 3),
            verify=getattr(op, "verify", None),
            pid=h.pid,
            previous={"profile": prev.get("profile"), "mode": prev.get("mode")},
        )
        op.phases["persist"] = round(time.monotonic() - t0, 4)
        result["phases"] = dict(op.phases)
        result["message"] = (
            f"{h.profile}/{h.mode} is serving (ready in {h.ready_s:.2f} s, verified)"
        )
        self.daemon_log(result["message"])
        self._journal_op(op, result)
        return result

    def _record_failure(self, failure: Failure, op: Operation) -> None:
        with self._lock:
            self.last_failure = dict(
                failure.to_dict(), at=_now(), profile=op.profile, mode=op.mode, op=op.kind
            )

    def _failed(self, op: Operation, failure: Failure, prev: dict[str, Any]) -> dict[str, Any]:
        self._record_failure(failure, op)
        self._set_state(State.FAILED, failure.reason)
        target = self.last_good
        base = {
            "reason": failure.reason,
            "message": failure.message,
            "log": failure.log,
            "line": failure.line,
            "previous": {"profile": prev.get("profile"), "mode": prev.get("mode")},
        }
        if failure.reason == "cancelled" or self.shutting_down.is_set():
            result = self._result(op, "failed", **base)
            self._journal_op(op, result)
            return result
        if target and (target["profile"], target["mode"]) != (op.profile, op.mode):
            rb = self._rollback(op, target)
            if isinstance(rb, EngineHandle):
                result = self._result(op, "rolled_back", rolled_back_to=dict(target), **base)
                result["message"] = (
                    f"{op.profile}/{op.mode} failed: {failure.reason}; rolled back to "
                    f"{target['profile']}/{target['mode']} (log: {failure.log})"
                )
                if op.kind in SWITCH_KINDS:
                    self._hub("on_switch", "rolled_back")
                self._journal_op(op, result)
                return result
            base["rollback_failure"] = rb.to_dict()
        with self._lock:
            self.current = (
                None if (self.current is not None and not self.current.alive()) else self.current
            )
        self._save_state()
        result = self._result(op, "failed", **base)
        result["message"] = f"{op.profile}/{op.mode} failed: {failure.reason} (log: {failure.log})"
        if "rollback_failure" in base:
            result["message"] += f"; rollback failed too: {base['rollback_failure']['reason']}"
        if op.kind in SWITCH_KINDS:
            self._hub("on_switch", "failed")
        self._journal_op(op, result)
        return result

    def _rollback(self, op: Operation, target: dict[str, str]) -> EngineHandle | Failure:
        self._set_state(State.ROLLING_BACK, f"to {target['profile']}/{target['mode']}")
        self.daemon_log(f"rolling back to {target['profile']}/{target['mode']}")
        try:
            profile, argv = self.resolve(target["profile"], target["mode"])
        except RequestError as exc:
            self._set_state(State.FAILED, "last good profile no longer loads")
            return Failure("invalid_profile", f"last good profile no longer loads: {exc}")
        with self._lock:
            self.active = {"profile": target["profile"], "mode": target["mode"]}
        sub = Operation("rollback", target["profile"], target["mode"])
        sub.events = op.events  # share the caller's event stream
        sub._cond = op._cond
        sub.cancel = op.cancel
        outcome = self._start_and_verify(sub, profile, argv, None)
        if isinstance(outcome, EngineHandle):
            outcome.serving = True
            self._save_state()
            self.store.write_pid(dict(outcome.pid_info(), verified=True))
            self._set_state(State.READY, f"rolled back to {target['profile']}/{target['mode']}")
            if not self.notifier.ready_sent:
                self.notifier.ready(self.status_line())
            self.daemon_log(f"rolled back: {target['profile']}/{target['mode']} is serving")
            return outcome
        self._set_state(State.FAILED, f"rollback failed: {outcome.reason}")
        return outcome

    def _save_state(self) -> None:
        with self._lock:
            data = {
                "profile": self.active.get("profile"),
                "mode": self.active.get("mode"),
                "last_good": dict(self.last_good) if self.last_good else None,
                "last_failure": self.last_failure,
            }
        try:
            self.store.save_state(data)
        except OSError as exc:
            self.daemon_log(f"cannot save state: {exc}", logging.ERROR)

    def _journal_op(self, op: Operation, result: dict[str, Any]) -> None:
        rec = {
            "type": "switch",
            **{k: v for k, v in result.items() if k != "verify"},
            "started_at": op.started_at,
            "finished_at": _now(),
        }
        try:
            self.store.append_journal(rec)
        except OSError as exc:
            log.error("cannot append to the journal: %s", exc)

    # ------------------------------------------------------------------ crashes
    def tick(self) -> None:
        """Called from the main loop (~1/s): a serving engine whose leader is alive but lost
        one of the workers verified at READY is broken; treat it as a crash."""
        h = self.current
        if h is None or not h.serving or h.expected_exit or not h.alive() or not h.worker_pids:
            return
        gone = [pid for pid in h.worker_pids if not _pid_alive(pid)]
        if not gone or not h.serving:
            return
        h.serving = False
        failure = Failure(
            "worker_exited",
            f"engine worker process(es) {gone} exited while the server (pid {h.pid}) kept running",
            log=str(h.log_path),
        )
        self.daemon_log(f"engine pid {h.pid}: {failure.message}", logging.WARNING)
        self._crashed(h, failure)

    def _on_exit(self, h: EngineHandle) -> None:
        if h.expected_exit or self.shutting_down.is_set():
            return
        if self.current is not h or not h.serving:
            return  # a start in progress: the readiness loop sees it
        h.serving = False
        if h.tail is not None:
            h.tail.stop()
        failure = failures.classify(
            list(h.tail.recent) if h.tail else [], exit_code=h.exit_code, log=str(h.log_path)
        )
        self.daemon_log(f"engine pid {h.pid} died: {failure.message}", logging.WARNING)
        self._crashed(h, failure)

    def _crashed(self, h: EngineHandle, failure: Failure) -> None:
        # Leave READY at once (status must never show READY without a serving engine), then
        # restart from a thread that takes the operation lock.
        with self._lock:
            if self.state == State.READY and self.current is h:
                self._record_failure(failure, Operation("crash_restart", h.profile, h.mode))
                self._count_crash(failure)
                self._set_state(State.BACKOFF, f"engine crashed: {failure.reason}")
        self._spawn_thread(self._crash_restart, h, failure)

    def _count_crash(self, failure: Failure) -> int:
        """Count a crash (status, exporter, journal); returns crashes within the window."""
        d = self.cfg.daemon
        with self._lock:
            self.restarts[failure.reason] += 1
            now = time.monotonic()
            self.crash_times.append(now)
            while self.crash_times and now - self.crash_times[0] > d.restart_window_s:
                self.crash_times.popleft()
            n = len(self.crash_times)
        self._hub("on_restart", failure.reason)
        with contextlib.suppress(OSError):
            self.store.append_journal({"type": "crash", "ts": _now(), **failure.to_dict()})
        return n

    def _crash_restart(self, h: EngineHandle, failure: Failure) -> None:
        if not self._op_lock.acquire(timeout=5):
            return  # an explicit operation owns the engine now
        if self.current is not h or self.state != State.BACKOFF or self.shutting_down.is_set():
            self._op_lock.release()  # an operation replaced or stopped this engine meanwhile
            return
        op = Operation("crash_restart", h.profile, h.mode)
        with self._lock:
            self.op = op
        result: dict[str, Any] | None = None
        try:
            result = self._crash_loop(op, h, failure)
        except Exception as exc:
            log.exception("crash restart failed unexpectedly")
            result = self._result(op, "failed", reason="internal_error", message=str(exc))
        finally:
            self._op_lock.release()
            op.finish(result or self._result(op, "failed", reason="cancelled"))

    def _crash_loop(self, op: Operation, h: EngineHandle, failure: Failure) -> dict[str, Any]:
        d = self.cfg.daemon
        counted = self.state == State.BACKOFF  # _crashed counted the first one already
        while True:
            self._stop_handle(h)  # leftover TP workers of the dead group
            self._record_failure(failure, op)
            if counted:
                n = len(self.crash_times)
                counted = False
            else:
                n = self._count_crash(failure)
            if self.state == State.READY:
                self._set_state(State.BACKOFF, f"engine crashed: {failure.reason}")
            if n > d.restart_burst:
                msg = (
                    f"{n} crashes within {d.restart_window_s:.0f} s"
                    f" (burst limit {d.restart_burst}); "
                    f"last: {failure.message}"
                )
                with self._lock:
                    self.last_failure = dict(self.last_failure or {}, message=msg, crash_loop=True)
                if self.state != State.FAILED:
                    self._set_state(State.FAILED, "crash loop")
                self.daemon_log(f"giving up restarting: {msg}", logging.ERROR)
                result = self._result(
                    op, "failed", reason=failure.reason, message=msg, log=failure.log
                )
                self._journal_op(op, result)
                return result
            delay = min(d.restart_backoff_s[0] * (2 ** (n - 1)), d.restart_backoff_s[1])
            self._set_state(State.BACKOFF, f"{failure.reason}; restart {n} in {delay:.2f} s")
            self.daemon_log(
                f"restarting {h.profile}/{h.mode} in {delay:.2f} s (crash {n}/{d.restart_burst})"
            )
            if op.cancel.wait(delay) or self.shutting_down.is_set():
                result = self._result(
                    op, "failed", reason="cancelled", message="restart pre-empted"
                )
                return result
            try:
                profile, argv = self.resolve(h.profile, h.mode)
            except RequestError as exc:
                self._set_state(State.FAILED, "profile no longer loads")
                return self._result(op, "failed", reason="invalid_profile", message=str(exc))
            self._set_state(State.STARTING, f"crash restart {n}")
            outcome = self._start_and_verify(op, profile, argv, None)
            if isinstance(outcome, EngineHandle):
                return self._succeeded(op, outcome, {"profile": h.profile, "mode": h.mode})
            self._set_state(State.FAILED, outcome.reason)
            failure = outcome
            h = self.current or h

    # ------------------------------------------------------------------ start-up
    def startup(self) -> None:
        """Restore state, reconcile a previous engine from engine.pid, start serving."""
        self._load_baselines_into_hub()
        saved = self.store.load_state()
        lg = saved.get("last_good")
        if isinstance(lg, dict) and lg.get("profile"):
            self.last_good = {
                "profile": lg["profile"],
                "mode": lg.get("mode") or self.cfg.server.mode,
            }
        if isinstance(saved.get("last_failure"), dict):
            self.last_failure = saved["last_failure"]
        profile = saved.get("profile") or self.cfg.daemon.default_profile
        mode = saved.get("mode") or self.cfg.server.mode
        if mode not in MODES:
            mode = self.cfg.server.mode
        with self._lock:
            self.active = {"profile": profile, "mode": mode}
        adopted = self._reconcile()
        if adopted is not None:
            return
        try:
            self.request("start", profile, mode)
        except RequestError as exc:
            self.daemon_log(f"cannot start {profile}/{mode}: {exc}", logging.ERROR)
            fallback = self.last_good
            if fallback and fallback["profile"] != profile:
                self.daemon_log(
                    f"starting the last good profile {fallback['profile']}/{fallback['mode']}"
                    " instead"
                )
                try:
                    self.request("start", fallback["profile"], fallback["mode"])
                    return
                except RequestError as exc2:
                    exc = exc2
            with self._lock:
                self.last_failure = {
                    "reason": exc.reason,
                    "message": str(exc),
                    "log": None,
                    "at": _now(),
                }
            self._set_state(State.STARTING, "start-up")
            self._set_state(State.FAILED, exc.reason)

    def _reap_pending(self) -> None:
        """Stop an engine group that a killed daemon spawned but never recorded."""
        try:
            data = json.loads(self.store.pid_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(data, dict) or not data.get("pending") or not data.get("engine_id"):
            return
        groups = set()
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if procs.engine_id_of(p.pid) == data["engine_id"]:
                    groups.add(os.getpgid(p.pid))
        for pgid in sorted(groups):
            res = procs.stop_group(pgid, self.cfg.daemon.stop_grace_s)
            self.daemon_log(
                f"stopped engine group {pgid}, started by a daemon that died before recording"
                f" it ({res.signal_used})",
                logging.WARNING,
            )
        self.store.clear_pid()

    def _reconcile(self) -> Operation | None:
        self._reap_pending()
        info = self.store.read_pid()
        if info is None:
            return None
        ours, why = procs.is_ours(info)
        if not ours:
            msg = (
                f"engine.pid names pid {info.get('pid')}: {why}; leaving it alone (nothing killed)"
            )
            self.daemon_log(msg, logging.WARNING)
            self.store.findings.append(msg)
            self.store.clear_pid()
            return None
        pgid = int(info.get("pgid", info["pid"]))
        try:
            profile_obj, argv = self.resolve(info.get("profile", ""), info.get("mode", ""))
            same_argv = list(argv) == list(info.get("argv", []))
        except RequestError:
            profile_obj, same_argv = None, False
        if profile_obj is None or not same_argv:
            self.daemon_log(
                f"previous engine group {pgid} runs an argv this config would not build;"
                " stopping it"
            )
            res = procs.stop_group(pgid, self.cfg.daemon.stop_grace_s)
            self.daemon_log(f"stopped previous engine group {pgid} ({res.signal_used})")
            self.store.clear_pid()
            return None
        h = EngineHandle(
            engine_id=info["engine_id"],
            pid=int(info["pid"]),
            pgid=pgid,
            create_time=info.get("create_time"),
            argv=list(info.get("argv", [])),
            log_path=Path(info.get("log", "")),
            profile=info["profile"],
            mode=info["mode"],
            url=info.get("url") or self._url(),
            expected_nccl=dict(info.get("expected_nccl") or {}),
            adopted=True,
            nccl_debug_dir=Path(info["nccl_debug_dir"]) if info.get("nccl_debug_dir") else None,
        )
        h.started_at = float(info.get("started_at") or _now())
        if not self._op_lock.acquire(blocking=False):
            return None
        op = Operation("adopt", h.profile, h.mode)
        with self._lock:
            self.op = op
            self.current = h
            self.active = {"profile": h.profile, "mode": h.mode}
        self.daemon_log(f"adopting the previous engine group {pgid} ({h.profile}/{h.mode}): {why}")
        h.tail = logs.LogTail(h.log_path, lambda line: self._on_line(h, line)).start()
        self._watch(h)

        def run() -> None:
            try:
                self._set_state(State.STARTING, f"adopting engine {h.pid}")
                outcome = self._start_and_verify(op, profile_obj, h.argv, None, adopt=h)
                if not isinstance(outcome, EngineHandle) and not self.shutting_down.is_set():
                    # The adopted engine was lost (e.g. the killed daemon was stopping it):
                    # start the same profile afresh instead of ending FAILED with nothing.
                    self.daemon_log(f"adopted engine lost ({outcome.reason}); starting afresh")
                    if self.state != State.STARTING:
                        self._set_state(State.FAILED, outcome.reason)
                    self._set_state(State.STARTING, f"fresh start of {h.profile}/{h.mode}")
                    outcome = self._start_and_verify(op, profile_obj, h.argv, None)
                if isinstance(outcome, EngineHandle):
                    result = self._succeeded(op, outcome, dict(self.active))
                else:
                    result = self._failed(op, outcome, dict(self.active))
            except Exception as exc:
                log.exception("adoption failed")
                result = self._result(op, "failed", reason="internal_error", message=str(exc))
            finally:
                self._op_lock.release()
            op.finish(result)

        self._spawn_thread(run)
        return op

    # ------------------------------------------------------------------ shutdown
    def shutdown(self, timeout: float | None = None) -> None:
        """Cancel any operation, stop the engine group, wait for operation threads."""
        self.shutting_down.set()
        op = self.op
        if op is not None:
            op.cancel.set()
        budget = timeout if timeout is not None else self.cfg.daemon.stop_grace_s + 15
        deadline = time.monotonic() + budget
        got = self._op_lock.acquire(timeout=max(0.1, budget / 2))
        try:
            h = self.current
            if h is not None:
                if self.state not in (State.STOPPING, State.STOPPED):
                    with contextlib.suppress(Exception):
                        self._set_state(State.STOPPING, "shutdown")
                self._stop_handle(h)
                self.store.clear_pid()
            with contextlib.suppress(Exception):
                if self.state == State.STOPPING:
                    self._set_state(State.STOPPED, "shutdown")
        finally:
            if got:
                self._op_lock.release()
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
