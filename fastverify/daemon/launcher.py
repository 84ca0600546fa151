"""The engine launcher: what the engine's process group has of its own (argv, environment,
log tail, readiness by SGLang's endpoints); the group's lifecycle is group.py's.

`Launcher` turns a (profile, mode, argv) into a running engine and back; it knows no
daemon states. `spawn` returns an `EngineHandle` (or raises OSError); `await_ready` and
`stop` return a typed `Failure` (daemon/failures.py) or None; `previous` and `adopt` follow
an engine group left by a previous daemon. The launcher reports through two callbacks set by
the controller: `on_line(handle, line, facts)` for every (masked, parsed-once) log line (the
verifiers read them: a failure one of them sees there is `h.line_failure`, which ends the
readiness wait) and `on_exit(handle)` when the engine's leader process exits (under the
group's `exit_lock`, in the step that marks it exited). Verification
after READY is the verifiers' (verifier.py, checks.py).

engine.pid is the group's record (group.SupervisedGroup: `pending` before the spawn, the
full record after it); `verified` is added once the controller says READY.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import psutil

from fastverify.config import Config
from fastverify.daemon import failures, logs, procs, tuner_check, verify
from fastverify.daemon.failures import Failure
from fastverify.daemon.group import GroupSpec, Member, Previous, SupervisedGroup
from fastverify.daemon.statestore import StateStore
from fastverify.redact import mask_argv, secret_values
from fastverify.sglang import allreduce
from fastverify.sglang import client as engine_client

if TYPE_CHECKING:
    from fastverify.daemon.watch import EngineWatch
    from fastverify.engines.base import Engine
    from fastverify.profiles.model import Profile

log = logging.getLogger("fastverifyd.launcher")
DEBUG_VARS = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})
# how often readiness is asked of the server's endpoints while no ready line has come
# (SGLang's own warm-up polls /model_info every second)
ENDPOINT_POLL_S = 1.0
# how long one readiness probe waits for its answer: SGLang's /health and /health_generate
# answer after their first 1 s poll of the scheduler (http_server.py), later on a busy host
HEALTH_PROBE_TIMEOUT_S = 10.0
# how long readiness found by the endpoints waits for the log tail to read what is written
TAIL_CATCH_UP_S = 2.0


def _now() -> float:
    return time.time()


def port_of(argv: list[str]) -> int | None:
    """The `--port` an engine's argv names (None: none)."""
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
        if arg.startswith("--port=") and arg[7:].isdigit():
            return int(arg[7:])
    return None


def with_port(argv: list[str], port: int) -> list[str]:
    """`argv` with its `--port` set to `port` (added when it names none)."""
    out = [a for a in argv if not a.startswith("--port=")]
    for i, arg in enumerate(out):
        if arg == "--port" and i + 1 < len(out):
            return [*out[: i + 1], str(port), *out[i + 2 :]]
    return [*out, "--port", str(port)]


