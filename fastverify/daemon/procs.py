"""Engine processes: spawn in their own process group, find the group, stop it, wait for GPUs.

Only processes we started are ever signalled: the engine is spawned with
`start_new_session=True` (its pgid is its pid) and carries a random
`FASTVERIFY_ENGINE_ID` in its environment; `is_ours()` checks that marker (and the
recorded start time, in clock ticks since boot) before anything is killed, so a stale pid
file that now names somebody else's process is ignored, never acted on. Nothing here kills by name.

Process facts come from a proc root (`proc_root`, default /proc) read directly: stat
(pid, ppid, pgid, state, start time), environ and /proc/stat's btime. Tests point it at a
checked-in tree (tests/fixtures/proc/) instead of spawning processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger("fastverifyd.procs")

ENGINE_ID_VAR = "FASTVERIFY_ENGINE_ID"
KEEP_ENVIRON_VAR = "SPT_NOENV"  # setproctitle: leave /proc/PID/environ as it was
LOG_MODE = 0o640  # engine logs: readable by root and the daemon's group, never by others


def spawn(
    argv: Sequence[str],
    env: dict[str, str],
    log_path: Path,
    cwd: str | None = None,
    *,
    sigint_default: bool = False,
) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session/process group with exactly `env`; stdout+stderr -> log_path.

    The engine writes its log file directly (not through a pipe to us), so it keeps
    running and logging if the daemon dies and a new daemon can adopt it.
    `sigint_default`: SIGINT's default disposition in the child (a part's launcher that
    stops on KeyboardInterrupt, which a SIGINT ignored by inheritance never raises).
    """
    log_path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    # an engine's log quotes its argv and environment-derived lines: owner and group only
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, LOG_MODE)
    os.fchmod(fd, LOG_MODE)
    with open(fd, "ab", buffering=0) as out:
        return subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
            close_fds=True,
            preexec_fn=_sigint_default if sigint_default else None,
        )


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


PROC = Path("/proc")


