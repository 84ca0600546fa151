"""Engine processes: spawn in their own process group, find the group, stop it, wait for GPUs.

Only processes we started are ever signalled: the engine is spawned with
`start_new_session=True` (its pgid is its pid) and carries a random
`FASTVERIFY_ENGINE_ID` in its environment; `is_ours()` checks that marker (and the
recorded start time) before anything is killed, so a stale pid file that now names
somebody else's process is ignored, never acted on. Nothing here kills by name.
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


def spawn(
    argv: Sequence[str], env: dict[str, str], log_path: Path, cwd: str | None = None
) -> subprocess.Popen:
    """Start `argv` in a new session/process group with exactly `env`; stdout+stderr -> log_path.

    The engine writes its log file directly (not through a pipe to us), so it keeps
    running and logging if the daemon dies and a new daemon can adopt it.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab", buffering=0) as out:
        return subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
            close_fds=True,
        )


def create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and _alive(p):
                out.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return out


def engine_id_of(pid: int) -> str | None:
    """The FASTVERIFY_ENGINE_ID in /proc/PID/environ, None when absent or unreadable."""
    try:
        return psutil.Process(pid).environ().get(ENGINE_ID_VAR)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def is_ours(info: dict[str, Any]) -> tuple[bool, str]:
    """Decide whether the process group recorded in a pid file (`info`) is still our engine.

    Ours when some live member of the recorded group carries the recorded engine id in its
    environment; the leader additionally must have the recorded start time.
    """
    pid = int(info.get("pid", 0))
    pgid = int(info.get("pgid", pid))
    engine_id = info.get("engine_id")
    if pid <= 1 or pgid <= 1 or not engine_id:
        return False, "pid file lacks pid/pgid/engine_id"
    members = group_members(pgid)
    if not members:
        return False, f"no process is left in group {pgid}"
    for p in members:
        if engine_id_of(p.pid) != engine_id:
            continue
        if p.pid == pid:
            recorded = info.get("create_time")
            actual = create_time(pid)
            if recorded is not None and actual is not None and abs(actual - recorded) > 1.0:
                return False, f"pid {pid} was started at another time (not our engine)"
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


def stop_group(
    pgid: int, grace_s: float, *, proc: subprocess.Popen | None = None, kill_wait_s: float = 10.0
) -> StopResult:
    """SIGTERM the group, wait up to grace_s for it to be gone, then SIGKILL and wait again.

    `proc` (our Popen of the leader) is reaped along the way so it does not linger as a
    zombie. Returns which signal was needed and any PIDs still present at the end.
    """
    t0 = time.monotonic()
    if not group_members(pgid):
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.wait(timeout=0.1)
        return StopResult("none", 0.0, [])
    _send_group(pgid, signal.SIGTERM)
    used = "SIGTERM"
    if not _wait_gone(pgid, grace_s, proc):
        log.warning(
            "engine group %d still alive %.1f s after SIGTERM; sending SIGKILL", pgid, grace_s
        )
        _send_group(pgid, signal.SIGKILL)
        used = "SIGKILL"
        _wait_gone(pgid, kill_wait_s, proc)
    leftover = [p.pid for p in group_members(pgid)]
    return StopResult(used, time.monotonic() - t0, leftover)


def _wait_gone(pgid: int, timeout: float, proc: subprocess.Popen | None) -> bool:
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.poll()
        if not group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 1.5, 0.02)


def descendants(pid: int) -> list[psutil.Process]:
    """The process and all its live descendants (the server and its TP workers)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    return [p for p in procs if _alive(p)]


def wait_gpu_release(pids: Sequence[int], timeout_s: float) -> tuple[bool, str]:
    """Wait until none of `pids` holds GPU memory (NVML, when pynvml is importable).

    Returns (released, how). Without NVML there is nothing to ask: (True, "nvml unavailable").
    Bounded by timeout_s; only the given PIDs are considered, never other users' processes.
    """
    if not pids:
        return True, "no pids"
    try:
        import pynvml  # type: ignore[import-not-found]
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