def without_port(argv: list[str]) -> list[str]:
    """`argv` without its `--port` (an engine on either internal port is the same one)."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--port":
            return out[:i] + out[i + 2 :]
    return [a for a in out if not a.startswith("--port=")]


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@dataclass
class EngineHandle(Member):
    """One engine group (group.Member: ids, pids, process events) and what its start and
    serving concern. `parts` holds what a part keeps per engine (weights.py: the weights
    of the start; allreduce_part.py: its backend), `kept` what the parts keep in its record
    (engine.pid) for a daemon that adopts it (the launcher's `keepers`), `line_readers` what
    it reads of every log line."""

    profile: str
    mode: str
    url: str
    expected_nccl: dict[str, str]
    tail: logs.LogTail | None = None
    ready_line: bool = False
    ready_by: str | None = None  # "ready line + health" or "endpoints" (no INFO ready line)
    follower: bool = False  # a multi-node follower: ready when its health check answers
    serving: bool = False
    progress: dict[str, Any] = field(default_factory=dict)
    nccl_debug_dir: Path | None = None
    worker_pids: tuple[int, ...] = ()  # descendants verified at READY (the TP workers)
    engine_env: dict[str, Any] | None = None  # the engine's own NCCL rules (EngineEnv.to_dict)
    expected_sglang: dict[str, str] = field(default_factory=dict)  # the profile's SGLANG_*
    env_names: tuple[str, ...] | None = None  # the names it was started with (None: unknown)
    kept: dict[str, Any] = field(default_factory=dict)  # the parts' fields of its record
    # while serving (crashes.py starts it; False: decided, none for this engine)
    watch: EngineWatch | Literal[False] | None = None
    parts: dict[str, Any] = field(default_factory=dict)  # a feature's own state, by its name
    line_readers: list[Callable[[str], None]] = field(default_factory=list)
    line_failure: Failure | None = None  # a verifier read in a line that the start fails

    @property
    def engine_id(self) -> str:
        return self.group_id

    def recent_lines(self) -> list[str]:
        return list(self.tail.recent) if self.tail is not None else []

    def record(self) -> dict[str, Any]:
        return {
            **super().record(),
            "profile": self.profile,
            "mode": self.mode,
            "url": self.url,
            "expected_nccl": self.expected_nccl,
            "expected_sglang": self.expected_sglang,
            "env_names": list(self.env_names) if self.env_names is not None else None,
            **self.kept,
            "nccl_debug_dir": str(self.nccl_debug_dir) if self.nccl_debug_dir else None,
        }


OnLine = Callable[[EngineHandle, str, logs.LineFacts], None]
OnExit = Callable[[EngineHandle], None]


class Launcher:
    """See the module docstring. `cfg` is read at each start (a SIGHUP swaps it)."""

    def __init__(
        self,
        cfg: Config,
        engine: Engine,
        store: StateStore,
        *,
        say: Callable[..., None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.engine = engine
        self.store = store
        # say(message, level, stream=True): stream=False keeps a message out of the operation's
        # event stream when a structured event (engine, verify) already tells the client.
        self.say: Callable[..., None] = say or (
            lambda msg, level=logging.INFO, **_: log.log(level, msg)
        )
        self.on_line: OnLine = lambda h, line, facts: None
        self.on_exit: OnExit = lambda h: None
        self.group = self._engine_group("engine", store.pid_path)
        # A standby engine (the front door's standby mode): started beside the serving one on
        # its own port, recorded in engine-standby.pid until it serves; then handed over to
        # `group`, whose record names the engine it replaces as `retiring` until that stops.
        self.standby_group = self._engine_group("standby engine", store.standby_pid_path)
        self.retiring: dict[str, Any] | None = None
        # What the parts add to each start (parts.py, e.g. weights.py): variables of
        # the server's environment, readers of its log lines, flags of its argv that the
        # daemon adds and a comparison of argvs sets aside.
        self.env_parts: list[Callable[[], dict[str, str]]] = []
        self.line_readers_for: list[Callable[[EngineHandle], Callable[[str], None] | None]] = []
        # ...and those an adopted engine's replayed log goes through too
        self.adopted_readers_for: list[Callable[[EngineHandle], Callable[[str], None]]] = []
        self.argv_aside: list[Callable[[list[str]], list[str]]] = []
        # what they keep of each start from the environment it was started with (None: an
        # adopted engine whose environment cannot be read), before its first line is read
        self.started_with: list[Callable[[EngineHandle, Mapping[str, str] | None], None]] = []
        # ...and in its record (engine.pid), for the daemon that adopts it: record key -> the
        # value of a start with that environment and argv (`EngineHandle.kept`)
        self.keepers: dict[str, Callable[[dict[str, str], list[str]], Any]] = {}

    def _engine_group(self, name: str, record: Path) -> SupervisedGroup[EngineHandle]:
        """An engine's process group (group.py), recorded at `record`; its exits go to
        `on_exit`."""
        group: SupervisedGroup[EngineHandle] = SupervisedGroup(
            GroupSpec(name, procs.ENGINE_ID_VAR, "engine_id", record),
            grace_s=lambda: float(self.cfg.restart.stop_grace_s),
            gpu_release_s=lambda: float(self.cfg.restart.gpu_release_timeout_s),
            say=lambda *a, **k: self.say(*a, **k),
        )
        group.on_exit = lambda h: self.on_exit(h)
        return group

    # ------------------------------------------------------------------ environment
    def url(self, port: int | None = None) -> str:
        s = self.cfg.server
        host = "127.0.0.1" if s.host in ("0.0.0.0", "", "::") else s.host
        return f"http://{host}:{port or s.port}"

    def engine_env(
        self, profile: Profile, engine_id: str, debug_dir: Path | None
    ) -> dict[str, str]:
        from fastverify.profiles.effective import effective_env

        # FlashInfer's autotune cache and JIT workspace in the state dir (a volume in the
        # image): the tactics measured at the first start are reused by the next ones
        fi = self.store.dir / "flashinfer"
        extra: dict[str, str] = {
            allreduce.AUTOTUNE_DIR_VAR: str(fi / "autotune"),
            allreduce.WORKSPACE_BASE_VAR: str(fi),
        }
        extra.update(self.engine.extra_env())
        for part in self.env_parts:
            extra.update(part())
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
        # SGLang names its schedulers and detokenizer with setproctitle, which by default
        # writes the title over the memory /proc/PID/environ shows (setproctitle's docs):
        # their environment would be unreadable. SPT_NOENV keeps it readable (the title is
        # then bounded by the command line, which "sglang::scheduler" fits).
        extra[procs.KEEP_ENVIRON_VAR] = "1"
        return effective_env(profile, base_env=os.environ, extra=extra)

    def set_where(self, profile: Profile, name: str) -> str:
        """Where the server's `name` comes from: [server.env], the profile's file and line,
        or the daemon's own environment (server.env_passthrough)."""
        if name in self.cfg.server.env:
            return f"[server.env] of {self.cfg.source or 'the configuration'}"
        if name in (getattr(profile, "own_env", None) or {}):
            line = (getattr(profile, "lines", None) or {}).get(name)
            return f"{profile.file}" + (f":{line}" if line else "")
        if name in (getattr(profile, "env", None) or {}):
            return f"profile {(profile.env_sources or {}).get(name, profile.name)}"
        return "the daemon's environment (server.env_passthrough)"

    def settings(self, profile: Profile) -> dict[str, str]:
        """The NCCL variables an engine of `profile` would get now (without the per-start
        NCCL_DEBUG* that `nccl_debug` adds): compared with a running engine's."""
        env = self.engine_env(profile, "-", None)
        return verify.nccl_part({k: v for k, v in env.items() if k != procs.ENGINE_ID_VAR})

    def same_argv(self, a: list[str], b: list[str]) -> bool:
        """Equal argvs, the flags fastverifyd adds (`argv_aside`) set aside."""
        a, b = list(a), list(b)
        for aside in self.argv_aside:
            a, b = aside(a), aside(b)
        return a == b

    def same_engine(self, h: EngineHandle, profile: Profile, argv: list[str]) -> bool:
        """Would starting `profile` with `argv` give what `h` already runs (the flags
        fastverifyd adds aside)?"""
        running = {k: v for k, v in h.expected_nccl.items() if k not in DEBUG_VARS}
        return self.same_argv(argv, h.argv) and self.settings(profile) == running

    def port_in_use(self, argv: list[str]) -> Failure | None:
        """`port_in_use` before any launch when another process holds the engine's HTTP
        port (fastverify.daemon.ports); None when it is free (or `argv` starts a follower,
        which serves no HTTP API)."""
        from fastverify.daemon import ports

        if self.engine.follower(argv):
            return None
        s = self.cfg.server
        port = port_of(argv) or s.port
        owner = ports.port_owner(s.host, port)
        if owner is None:
            return None
        return Failure("port_in_use", ports.in_use_message(s.host, port, owner))

    # ------------------------------------------------------------------ spawn / adopt
    def spawn(
        self, profile: Profile, mode: str, argv: list[str], *, standby: bool = False
    ) -> EngineHandle:
        """Start the engine group (group.SupervisedGroup) with the profile's clean environment;
        the readers `line_readers_for` gives hear every line of its log. `standby`: beside
        the serving engine, in the standby group, on the port its argv names."""
        group = self.standby_group if standby else self.group
        engine_id = self.group.new_id()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        base = f"{stamp}-{profile.name}-{mode}-{engine_id[:6]}"
        log_path = self.store.logs_dir / f"{base}.log"
        debug_dir = None
        if self.cfg.daemon.nccl_debug or tuner_check.wants_nccl_debug(profile):
            debug_dir = self.store.logs_dir / f"{base}.nccl"
            debug_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        env = self.engine_env(profile, engine_id, debug_dir)
        expected = verify.nccl_part({k: v for k, v in env.items() if k != procs.ENGINE_ID_VAR})
        hidden = secret_values(env, argv)

        def make(proc: Any) -> EngineHandle:
            h = EngineHandle(
                engine_id,
                proc.pid,
                proc.pid,
                procs.create_time(proc.pid),
                argv,
                log_path,
                profile.name,
                mode,
                self.url(port_of(argv)),
                expected,
                expected_sglang=verify.sglang_part(profile.env),
                env_names=tuple(sorted(env)),
                proc=proc,
                nccl_debug_dir=debug_dir,
                follower=self.engine.follower(argv),
                kept={key: keep(env, argv) for key, keep in self.keepers.items()},
            )
            return h

        h = group.spawn(engine_id, argv, env, log_path, make)
        with contextlib.suppress(OSError):
            self.store.prune_logs(protect=(log_path,))
        for begin in self.started_with:
            begin(h, env)
        h.line_readers = [r for f in self.line_readers_for if (r := f(h)) is not None]
        self._follow(h, hidden)
        # stream=False: the `engine` event already tells a follower
        self.say(f"engine started: pid {h.pid}, log {log_path}", stream=False)
        return h

    def previous(self) -> Previous:
        """What engine.pid names (group.SupervisedGroup.previous: a pending group is stopped,
        a foreign one left alone)."""
        return self.group.previous()

    def adopt(self, info: dict[str, Any]) -> EngineHandle:
        """A handle on a live engine group recorded in engine.pid (`previous()` proved it
        ours)."""

        def make() -> EngineHandle:
            return EngineHandle(
                info["engine_id"],
                int(info["pid"]),
                int(info.get("pgid", info["pid"])),
                info.get("create_time"),
                list(info.get("argv", [])),
                Path(info.get("log", "")),
                info["profile"],
                info["mode"],
                info.get("url") or self.url(),
                dict(info.get("expected_nccl") or {}),
                expected_sglang=dict(info.get("expected_sglang") or {}),
                env_names=tuple(info["env_names"]) if info.get("env_names") is not None else None,
                kept={key: info.get(key) for key in self.keepers},
                nccl_debug_dir=Path(info["nccl_debug_dir"]) if info.get("nccl_debug_dir") else None,
                started_at=float(info.get("started_at") or _now()),
            )

        h = self.group.adopt(make)
        try:  # its own environment (its log is replayed)
            env: Mapping[str, str] | None = psutil.Process(h.pid).environ()
        except (psutil.Error, OSError):
            env = None
        for begin in self.started_with:
            begin(h, env)
        h.line_readers = [f(h) for f in self.adopted_readers_for]
        self._follow(h, secret_values({}, h.argv))
        return h

    def _follow(self, h: EngineHandle, hidden: list[str]) -> None:
        def on_line(line: str) -> None:
            for read in h.line_readers:
                read(line)
            facts = logs.parse(line)
            if facts.progress is not None:
                phase, pct, msg = facts.progress
                h.progress = {"phase": phase, "percent": pct, "message": msg}
                if phase == "ready":
                    h.ready_line = True
                    h.wake.set()
            self.on_line(h, line, facts)

        h.tail = logs.LogTail(h.log_path, on_line, secrets=hidden).start()

    # ------------------------------------------------------------------ readiness
    def probe(self, url: str, timeout: float = HEALTH_PROBE_TIMEOUT_S) -> bool:
        try:  # fastverify.sglang.client never goes through an http_proxy: the engine is local
            return engine_client.health(url, self.engine.health_path(), timeout=timeout) == 200
        except (OSError, ValueError):
            return False

    def probe_ready(self, url: str, timeout: float = HEALTH_PROBE_TIMEOUT_S) -> bool:
        """The server's own readiness, whatever its --log-level: `/model_info` answers (what
        SGLang's own warm-up waits for) and `/health_generate` is 200 (503 while SGLang's
        server_status is Starting, i.e. until its warm-up generation went through)."""
        try:
            if engine_client.health(url, engine_client.MODEL_INFO, timeout=timeout) != 200:
                return False
            return engine_client.health(url, engine_client.HEALTH_GENERATE, timeout=timeout) == 200
        except (OSError, ValueError):
            return False

    def exit_failure(self, h: EngineHandle) -> Failure:
        """Why the engine's leader exited (from the last log lines and the exit code)."""
        if h.tail is not None:
            h.tail.stop()
        failure = failures.classify(h.recent_lines(), exit_code=h.exit_code, log=str(h.log_path))
        full = self.store.full() if h.exit_code is not None and h.exit_code >= 0 else None
        if full:  # e.g. exited(120): Python could not flush its log at exit
            return Failure(
                "state_dir_full",
                f"{full}; the engine stopped ({failure.message}) (free space, then "
                "`fastverifyctl profile set` again)",
                failure.line,
                str(h.log_path),
                h.exit_code,
            )
        return failure

    def await_ready(
        self,
        h: EngineHandle,
        timeout_s: float,
        cancel: threading.Event,
        *,
        heartbeat: Callable[[], None] | None = None,
    ) -> Failure | None:
        """None once the engine is ready by its own endpoints; else why not (exit, timeout,
        cancel). The ready line (INFO) only makes the check prompt: a server at
        `--log-level warning` never prints it, and is found ready by `/model_info` and
        `/health_generate` (polled every `ENDPOINT_POLL_S`); an adopted engine or a follower
        by its health check alone."""
        next_poll = time.monotonic() + ENDPOINT_POLL_S

        def check() -> bool | Failure:
            nonlocal next_poll
            if h.line_failure is not None:  # read in a line by a verifier (checks.py)
                return h.line_failure
            if (h.ready_line or h.adopted or h.follower) and self.probe(h.url):
                h.ready_s = time.monotonic() - h.started_mono
                h.ready_by = "ready line + health" if h.ready_line else "health"
                return True
            now = time.monotonic()
            if not h.ready_line and now >= next_poll:
                next_poll = now + ENDPOINT_POLL_S
                if self.probe_ready(h.url):
                    h.ready_s = time.monotonic() - h.started_mono
                    # A server that prints the ready line wrote it before /health_generate
                    # could answer (SGLang sets its status Up, then logs the line; the answer
                    # comes a poll later): read the log that far before saying which it was.
                    if h.tail is not None:
                        h.tail.caught_up(TAIL_CATCH_UP_S)
                    h.ready_by = "ready line + health" if h.ready_line else "endpoints"
                    return True
            return False

        group = self.standby_group if h is self.standby_group.member else self.group
        return group.wait_ready(
            h,
            check,
            timeout_s=timeout_s,
            cancel=cancel,
            exit_failure=lambda: self.exit_failure(h),
            timeout_failure=lambda: failures.classify(
                h.recent_lines(),
                exit_code=None,
                log=str(h.log_path),
                timed_out=True,
                timeout_s=timeout_s,
            ),
            cancelled=Failure("cancelled", "operation cancelled", log=str(h.log_path)),
            heartbeat=(lambda _elapsed: heartbeat()) if heartbeat is not None else None,
            poll_s=lambda: 0.02 if h.ready_line else 0.1,  # the ready line wakes it sooner
        )

    # ------------------------------------------------------------------ bookkeeping
    def promote(self, h: EngineHandle, old: EngineHandle) -> None:
        """The verified standby engine `h` becomes the engine group's member; engine.pid
        names it (verified) and `old`, which it replaces, as `retiring` until `retired`: a
        daemon killed in between adopts `h` and stops `old` (reconcile.py)."""
        self.retiring = self.group.record_of(old)
        self.mark_verified(h)  # one atomic write: never a moment with neither recorded
        self.standby_group.hand_over(h, self.group)

    def retired(self, h: EngineHandle) -> None:
        """The engine `promote` replaced has stopped: engine.pid names `h` alone."""
        self.retiring = None
        self.mark_verified(h)

    def mark_verified(self, h: EngineHandle) -> None:
        retiring = {"retiring": self.retiring} if self.retiring else {}
        try:
            self.group.write_record(self.group.record_of(h, verified=True, **retiring))
        except OSError as exc:  # the engine serves anyway; adoption reads the first record
            self.say(f"cannot record the verified engine in engine.pid: {exc}", logging.WARNING)

    def lost_workers(self, h: EngineHandle) -> list[int]:
        """Workers verified at READY that have exited while the leader lives."""
        return [pid for pid in h.worker_pids if not pid_alive(pid)]

    # ------------------------------------------------------------------ stop
    def stop(self, h: EngineHandle, *, forget: bool = True) -> procs.StopResult:
        """Stop the engine group (group.SupervisedGroup.stop: SIGCONT, TERM, grace, KILL, its
        GPU memory), stop the tail; `forget` clears engine.pid."""
        h.serving = False
        if h is self.standby_group.member:  # a standby that never served: its own record goes
            done = self.standby_group.stop(h, forget=True)
            forget = False
        else:
            done = self.group.stop(h, forget=forget)
        res = done.result
        if res.signal_used != "none":
            self.say(
                f"stopped engine group {h.pgid} ({res.signal_used}, {res.duration_s:.2f} s)"
                + (f"; still present: {res.leftover}" if res.leftover else "")
            )
        if not done.released:
            self.say(f"GPU memory not released: {done.how}", logging.WARNING)
        if h.tail is not None:
            h.tail.stop()
        if forget:
            self.group.clear_record()
        return res

    def stop_group(self, pgid: int) -> procs.StopResult:
        """Stop an engine group we have no handle for (reconcile)."""
        return self.group.stop_pgid(pgid)

    def masked_argv(self, argv: list[str]) -> list[str]:
        return mask_argv(argv)