@dataclass(frozen=True)
class ProcInfo:
    """One process as /proc/PID/stat describes it (a snapshot; `environ()` reads now)."""

    pid: int
    ppid: int
    pgid: int
    state: str  # R, S, D, Z (zombie), X (dead), ...
    comm: str
    starttime: int  # clock ticks after boot
    proc_root: Path = PROC

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X", "x")

    def name(self) -> str:
        """The process title: comm, which the kernel cuts at 15 characters, completed from
        the command line when that starts with it (SGLang's `sglang::scheduler`, whose comm
        reads `sglang::schedul`)."""
        try:
            head = (self.proc_root / str(self.pid) / "cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            return self.comm
        title = head.decode(errors="replace").strip()
        return title if len(self.comm) == 15 and title.startswith(self.comm) else self.comm

    def environ(self) -> dict[str, str]:
        """/proc/PID/environ; psutil.NoSuchProcess when it is gone, AccessDenied when not
        ours to read (verify.py handles psutil's exceptions)."""
        return environ(self.pid, self.proc_root)


def read_stat(pid: int, proc_root: Path = PROC) -> ProcInfo | None:
    """Parse /proc/PID/stat (comm may hold spaces and parentheses), None when gone."""
    try:
        raw = (proc_root / str(pid) / "stat").read_bytes().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
        return None
    head, _, tail = raw.rpartition(")")
    comm = head.partition("(")[2]
    fields = tail.split()
    try:
        # fields after comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt
        # cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime
        return ProcInfo(
            pid, int(fields[1]), int(fields[2]), fields[0], comm, int(fields[19]), proc_root
        )
    except (IndexError, ValueError):
        return None


def processes(proc_root: Path = PROC) -> list[ProcInfo]:
    """Every live (non-zombie) process under `proc_root`."""
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    out = []
    for pid in sorted(int(n) for n in names if n.isdigit()):
        if (info := read_stat(pid, proc_root)) is not None and info.alive:
            out.append(info)
    return out


def environ(pid: int, proc_root: Path = PROC) -> dict[str, str]:
    """/proc/PID/environ as a dict (see ProcInfo.environ for the exceptions)."""
    try:
        raw = (proc_root / str(pid) / "environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise psutil.NoSuchProcess(pid) from exc
    except PermissionError as exc:
        raise psutil.AccessDenied(pid) from exc
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.decode("utf-8", "surrogateescape").partition("=")
        if sep and key:
            out[key] = value
    return out


def boot_time(proc_root: Path = PROC) -> float | None:
    """`btime` of /proc/stat (seconds since the epoch)."""
    try:
        for line in (proc_root / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def create_time(pid: int, proc_root: Path = PROC) -> float | None:
    """When `pid` started (epoch seconds, as psutil reports it), None when gone. Moves with
    the wall clock (btime does): for display only; identity is `start_ticks`."""
    info = read_stat(pid, proc_root)
    btime = boot_time(proc_root)
    if info is None or btime is None:
        return None
    return btime + info.starttime / os.sysconf("SC_CLK_TCK")


def start_ticks(pid: int, proc_root: Path = PROC) -> int | None:
    """When `pid` started, in clock ticks since boot (/proc/PID/stat field 22): what no
    wall-clock step (NTP, an operator's `date -s`) moves. None when gone."""
    info = read_stat(pid, proc_root)
    return None if info is None else info.starttime


def group_members(pgid: int, proc_root: Path = PROC) -> list[ProcInfo]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    return [p for p in processes(proc_root) if p.pgid == pgid]


def engine_id_of(pid: int, proc_root: Path = PROC, var: str = ENGINE_ID_VAR) -> str | None:
    """The FASTVERIFY_ENGINE_ID (or `var`) in /proc/PID/environ, None when absent or
    unreadable."""
    try:
        return environ(pid, proc_root).get(var)
    except (psutil.Error, OSError):
        return None


def is_ours(
    info: dict[str, Any], proc_root: Path = PROC, var: str = ENGINE_ID_VAR
) -> tuple[bool, str]:
    """Decide whether the process group recorded in a pid file (`info`) is still our engine
    (or, with `var` = a part's group marker, that group).

    Ours when some live member of the recorded group carries the recorded engine id in its
    environment; the leader additionally must have the recorded start time in clock ticks
    since boot (`start_ticks`), which a wall-clock step does not move. A record without it
    (written by an older daemon) is judged by the engine id alone: its `create_time` is
    epoch seconds, which move with the clock.
    """
    pid = int(info.get("pid", 0))
    pgid = int(info.get("pgid", pid))
    engine_id = info.get("engine_id")
    if pid <= 1 or pgid <= 1 or not engine_id:
        return False, "pid file lacks pid/pgid/engine_id"
    members = group_members(pgid, proc_root)
    if not members:
        return False, f"no process is left in group {pgid}"
    leader = next((p for p in members if p.pid == pid), None)
    recorded = info.get("start_ticks")
    if leader is not None and isinstance(recorded, int) and leader.starttime != recorded:
        return False, f"pid {pid} was started at another time (not our engine)"
    if any(engine_id_of(p.pid, proc_root, var) == engine_id for p in members):
        return True, f"group {pgid}: {len(members)} process(es) carry our engine id"
    return False, f"group {pgid} exists but none of its processes carries engine id {engine_id}"


@dataclass
class StopResult:
    signal_used: str  # "none" | "SIGTERM" | "SIGKILL"
    duration_s: float
    leftover: list[int]


def _send_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _leader_alive(pgid: int, proc_root: Path) -> bool:
    return any(p.pid == pgid for p in group_members(pgid, proc_root))


def stop_group(
    pgid: int,
    grace_s: float,
    *,
    proc: subprocess.Popen[bytes] | None = None,
    kill_wait_s: float = 10.0,
    proc_root: Path = PROC,
    sig: int = signal.SIGTERM,
) -> StopResult:
    """SIGCONT the group (a stopped process acts on nothing else), then SIGTERM the group's
    leader (the server: SGLang stops its own schedulers and
    detokenizer on SIGTERM; a SIGTERM sent to them as well reads to SGLang as a crashed
    child, and it then waits 5 s for crash diagnostics), or the whole group when the leader
    is gone; wait up to grace_s for the group to be gone, then SIGKILL it and wait again.

    `proc` (our Popen of the leader) is reaped along the way so it does not linger as a
    zombie. The group gets SIGCONT first (a stopped group hears nothing else before the
    grace ends). Returns which signal was needed and any PIDs still present at the end. `sig`:
    what the leader gets first (SIGINT for a part's launcher whose KeyboardInterrupt path
    stops its ranks).
    """
    t0 = time.monotonic()
    if not group_members(pgid, proc_root):
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.wait(timeout=0.1)
        return StopResult("none", 0.0, [])
    used = "SIGTERM"
    # A stopped (SIGSTOP, SIGTSTP) process keeps a handled signal pending until it runs
    # again: without SIGCONT a stopped group would wait the whole grace for its SIGKILL.
    _send_group(pgid, signal.SIGCONT)
    leader_signalled = _leader_alive(pgid, proc_root)
    if leader_signalled:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pgid, sig)
        used = signal.Signals(sig).name
    else:
        _send_group(pgid, signal.SIGTERM)
    if not _wait_gone(pgid, grace_s, proc, proc_root, orphans_term=leader_signalled):
        log.warning(
            "engine group %d still alive %.1f s after SIGTERM; sending SIGKILL", pgid, grace_s
        )
        _send_group(pgid, signal.SIGKILL)
        used = "SIGKILL"
        _wait_gone(pgid, kill_wait_s, proc, proc_root)
    leftover = [p.pid for p in group_members(pgid, proc_root)]
    if proc is not None and not leftover:  # a zombie leader counts as gone: reap it
        with contextlib.suppress(Exception):
            proc.wait(timeout=kill_wait_s)
    return StopResult(used, time.monotonic() - t0, leftover)


def _wait_gone(
    pgid: int,
    timeout: float,
    proc: subprocess.Popen[bytes] | None,
    proc_root: Path = PROC,
    *,
    orphans_term: bool = False,
) -> bool:
    """Wait up to `timeout` for group `pgid` to be empty. `orphans_term`: only the leader was
    signalled; should it die leaving members behind (a leader killed by the signal before it
    installed its handler, or one that crashed on the way out), nothing is left to stop them,
    so the group gets SIGTERM once rather than waiting out the grace."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.poll()
        members = group_members(pgid, proc_root)
        if not members:
            return True
        if orphans_term and not any(p.pid == pgid for p in members):
            _send_group(pgid, signal.SIGTERM)
            orphans_term = False
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 1.5, 0.02)


def descendants(pid: int, proc_root: Path = PROC) -> list[ProcInfo]:
    """The process and all its live descendants (the server and its TP workers)."""
    table = processes(proc_root)
    if not any(p.pid == pid for p in table):
        return []
    children: dict[int, list[ProcInfo]] = {}
    for p in table:
        children.setdefault(p.ppid, []).append(p)
    out = [p for p in table if p.pid == pid]
    i = 0
    while i < len(out):
        out.extend(sorted(children.get(out[i].pid, []), key=lambda p: p.pid))
        i += 1
    return out


def wait_gpu_release(pids: Sequence[int], timeout_s: float) -> tuple[bool, str]:
    """Wait until none of `pids` holds GPU memory (NVML, when pynvml is importable).

    Returns (released, how). Without NVML there is nothing to ask: (True, "nvml unavailable").
    Bounded by timeout_s; only the given PIDs are considered, never other users' processes.
    """
    if not pids:
        return True, "no pids"
    try:
        import pynvml
    except ImportError:
        return True, "nvml unavailable (pynvml not installed)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return True, f"nvml unavailable ({exc})"
    wanted = set(pids)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            holding: set[int] = set()
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                for getter in (
                    pynvml.nvmlDeviceGetComputeRunningProcesses,
                    pynvml.nvmlDeviceGetGraphicsRunningProcesses,
                ):
                    with contextlib.suppress(Exception):
                        holding.update(p.pid for p in getter(handle) if p.pid in wanted)
            if not holding:
                return True, "released"
            if time.monotonic() >= deadline:
                return (
                    False,
                    f"pids {sorted(holding)} still hold GPU memory after {timeout_s:.0f} s",
                )
            time.sleep(0.2)
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def nvml_bytes(pids: list[int]) -> int | None:
    """GPU memory `pids` hold, by NVML (None: no NVML here, or none held)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    wanted, total = set(pids), 0
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            with contextlib.suppress(Exception):
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if p.pid in wanted and p.usedGpuMemory:
                        total += int(p.usedGpuMemory)
        return total or None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
