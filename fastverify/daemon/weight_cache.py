"""The weight cache: SGLang's weight-cache daemon as fastverifyd's second supervised process
group, and what each server start learns from it.

`[server] weight_cache = "off" | "auto" | "on"`. With auto/on, fastverifyd starts
`python -m sglang.srt.weight_cache.daemon` (the engine adapter's `companion_argv`: the
sim's stand-in for the sim) for the configured model once, in its own session, with a
random `FASTVERIFY_WEIGHT_CACHE_ID` in its environment and `weight-cache.pid` in the state
dir; waits for every local rank's ready file; and starts each baseline server with
`--weight-cache-mode client`, which maps the cached weights instead of reading them. A
profile switch, a rollback or a crash restart then restarts only the server: the cache's
launcher keeps its pid. The cache's command line comes from the configuration alone
(the baseline argv without a profile's requirements), so no switch changes it; a change
of the configuration (model, TP size, dtype, ...) restarts the cache at the next start.

`Gate` says per start whether the cache serves it: not for a trial on dummy weights, not
for speculative modes where the release refuses it (`speculative_refusal` in its facts:
its daemon exports no draft model; those switches load from disk, said before anything
stops), not without a cache in the release or over several nodes. `WeightsWatch` reads the
server's own lines (the IPC loader's, `Load weight end`, the CUDA-graph milestones) into
"weights: from the cache (N GiB over IPC, X s)" or "from disk (the cache refused: WHY)"
and the split of the start (weights, cuda_graph, rest).

`WeightCache` is what the cache's process group has of its own; the group's lifecycle
(start, adopt after a killed fastverifyd, stop with grace, restart after a crash with backoff
1 s doubling to 60 s, the states) is group.SupervisedGroup's. Its own: `ensure(cancel)`
(start, or restart after a config change, and wait for every rank's ready file; the wait
reports progress), SIGINT as the first signal (its launcher stops its ranks as SGLang's
launcher does on KeyboardInterrupt) and the stale files of its ranks removed after a stop,
`adopt()` keeping an adopted group only when its command line is what this configuration
builds, the mismatch SGLang reported, and `status()`. The handle and what the starts record
are weight_cache_records.py's."""

from __future__ import annotations

import contextlib
import glob
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastverify.config import Config
from fastverify.daemon import procs
from fastverify.daemon.failures import Failure
from fastverify.daemon.group import GroupSpec, GroupState, SupervisedGroup
from fastverify.daemon.restart import RestartPolicy
from fastverify.daemon.weight_cache_records import CacheHandle, CacheTimes
from fastverify.sglang import weight_cache as wc

if TYPE_CHECKING:
    from fastverify.daemon.statestore import StateStore
    from fastverify.engines.base import Engine

ID_VAR = "FASTVERIFY_WEIGHT_CACHE_ID"
PID_FILE = "weight-cache.pid"
# a crashed cache comes back: 1 s doubling to 60 s, counted again from its next READY
RESTART = RestartPolicy(window_s=math.inf, backoff_s=(1.0, 60.0), burst=sys.maxsize)
# the group's states as status and the exporter name them (BACKOFF: failed, restarting)
STATE_NAMES = {
    GroupState.STARTING: "starting",
    GroupState.READY: "ready",
    GroupState.STOPPING: "stopping",
    GroupState.BACKOFF: "failed",
    GroupState.FAILED: "failed",
}


# ----------------------------------------------------------------------------- the group


