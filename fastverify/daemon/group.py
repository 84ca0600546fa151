"""One supervised process group: the machine each process fastverifyd runs goes through.

`SupervisedGroup(spec, ...)` owns one program's process group at a time (its `member`):
- start (`spawn`): a `pending` record names a random id before the spawn (a daemon killed in
  between finds the group by that id), the program runs in its own session with the id in
  its environment (`spec.id_var`), and the full record follows;
- readiness (`wait_ready`): the owner's `check` until it says ready, with the group's exit,
  a deadline, a cancel flag and a heartbeat around it;
- adopt after a killed fastverifyd (`previous`, then `adopt` or `stop_pgid`): a group spawned
  but never recorded is stopped, one that is not provably ours (procs.is_ours) is left
  alone, one that is ours is the owner's to follow or stop;
- stop with grace (`stop`): SIGCONT (a SIGSTOPped group would otherwise hold the signal
  until the grace ends), the spec's first signal to the leader, the grace, SIGKILL, then
  the wait for its GPU memory;
- restart with backoff: with `spec.restart` (restart.RestartPolicy), an unexpected exit
  waits `policy.delay(n)` in BACKOFF and calls `restart_with()`; crash n counts since the
  last READY, beyond the burst the group is FAILED. Without a policy an unexpected exit is
  FAILED and `on_exit` tells the owner (the engine's crash steps decide: daemon/crashes.py).

States
------
STOPPED   no member (before the first start, after a stop).
STARTING  spawned or adopted; the owner's readiness check has not passed yet.
READY     the check passed.
STOPPING  being stopped (SIGCONT, first signal, grace, SIGKILL, GPU release).
BACKOFF   exited unexpectedly; waiting before the restart the policy allows.
FAILED    not ready in time, exited while starting, or exited with no restart to come.

Transitions (old -> allowed new; staying is always allowed)
-----------------------------------------------------------
STOPPED   -> STARTING (spawn, adopt), FAILED (the spawn itself failed)
STARTING  -> READY, FAILED, STOPPING, BACKOFF (exited, a restart to come)
READY     -> STOPPING, FAILED (exited, no restart), BACKOFF (exited, a restart to come)
STOPPING  -> STOPPED
BACKOFF   -> STARTING (the restart), STOPPING, FAILED (spawn failed, burst exceeded), STOPPED
FAILED    -> STARTING, STOPPING, BACKOFF, STOPPED

Owners keep only what differs: the engine's launcher (argv, environment, log tail, SGLang's
endpoints as readiness) and each part's group (weights.py's: its ready files, fingerprint,
stale files; the front door's).
A third process plugs in with a `GroupSpec`, a `Member` subclass for its record's own
fields, a readiness check and, when it should come back by itself, a restart policy.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, TypeVar

import psutil

from fastverify.daemon import procs, states
from fastverify.daemon.failures import Failure
from fastverify.daemon.restart import CrashWindow, RestartPolicy
from fastverify.durable import atomic_write_json

log = logging.getLogger("fastverifyd.group")


class GroupState(StrEnum):
    STOPPED = "STOPPED"
    STARTING = "STARTING"
    READY = "READY"
    STOPPING = "STOPPING"
    BACKOFF = "BACKOFF"
    FAILED = "FAILED"


S = GroupState
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    S.STOPPED: frozenset({S.STARTING, S.FAILED}),
    S.STARTING: frozenset({S.READY, S.FAILED, S.STOPPING, S.BACKOFF}),
    S.READY: frozenset({S.STOPPING, S.FAILED, S.BACKOFF}),
    S.STOPPING: frozenset({S.STOPPED}),
    S.BACKOFF: frozenset({S.STARTING, S.STOPPING, S.FAILED, S.STOPPED}),
    S.FAILED: frozenset({S.STARTING, S.STOPPING, S.BACKOFF, S.STOPPED}),
}


class IllegalGroupTransition(states.IllegalTransition):
    """A transition not in TRANSITIONS was attempted (a supervision bug)."""


def allowed(old: GroupState, new: GroupState) -> bool:
    """True when `old -> new` is in the table (staying in the same state is always allowed)."""
    return states.allowed(old, new, TRANSITIONS)


def check_transition(old: GroupState, new: GroupState) -> None:
    states.check_transition(old, new, TRANSITIONS, IllegalGroupTransition)


@dataclass
class Member:
    """One spawned or adopted process group: what its record holds and its process events.
    Owners subclass it for their own fields (`record()` adds them to the record)."""

    group_id: str
    pid: int
    pgid: int
    create_time: float | None
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, kw_only=True)  # None: adopted
    adopted: bool = field(default=False, kw_only=True)
    started_at: float = field(default_factory=time.time, kw_only=True)
    started_mono: float = field(default_factory=time.monotonic, kw_only=True)
    ready_s: float | None = field(default=None, kw_only=True)
    ready: threading.Event = field(default_factory=threading.Event, kw_only=True)
    exited: threading.Event = field(default_factory=threading.Event, kw_only=True)
    wake: threading.Event = field(default_factory=threading.Event, kw_only=True)  # any news
    exit_code: int | None = field(default=None, kw_only=True)
    expected_exit: bool = field(default=False, kw_only=True)
    # its start in clock ticks since boot (procs.start_ticks): the identity is_ours checks,
    # which no wall-clock step moves (create_time, epoch seconds, is for display)
    start_ticks: int | None = field(default=None, kw_only=True)

    def alive(self) -> bool:
        return not self.exited.is_set()

    def status(self) -> dict[str, Any]:
        """The member in a status section (its owner adds its own fields)."""
        return {
            "pid": self.pid,
            "pgid": self.pgid,
            "adopted": self.adopted,
            "started_at": self.started_at,
            "ready_s": self.ready_s,
            "log": str(self.log_path),
            "argv": self.argv,
        }

    def record(self) -> dict[str, Any]:
        """The record's fields besides the id (the spec names the id's key)."""
        return {
            "pid": self.pid,
            "pgid": self.pgid,
            "create_time": self.create_time,
            "start_ticks": self.start_ticks,
            "argv": self.argv,
            "log": str(self.log_path),
            "started_at": self.started_at,
            "daemon_pid": os.getpid(),
        }


M = TypeVar("M", bound=Member)


@dataclass(frozen=True)
class GroupSpec:
    """What differs between supervised programs at the process level."""

    name: str  # in messages and thread names: "engine", a part's ("front door")
    id_var: str  # the environment marker that proves a process ours
    id_key: str  # the id's key in the record ("engine_id", "cache_id", ...)
    record_path: Path  # the record in the state dir (engine.pid, a part's, ...)
    stop_signal: int = signal.SIGTERM  # what the leader gets first
    sigint_default: bool = False  # SIGINT's default disposition in the child (procs.spawn)
    restart: RestartPolicy | None = None  # None: the owner decides after an exit (on_exit)


@dataclass(frozen=True)
class Previous:
    """What the record a previous daemon left names (`SupervisedGroup.previous`).

    kind: "none" (no record), "unreadable" (`why` says; nothing is touched), "reaped" (a
    group spawned but never recorded: stopped, `stopped` lists it), "foreign" (not provably
    ours: left alone, the record removed), "ours" (the owner adopts or stops it)."""

    kind: str
    record: dict[str, Any] = field(default_factory=dict)
    why: str = ""
    stopped: tuple[tuple[int, procs.StopResult], ...] = ()

    @property
    def pgid(self) -> int:
        return int(self.record.get("pgid", self.record.get("pid", 0)))


@dataclass(frozen=True)
class Stopped:
    """How a stop went: the signals (procs.StopResult), the pids the group had, whether their
    GPU memory was released (and how that was told)."""

    result: procs.StopResult
    pids: list[int]
    released: bool
    how: str


class SupervisedGroup(Generic[M]):
    """See the module docstring. `grace_s` and `gpu_release_s` are read at each stop (a
    SIGHUP may change them). Hooks: `on_exit(member)` after any exit of a member (expected
    or not), `on_change()` after each state change, `restart_with()` at the end of BACKOFF."""

    def __init__(
        self,
        spec: GroupSpec,
        *,
        grace_s: Callable[[], float],
        gpu_release_s: Callable[[], float],
        say: Callable[..., None] | None = None,
    ) -> None:
        self.spec = spec
        self.grace_s = grace_s
        self.gpu_release_s = gpu_release_s
        self.say = say or (lambda msg, level=logging.INFO, **_: log.log(level, msg))
        self._lock = threading.RLock()
        self.state = GroupState.STOPPED
        self.member: M | None = None
        self.restarts = 0  # restarts after an unexpected exit (the policy's), since start-up
        self.backoff_s: float | None = None  # the last BACKOFF's wait
        self.ever_ran = False  # a member was spawned or kept after adoption
        self.shutting_down = threading.Event()
        self.on_exit: Callable[[M], None] = lambda m: None
        # held while an exit is marked and `on_exit` runs (the engine's: the controller's
        # lock, so whoever reads the state under it sees a death and its consequence together)
        self.exit_lock: Any = threading.RLock()
        self.on_change: Callable[[], None] = lambda: None
        self.restart_with: Callable[[], None] | None = None
        self._crashes = CrashWindow(spec.restart) if spec.restart is not None else None

    # ------------------------------------------------------------------ states
    def _move(
        self,
        m: M | None,
        new: GroupState,
        only_if: Callable[[GroupState], bool] | None = None,
    ) -> bool:
        """`new` for the current member `m` (when `only_if(state)`, if given). False, nothing
        done: `m` is no longer current, or it is being stopped and `new` is not part of the
        stop (an exit or a readiness seen meanwhile belongs to the stop). `on_change` is
        called after the lock is released: callers never hold it here."""
        with self._lock:
            if m is not self.member or (only_if is not None and not only_if(self.state)):
                return False
            stopping = new in (GroupState.STOPPING, GroupState.STOPPED)
            if m is not None and m.expected_exit and not stopping:
                return False
            check_transition(self.state, new)
            changed = self.state != new
            self.state = new
        if changed:
            self.on_change()
        return True

    def status(self) -> dict[str, Any]:
        """The group in a status section: its state, restarts, last backoff and member."""
        with self._lock:
            m = self.member
            out: dict[str, Any] = {
                "state": str(self.state),
                "restarts": self.restarts,
                "backoff_s": self.backoff_s,
            }
        return {**out, **(m.status() if m is not None else {})}

    # ------------------------------------------------------------------ the record
    def write_record(self, data: dict[str, Any]) -> None:
        with self._lock:
            atomic_write_json(self.spec.record_path, data)

    def record_of(self, m: M, **extra: Any) -> dict[str, Any]:
        return {self.spec.id_key: m.group_id, **m.record(), **extra}

    def clear_record(self) -> str | None:
        """Remove the record; why it could not be (None: removed or absent)."""
        with self._lock:
            try:
                self.spec.record_path.unlink()
            except FileNotFoundError:
                return None
            except OSError as exc:
                msg = f"cannot remove {self.spec.record_path} ({exc.strerror or exc})"
                log.warning("%s", msg)
                return msg
        return None

    # ------------------------------------------------------------------ start
    @staticmethod
    def new_id() -> str:
        return secrets.token_hex(8)

    def spawn(
        self,
        group_id: str,
        argv: Sequence[str],
        env: dict[str, str],
        log_path: Path,
        make: Callable[[subprocess.Popen[bytes]], M],
    ) -> M:
        """Start `argv` with exactly `env` (which carries `group_id` in `spec.id_var`) in its
        own session, its output in `log_path`; `make(proc)` builds the member. STARTING.
        Raises OSError when it cannot be started (FAILED)."""
        self._may_start()  # before anything runs: a spawn over a live member is a bug
        self.write_record({self.spec.id_key: group_id, "pending": True, "argv": list(argv)})
        try:
            proc = procs.spawn(argv, env, log_path, sigint_default=self.spec.sigint_default)
        except OSError:
            self._move(self.member, GroupState.FAILED)
            raise
        m = make(proc)
        if m.start_ticks is None:
            m.start_ticks = procs.start_ticks(proc.pid)
        with self._lock:
            self._may_start()
            self.member, self.state, self.ever_ran = m, GroupState.STARTING, True
        self.write_record(self.record_of(m))
        self.on_change()  # STARTING announced before the watch can see it exit (a crash at once)
        self._watch(m)
        return m

    def _may_start(self) -> None:
        """Raise unless a new member may start now: the table's STARTING, or a member that
        has exited while its exit is not settled yet (the new member settles it)."""
        with self._lock:
            if self.member is None or self.member.alive():
                check_transition(self.state, GroupState.STARTING)

    def wait_ready(
        self,
        m: M,
        check: Callable[[], bool | Failure],
        *,
        timeout_s: float,
        cancel: threading.Event,
        exit_failure: Callable[[], Failure],
        timeout_failure: Callable[[], Failure],
        cancelled: Failure,
        started: float | None = None,
        heartbeat: Callable[[float], None] | None = None,
        heartbeat_s: float = 10.0,
        poll_s: Callable[[], float] = lambda: 0.1,
    ) -> Failure | None:
        """None once `check()` is true (READY, `m.ready_s` set from `started`, default the
        spawn); else the failure: `check()`'s own, the exit's, the deadline's (FAILED), or
        `cancelled` (the state stays: the group keeps loading). `heartbeat(elapsed)` every
        `heartbeat_s`; between checks it waits `poll_s()` for news (`m.wake`)."""
        t0 = m.started_mono if started is None else started
        deadline = t0 + timeout_s
        # waited again (after a deadline passed): STARTING again
        self._move(m, GroupState.STARTING, lambda st: st == GroupState.FAILED and m.alive())
        last_beat = time.monotonic()
        while True:
            m.wake.clear()
            if cancel.is_set():
                return cancelled
            if m.exited.is_set():
                return self._fail(m, exit_failure())
            got = check()
            if isinstance(got, Failure):
                return self._fail(m, got)
            if got:
                if m.ready_s is None:
                    m.ready_s = round(time.monotonic() - t0, 3)
                self.mark_ready(m)
                return None
            now = time.monotonic()
            if now >= deadline:
                return self._fail(m, timeout_failure())
            if heartbeat is not None and now - last_beat >= heartbeat_s:
                heartbeat(now - t0)
                last_beat = now
            m.wake.wait(poll_s())

    def mark_ready(self, m: M) -> None:
        m.ready.set()
        if self._move(m, GroupState.READY) and self._crashes is not None:
            self._crashes.clear()

    def _fail(self, m: M, failure: Failure) -> Failure:
        # an exit the policy restarts stays BACKOFF
        self._move(m, GroupState.FAILED, lambda st: st != GroupState.BACKOFF)
        return failure

    # ------------------------------------------------------------------ exits and restarts
    def _watch(self, m: M) -> None:
        def run() -> None:
            code: int | None = None
            if m.proc is not None:
                code = m.proc.wait()
            else:
                with contextlib.suppress(psutil.Error):
                    psutil.Process(m.pid).wait()
            m.exit_code = code
            with self.exit_lock:
                m.exited.set()
                self.on_exit(m)
            m.wake.set()
            if not m.expected_exit and not self.shutting_down.is_set():
                self._exited(m)

        name = f"{self.spec.name.replace(' ', '-')}-{m.pid}"
        threading.Thread(target=run, name=name, daemon=True).start()

    def _exited(self, m: M) -> None:
        """An unexpected exit of `m`: BACKOFF then `restart_with()` when the policy allows,
        else FAILED."""
        with self._lock:
            if m is not self.member or m.expected_exit:
                return
            if self._crashes is None or self.restart_with is None:
                decision = None
            else:
                decision = self._crashes.record(time.monotonic())
        if decision is None or decision.give_up:
            if self._move(m, GroupState.FAILED) and decision is not None:
                self.say(f"{self.spec.name}: {decision.message}; not restarted", logging.WARNING)
                self._stop_leftovers(m)
            return
        self.backoff_s = decision.delay_s  # before the state: `on_change` may read it
        if not self._move(m, GroupState.BACKOFF):
            return
        self._stop_leftovers(m)
        with self._lock:
            self.restarts += 1
        self.say(
            f"{self.spec.name}: pid {m.pid} exited ({m.exit_code}); restarting it in "
            f"{decision.delay_s:g} s",
            logging.WARNING,
        )
        if self.shutting_down.wait(decision.delay_s):
            return
        with self._lock:
            if m is not self.member or self.state != GroupState.BACKOFF:
                return  # stopped or replaced meanwhile
        assert self.restart_with is not None
        self.restart_with()

    def _stop_leftovers(self, m: M) -> None:
        """What an exited leader left in its group (its children), stopped: the group is this
        daemon's own, and a leftover would hold what the next start needs. Only for a group
        that restarts itself (an engine's crash steps stop its TP workers themselves)."""
        left = procs.stop_group(m.pgid, self.grace_s(), sig=self.spec.stop_signal)
        if left.leftover:
            self.say(f"{self.spec.name}: pid(s) {left.leftover} of the exited group {m.pgid} "
                     "outlived SIGKILL", logging.WARNING)  # fmt: skip

    # ------------------------------------------------------------------ adoption
    def previous(self) -> Previous:
        """Read the record a previous daemon left and settle what can be settled here (see
        `Previous`)."""
        path = self.spec.record_path
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return Previous("none")
        except (OSError, ValueError) as exc:
            return Previous("unreadable", why=f"{path} is unreadable ({exc}); ignoring it "
                            "(nothing is killed)")  # fmt: skip
        if not isinstance(data, dict):
            return Previous("unreadable", why=f"{path} has no pid; ignoring it")
        group_id = data.get(self.spec.id_key)
        if data.get("pending"):
            if not group_id:
                return Previous("unreadable", data, f"{path} names no {self.spec.id_key}")
            stopped = tuple((pgid, self.stop_pgid(pgid)) for pgid in self._groups_of(group_id))
            self.clear_record()
            return Previous("reaped", data, stopped=stopped)
        if not isinstance(data.get("pid"), int):
            return Previous("unreadable", data, f"{path} has no pid; ignoring it")
        ours, why = procs.is_ours({**data, "engine_id": group_id}, var=self.spec.id_var)
        if not ours:
            self.clear_record()
            return Previous("foreign", data, why)
        return Previous("ours", data, why)

    def _groups_of(self, group_id: str) -> list[int]:
        """The process groups whose members carry `group_id` (a pending record's)."""
        var = self.spec.id_var
        return sorted(
            {p.pgid for p in procs.processes() if procs.engine_id_of(p.pid, var=var) == group_id}
        )

    def adopt(self, make: Callable[[], M]) -> M:
        """Follow the group of an "ours" record: `make()` builds the member (adopted). STARTING;
        its readiness is the owner's `wait_ready`."""
        m = make()
        m.adopted = True
        if m.start_ticks is None:  # proven ours: the live leader's start is the recorded one
            m.start_ticks = procs.start_ticks(m.pid)
        with self._lock:
            self._may_start()
            self.member, self.state, self.ever_ran = m, GroupState.STARTING, True
        self.on_change()  # before the watch, as spawn's
        self._watch(m)
        return m

    def hand_over(self, m: M, to: SupervisedGroup[M]) -> None:
        """`m`, READY here, becomes `to`'s member (READY) in place of the one `to` had, which
        `to` still stops by its handle; this group is left STOPPED, its record removed (a
        standby engine that now serves: the engine group's record names it)."""
        with self._lock, to._lock:
            if m is not self.member or self.state != GroupState.READY:
                raise IllegalGroupTransition(f"{self.spec.name}: hands over a READY member only")
            self.member, self.state = None, GroupState.STOPPED
            to.member, to.state, to.ever_ran = m, GroupState.READY, True
        self.clear_record()
        self.on_change()
        to.on_change()

    # ------------------------------------------------------------------ stop
    def stop(self, m: M, *, forget: bool = True) -> Stopped:
        """Stop `m`'s group (SIGCONT, `spec.stop_signal` to the leader, grace, SIGKILL) and
        wait for its GPU memory. The current member's stop ends STOPPED (no member), its record
        removed unless `forget` is false."""
        m.expected_exit = True
        self._move(m, GroupState.STOPPING)
        pids = [p.pid for p in procs.group_members(m.pgid)]
        res = procs.stop_group(m.pgid, self.grace_s(), proc=m.proc, sig=self.spec.stop_signal)
        released, how = procs.wait_gpu_release(pids, self.gpu_release_s())
        with self._lock:
            current = m is self.member
            if current:
                check_transition(self.state, GroupState.STOPPED)
                self.state, self.member = GroupState.STOPPED, None
                if forget:
                    self.clear_record()
        if current:
            self.on_change()
        return Stopped(res, pids, released, how)

    def stop_pgid(self, pgid: int) -> procs.StopResult:
        """Stop a group this daemon has no member for (a previous daemon's): same signals."""
        return procs.stop_group(pgid, self.grace_s(), sig=self.spec.stop_signal)

    def shutdown(self) -> None:
        """No restart from now on (a BACKOFF wait ends); the owner stops the member."""
        self.shutting_down.set()
