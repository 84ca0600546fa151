"""The weight cache: SGLang's weight-cache daemon as fastverifyd's second supervised process
group, and what each server start learns from it.

`[server] weight_cache = "off" | "auto" | "on"`. With auto/on, fastverifyd starts
`python -m sglang.srt.weight_cache.daemon` (the engine adapter's `weight_cache_argv`: the
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

`WeightCache` owns the process group: `ensure(cancel)` (start, or restart after a config
change, and wait for the ready files; the wait reports progress), `stop()` (SIGINT to the
launcher, which stops its ranks as SGLang's launcher does on KeyboardInterrupt; SIGKILL to
the group after the grace; stale files of our ranks removed), `adopt()` after a killed
fastverifyd (the group is provably ours: a live member carries the recorded id; its
command line must be what this configuration builds, else it is stopped), a watcher per
group that restarts a crashed cache (backoff 1 s doubling to 60 s), and `status()`.
Only its own pids are ever signalled. The handle and what the starts record are
weight_cache_records.py's.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastverify.daemon import procs
from fastverify.daemon.failures import Failure
from fastverify.daemon.weight_cache_records import CacheHandle, CacheTimes
from fastverify.sglang import weight_cache as wc

ID_VAR = "FASTVERIFY_WEIGHT_CACHE_ID"
PID_FILE = "weight-cache.pid"
BACKOFF_S = (1.0, 60.0)


# ----------------------------------------------------------------------------- the group


class WeightCache:
    """See the module docstring. `cfg` and `engine` are read at each use (SIGHUP swaps them)."""

    def __init__(self, cfg: Any, engine: Any, store: Any, say: Callable[..., None]) -> None:
        self.cfg = cfg
        self.engine = engine
        self.store = store
        self.say = say
        self._lock = threading.RLock()
        self.handle: CacheHandle | None = None
        self.state = "off"  # off | starting | ready | failed | stopped | mismatch
        self.last_failure: dict[str, Any] | None = None
        # (cache argv, profile) SGLang refused: that profile loads from disk while it holds
        self.mismatched: tuple[list[str], str | None] | None = None
        self.restarts = 0
        self.shutting_down = threading.Event()
        self.on_change: Callable[[], None] = lambda: None  # status/exporter refresh
        self._backoff = BACKOFF_S[0]
        self.times = CacheTimes(store, self._lock)

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
        return self.engine.weight_cache_argv(wc.strip_flags(base))

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
        pids, first = [], {}
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
        cache_id = secrets.token_hex(8)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        log_dir = self.store.dir / "weight-cache"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{stamp}-{cache_id[:6]}.log"
        paths = self.env_paths()
        if paths:
            self.dir().mkdir(mode=0o700, parents=True, exist_ok=True)
        self.store.save_json(PID_FILE, {"cache_id": cache_id, "pending": True, "argv": argv})
        proc = procs.spawn(argv, self._env(cache_id), log_path, sigint_default=True)
        h = CacheHandle(
            cache_id=cache_id,
            pid=proc.pid,
            pgid=proc.pid,
            create_time=procs.create_time(proc.pid),
            start_ticks=procs.start_ticks(proc.pid),
            argv=argv,
            log_path=log_path,
            env_paths=paths,
            ranks=self.ranks(),
            proc=proc,
        )
        self.store.save_json(PID_FILE, h.record())
        self.handle = h
        self.state = "starting"
        self.say(f"weight cache: started pid {h.pid} for {h.ranks} rank(s) (log {log_path})")
        threading.Thread(target=self._watch, args=(h,), name=f"wcache-{h.pid}", daemon=True).start()
        self.on_change()
        return h

    def _wait_ready(
        self, h: CacheHandle, cancel: threading.Event, heartbeat: Callable[[str], None] | None
    ) -> Failure | None:
        t0 = time.monotonic()
        deadline = t0 + float(self.cfg.daemon.readiness_timeout_s)
        last_beat = t0
        while True:
            if h.ready.is_set():
                return None
            if h.exited.is_set():
                return self._failed(self._exit_failure(h))
            pids, first = self._ours(h)
            if len(pids) >= h.ranks:
                with self._lock:
                    h.rank_pids, h.fingerprint = pids, first
                    h.ready_s = (
                        round(time.monotonic() - t0 if not h.adopted else 0.0, 3)
                        if h.ready_s is None
                        else h.ready_s
                    )
                    h.ready.set()
                    self.state = "ready"
                    self._backoff = BACKOFF_S[0]
                    with contextlib.suppress(OSError):
                        self.store.save_json(PID_FILE, h.record())
                self.say(
                    f"weight cache: ready ({h.ranks} rank(s), pid {h.pid}, "
                    f"{(h.ready_s or 0.0):.1f} s)"
                )
                self.on_change()
                return None
            now = time.monotonic()
            if cancel.is_set():
                return Failure(
                    "cancelled", "cancelled while the weight cache loads (it keeps loading)"
                )
            if now >= deadline:
                return self._failed(
                    Failure(
                        "weight_cache_unavailable",
                        f"the weight cache is not ready within "
                        f"{self.cfg.daemon.readiness_timeout_s:g} s "
                        f"({len(pids)}/{h.ranks} ready files)",
                        log=str(h.log_path),
                    )
                )
            if heartbeat is not None and now - last_beat >= 10:
                heartbeat(
                    f"weight cache: loading the weights ({now - t0:.0f} s, "
                    f"{len(pids)}/{h.ranks} rank(s) ready)"
                )
                last_beat = now
            h.exited.wait(0.1)

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
            self.state = "failed"
            self.last_failure = dict(failure.to_dict(), at=time.time())
        self.say(f"weight cache: {failure.message}", logging.WARNING)
        self.on_change()
        return failure

    def _watch(self, h: CacheHandle) -> None:
        code: int | None = None
        if h.proc is not None:
            code = h.proc.wait()
        else:
            with contextlib.suppress(Exception):
                import psutil

                psutil.Process(h.pid).wait()
        h.exit_code = code
        h.exited.set()
        if h.expected_exit or self.shutting_down.is_set():
            return
        with self._lock:
            if self.handle is not h:
                return
            self.restarts += 1
            self.state = "failed"
            self.last_failure = dict(self._exit_failure(h).to_dict(), at=time.time())
            delay = self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF_S[1])
        self.say(
            f"weight cache: pid {h.pid} exited ({code}); restarting it in {delay:.0f} s",
            logging.WARNING,
        )
        self.on_change()
        if not self.shutting_down.wait(delay):
            with self._lock:
                if self.handle is not h or self.setting == "off":
                    return
            threading.Thread(
                target=self.ensure, args=(self.shutting_down,), daemon=True, name="wcache-restart"
            ).start()

    def stop(self, why: str = "") -> None:
        with self._lock:
            h = self.handle
            if h is not None:
                self._stop(h, why)

    def _stop(self, h: CacheHandle, why: str = "") -> None:
        h.expected_exit = True
        alive = [p.pid for p in procs.group_members(h.pgid)]
        res = procs.stop_group(h.pgid, self.cfg.daemon.stop_grace_s, proc=h.proc, sig=signal.SIGINT)
        released, how = procs.wait_gpu_release(alive, self.cfg.daemon.gpu_release_timeout_s)
        self.say(
            f"weight cache: stopped group {h.pgid} ({res.signal_used}, {res.duration_s:.2f} s)"
            + (f": {why}" if why else "")
            + ("" if released else f"; {how}")
        )
        self._remove_stale(alive)
        if self.handle is h:
            self.handle = None
            self.state = "stopped"
            with contextlib.suppress(OSError):
                (self.store.dir / PID_FILE).unlink()
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
        with self._lock:
            self.state = "mismatch"
        self.on_change()

    def shutdown(self) -> None:
        self.shutting_down.set()
        self.stop("fastverifyd is stopping")

    # ------------------------------------------------------------------ adoption
    def adopt(self) -> str | None:
        """After a killed fastverifyd: follow the cache group it left (ours, same command line),
        stop it (ours, another configuration), or leave it alone (not ours). A message."""
        data = self.store.load_json(PID_FILE)
        if not data:
            return None
        if data.get("pending"):  # spawned, never recorded: find it by its id
            groups = {
                p.pgid
                for p in procs.processes()
                if procs.engine_id_of(p.pid, var=ID_VAR) == data.get("cache_id")
            }
            for pgid in sorted(groups):
                procs.stop_group(pgid, self.cfg.daemon.stop_grace_s, sig=signal.SIGINT)
            with contextlib.suppress(OSError):
                (self.store.dir / PID_FILE).unlink()
            return (
                f"weight cache: stopped group(s) {sorted(groups)} started by a daemon that "
                "died before recording them"
                if groups
                else None
            )
        info = {**data, "engine_id": data.get("cache_id")}
        ours, why = procs.is_ours(info, var=ID_VAR)
        if not ours:
            with contextlib.suppress(OSError):
                (self.store.dir / PID_FILE).unlink()
            return (
                f"weight-cache.pid names pid {data.get('pid')}: {why}; leaving it alone "
                "(nothing killed)"
            )
        h = CacheHandle(
            cache_id=data["cache_id"],
            pid=int(data["pid"]),
            pgid=int(data.get("pgid", data["pid"])),
            create_time=data.get("create_time"),
            start_ticks=data.get("start_ticks"),
            argv=list(data.get("argv") or []),
            log_path=Path(data.get("log", "")),
            env_paths=dict(data.get("env_paths") or {}),
            ranks=int(data.get("ranks") or self.ranks()),
            adopted=True,
            started_at=float(data.get("started_at") or time.time()),
            ready_s=data.get("ready_s"),
        )
        threading.Thread(target=self._watch, args=(h,), name=f"wcache-{h.pid}", daemon=True).start()
        if self.setting == "off" or h.argv != self.wanted_argv():
            what = (
                "weight_cache = off"
                if self.setting == "off"
                else "its command line (fingerprint) no longer matches the configuration"
            )
            self._stop(h, what)
            return f"weight cache: stopped the previous cache group {h.pgid}: {what}"
        self.handle = h
        self.state = "starting"
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
                    pid=h.pid,
                    pgid=h.pgid,
                    ranks=h.ranks,
                    rank_pids=list(h.rank_pids),
                    adopted=h.adopted,
                    started_at=h.started_at,
                    ready_s=h.ready_s,
                    log=str(h.log_path),
                    argv=h.argv,
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