class WeightCache:
    """See the module docstring. `cfg` and `engine` are read at each use (SIGHUP swaps them)."""

    def __init__(
        self, cfg: Config, engine: Engine, store: StateStore, say: Callable[..., None]
    ) -> None:
        self.cfg = cfg
        self.engine = engine
        self.store = store
        self.say = say
        self._lock = threading.RLock()
        self.group: SupervisedGroup[CacheHandle] = SupervisedGroup(
            GroupSpec(
                "weight cache",
                ID_VAR,
                "cache_id",
                store.dir / PID_FILE,
                stop_signal=signal.SIGINT,
                sigint_default=True,
                restart=RESTART,
            ),
            grace_s=lambda: float(self.cfg.restart.stop_grace_s),
            gpu_release_s=lambda: float(self.cfg.restart.gpu_release_timeout_s),
            say=lambda *a, **k: self.say(*a, **k),
        )
        self.group.on_exit = self._exited
        self.group.on_change = lambda: self.on_change()
        self.group.restart_with = self._restart
        self.last_failure: dict[str, Any] | None = None
        # (cache argv, profile) SGLang refused: that profile loads from disk while it holds
        self.mismatched: tuple[list[str], str | None] | None = None
        self.on_change: Callable[[], None] = lambda: None  # status/exporter refresh
        self.times = CacheTimes(store, self._lock)

    @property
    def handle(self) -> CacheHandle | None:
        return self.group.member

    @property
    def restarts(self) -> int:
        return self.group.restarts

    @property
    def shutting_down(self) -> threading.Event:
        return self.group.shutting_down

    @property
    def state(self) -> str:
        """off | starting | ready | stopping | failed | stopped | mismatch (status, exporter)."""
        g = self.group.state
        if g is GroupState.STOPPED:
            if self.mismatched is not None:
                return "mismatch"
            return "stopped" if self.group.ever_ran else "off"
        return STATE_NAMES[g]

    # ------------------------------------------------------------------ what we would run
    @property
    def setting(self) -> str:
        return getattr(self.cfg.server, "weight_cache", "off")

    def facts(self) -> wc.CacheFacts | None:
        try:
            return wc.of(self.engine.facts())
        except ValueError:
            return None

    def dir(self) -> Path:
        """Where this daemon's cache sockets and ready files go (releases that read
        SGLANG_WEIGHT_CACHE_*_TEMPLATE): beside the control socket, short for AF_UNIX."""
        return self.cfg.socket_path.parent / "weight-cache"

    def env_paths(self) -> dict[str, str]:
        """The template variables both the cache and the server get (none for releases with
        fixed /tmp paths)."""
        cf = self.facts()
        if cf is None or (self.setting == "off" and self.handle is None):
            return {}
        names = cf.template_vars()
        suffix = {"socket": ".sock", "ready": ".ready"}
        return {
            var: str(self.dir() / f"sglang_weight_cache_{{{cf.path_key}}}{suffix[kind]}")
            for kind, var in names.items()
        }

    def wanted_argv(self) -> list[str] | None:
        """The cache's command line for this configuration (None: the engine has none)."""
        import dataclasses

        server = dataclasses.replace(self.cfg.server, steps_override=None)
        try:
            base = self.engine.build_argv(server, "baseline", {})
        except ValueError:
            return None
        cf = wc.of(self.engine.facts())
        if cf is None:
            return None
        argv: list[str] = self.engine.companion_argv(
            cf.module, wc.strip_flags(base), cf.daemon_args
        )
        return argv

    def ranks(self) -> int:
        return max(1, int(self.cfg.server.tp_size) // max(1, int(self.cfg.server.nnodes)))

    def _env(self, cache_id: str) -> dict[str, str]:
        from fastverify.profiles.effective import clean_base

        env = clean_base(os.environ)
        env.update(self.engine.extra_env())
        for name in self.cfg.server.env_passthrough:
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(self.cfg.server.env)
        env.update(self.env_paths())
        env[ID_VAR] = cache_id
        env[procs.KEEP_ENVIRON_VAR] = "1"
        return env

    # ------------------------------------------------------------------ ready files
    def ready_files(self) -> list[Path]:
        cf = self.facts()
        if cf is None:
            return []
        env = self.env_paths()
        if cf.path_key == "global_rank":
            paths = [Path(cf.ready_path(r, env)) for r in range(self.ranks())]
            return [p for p in paths if p.exists()]
        return sorted(Path(p) for p in glob.glob(cf.ready_glob(env)))

    def _ours(self, h: CacheHandle) -> tuple[list[int], dict[str, Any]]:
        """The pids of the ready files written by `h`'s ranks, and rank 0's fingerprint."""
        members = {p.pid for p in procs.group_members(h.pgid)}
        pids: list[int] = []
        first: dict[str, Any] = {}
        for path in self.ready_files():
            with contextlib.suppress(OSError):
                ready = wc.parse_ready(path.read_text(errors="replace"))
                if ready.pid in members:
                    pids.append(ready.pid)
                    if ready.config.get("tp_rank", 0) == 0 or not first:
                        first = ready.config
        return pids, first

    # ------------------------------------------------------------------ start / wait / stop
    def ensure(
        self,
        cancel: threading.Event,
        heartbeat: Callable[[str], None] | None = None,
        profile: str | None = None,
    ) -> Failure | None:
        """A ready cache for this configuration (started, or restarted after a config change),
        else why not. Blocks while it loads; `cancel` ends the wait (the cache keeps loading).
        A profile whose server SGLang refused this cache for is not served again by it."""
        argv = self.wanted_argv()
        if argv is None:
            return Failure("weight_cache_unavailable", "the engine has no weight-cache daemon")
        with self._lock:
            if self.mismatched is not None and self.mismatched == (argv, profile):
                return Failure(
                    "weight_cache_mismatch",
                    f"SGLang refused this cache's fingerprint for {profile} at its last start "
                    f"({(self.last_failure or {}).get('message')}); it loads from disk until "
                    "the configuration changes",
                )
            h = self.handle
            if h is not None and h.alive() and h.argv != argv:
                self.say(
                    "weight cache: the configuration changed (its command line differs); "
                    "restarting it"
                )
                self._stop(h)
                h = None
            if h is None or not h.alive():
                try:
                    h = self._spawn(argv)
                except OSError as exc:
                    return self._failed(
                        Failure("weight_cache_unavailable", f"cannot start the weight cache: {exc}")
                    )
        return self._wait_ready(h, cancel, heartbeat)

    def _spawn(self, argv: list[str]) -> CacheHandle:
        cache_id = self.group.new_id()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        log_dir = self.store.dir / "weight-cache"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{stamp}-{cache_id[:6]}.log"
        paths = self.env_paths()
        if paths:
            self.dir().mkdir(mode=0o700, parents=True, exist_ok=True)
        ranks = self.ranks()

        def make(proc: Any) -> CacheHandle:
            pid = proc.pid
            ct = procs.create_time(pid)
            return CacheHandle(cache_id, pid, pid, ct, argv, log_path, paths, ranks, proc=proc)

        h = self.group.spawn(cache_id, argv, self._env(cache_id), log_path, make)
        self.say(f"weight cache: started pid {h.pid} for {h.ranks} rank(s) (log {log_path})")
        return h

    def _wait_ready(
        self, h: CacheHandle, cancel: threading.Event, heartbeat: Callable[[str], None] | None
    ) -> Failure | None:
        if h.ready.is_set():
            return None
        seen = [0]  # ready files of ours so far

        def check() -> bool:
            pids, first = self._ours(h)
            seen[0] = len(pids)
            if len(pids) < h.ranks:
                return False
            with self._lock:
                h.rank_pids, h.fingerprint = pids, first
                if h.adopted and h.ready_s is None:
                    h.ready_s = 0.0
            return True

        timeout_s = float(self.cfg.restart.readiness_timeout_s)
        failure = self.group.wait_ready(
            h,
            check,
            timeout_s=timeout_s,
            cancel=cancel,
            started=time.monotonic(),
            exit_failure=lambda: self._exit_failure(h),
            timeout_failure=lambda: Failure(
                "weight_cache_unavailable",
                f"the weight cache is not ready within {timeout_s:g} s "
                f"({seen[0]}/{h.ranks} ready files)",
                log=str(h.log_path),
            ),
            cancelled=Failure(
                "cancelled", "cancelled while the weight cache loads (it keeps loading)"
            ),
            heartbeat=(
                (
                    lambda elapsed: heartbeat(
                        f"weight cache: loading the weights ({elapsed:.0f} s, "
                        f"{seen[0]}/{h.ranks} rank(s) ready)"
                    )
                )
                if heartbeat is not None
                else None
            ),
        )
        if failure is not None:
            return failure if failure.reason == "cancelled" else self._failed(failure)
        with contextlib.suppress(OSError):
            self.group.write_record(self.group.record_of(h))
        self.say(
            f"weight cache: ready ({h.ranks} rank(s), pid {h.pid}, {(h.ready_s or 0.0):.1f} s)"
        )
        self.on_change()
        return None

    def _exit_failure(self, h: CacheHandle) -> Failure:
        tail = _tail(h.log_path)
        line = next(
            (ln for ln in reversed(tail) if "Error" in ln or "error" in ln),
            tail[-1] if tail else "",
        )
        return Failure(
            "weight_cache_unavailable",
            f"the weight cache exited ({h.exit_code}): {line.strip()[-400:]}",
            line or None,
            str(h.log_path),
            h.exit_code,
        )

    def _failed(self, failure: Failure) -> Failure:
        with self._lock:
            self.last_failure = dict(failure.to_dict(), at=time.time())
        self.say(f"weight cache: {failure.message}", logging.WARNING)
        self.on_change()
        return failure

    def _exited(self, h: CacheHandle) -> None:
        """The group saw `h` exit: a crash is the last failure (the group restarts it)."""
        if h.expected_exit or self.shutting_down.is_set() or h is not self.handle:
            return
        with self._lock:
            self.last_failure = dict(self._exit_failure(h).to_dict(), at=time.time())

    def _restart(self) -> None:
        """The end of the group's BACKOFF: the cache again, unless configured off since."""
        if self.setting != "off":
            self.ensure(self.shutting_down)

    def stop(self, why: str = "") -> None:
        with self._lock:
            h = self.handle
            if h is not None:
                self._stop(h, why)

    def _stop(self, h: CacheHandle, why: str = "") -> None:
        done = self.group.stop(h)
        res = done.result
        self.say(
            f"weight cache: stopped group {h.pgid} ({res.signal_used}, {res.duration_s:.2f} s)"
            + (f": {why}" if why else "")
            + ("" if done.released else f"; {done.how}")
        )
        self._remove_stale(done.pids)
        self.on_change()

    def _remove_stale(self, pids: list[int]) -> None:
        """Ready/socket files of our (now gone) ranks: SGLang's launcher leaves them behind
        when its ranks die by SIGKILL."""
        cf = self.facts()
        if cf is None:
            return
        for ready in self.ready_files():
            with contextlib.suppress(OSError):
                pid = wc.parse_ready(ready.read_text(errors="replace")).pid
                if pid in pids and not procs.read_stat(pid):
                    sock = Path(str(ready)[: -len(".ready")] + ".sock")
                    ready.unlink()
                    with contextlib.suppress(FileNotFoundError):
                        sock.unlink()

    # ------------------------------------------------------------------ records
    # (weight-cache.json and the bytes held: weight_cache_records.CacheTimes, for this group)
    def record_time(self, source: str, mode: str, seconds: float | None) -> None:
        self.times.record(source, mode, seconds)

    def disk_estimate(self, mode: str) -> str:
        return self.times.disk_estimate(mode, self.handle)

    def record_weight_gb(self, gb: float | None) -> None:
        self.times.record_weight_gb(gb)

    def bytes_held(self) -> tuple[int | None, str]:
        return self.times.bytes_held(self.handle)

    def forget_mismatch(self) -> None:
        with self._lock:
            self.mismatched = None

    def note_mismatch(self, why: str, profile: str | None) -> None:
        """SGLang refused the cache's fingerprint for `profile`'s server: stop it (a disk load
        beside another configuration's weights is what SGLang refuses to risk); that profile
        loads from disk while this command line holds, another one restarts the cache."""
        with self._lock:
            h = self.handle
            argv = list(h.argv) if h is not None else (self.wanted_argv() or [])
            self.mismatched = (argv, profile)
            self.last_failure = {
                "reason": "weight_cache_mismatch",
                "message": why,
                "at": time.time(),
            }
        if h is not None:
            self._stop(h, f"SGLang refused its fingerprint: {why}")
        self.on_change()

    def shutdown(self) -> None:
        self.group.shutdown()
        self.stop("fastverifyd is stopping")

    # ------------------------------------------------------------------ adoption
    def adopt(self) -> str | None:
        """After a killed fastverifyd: follow the cache group it left (ours, same command line),
        stop it (ours, another configuration), or leave it alone (not ours). A message."""
        prev = self.group.previous()
        if prev.kind == "reaped":  # spawned, never recorded: found by its id and stopped
            groups = [pgid for pgid, _ in prev.stopped]
            return (
                f"weight cache: stopped group(s) {groups} started by a daemon that "
                "died before recording them"
                if groups
                else None
            )
        if prev.kind == "foreign":
            return (
                f"weight-cache.pid names pid {prev.record.get('pid')}: {prev.why}; leaving it "
                "alone (nothing killed)"
            )
        if prev.kind == "unreadable":
            self.store.findings.append(prev.why)
        if prev.kind != "ours":
            return prev.why or None
        data = prev.record
        h = self.group.adopt(
            lambda: CacheHandle(
                data["cache_id"],
                int(data["pid"]),
                prev.pgid,
                data.get("create_time"),
                list(data.get("argv") or []),
                Path(data.get("log", "")),
                dict(data.get("env_paths") or {}),
                int(data.get("ranks") or self.ranks()),
                started_at=float(data.get("started_at") or time.time()),
                ready_s=data.get("ready_s"),
            )
        )
        if self.setting == "off" or h.argv != self.wanted_argv():
            what = (
                "weight_cache = off"
                if self.setting == "off"
                else "its command line (fingerprint) no longer matches the configuration"
            )
            self._stop(h, what)
            return f"weight cache: stopped the previous cache group {h.pgid}: {what}"
        threading.Thread(
            target=self._wait_ready,
            args=(h, self.shutting_down, None),
            name="wcache-adopt",
            daemon=True,
        ).start()
        return f"weight cache: adopting the running cache (pid {h.pid}, {h.ranks} rank(s))"

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        cf = self.facts()
        with self._lock:
            h = self.handle
            out: dict[str, Any] = {
                "setting": self.setting,
                "state": self.state if self.setting != "off" or h is not None else "off",
                "available": cf is not None,
                "speculative": None if cf is None else not cf.refusal,
                "restarts": self.restarts,
                "last_failure": self.last_failure,
                "mismatch": self.mismatched is not None,
            }
            if h is not None:
                out.update(
                    h.status(),
                    ranks=h.ranks,
                    rank_pids=list(h.rank_pids),
                    fingerprint=h.fingerprint,
                )
        size, source = self.bytes_held()
        out.update(bytes=size, bytes_source=source)
        if cf is not None and not cf.accounts_cached_weights:
            out["memory_note"] = (
                f"SGLang {cf.version} sizes a client's KV pool from the memory left beside "
                "the cache (no account_preloaded_weights): --mem-fraction-static's headroom "
                "shrinks by the cache's share; lower --mem-fraction-static by it, or use 0.5.19+"
            )
        return out


def _tail(path: Path, n: int = 30) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []
