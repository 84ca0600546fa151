"""Tensor-parallel worker processes of the sim engine (TP ranks 1..N-1).

Owns forking, lifetime and the tiny command channel. Workers are forked before the
main process starts any thread, inherit its environment unchanged (the daemon checks
/proc/PID/environ of every engine process), and stay in the engine's process group
(no setsid/setpgid: the daemon signals the whole group). A worker exits when:
- its parent dies: PR_SET_PDEATHSIG=SIGTERM via prctl, plus an EOF on its command
  socket and a parent-pid check right after fork (closes the fork/death race);
- it receives SIGTERM (default action) - the main process sends it on shutdown.

With `exec_argv` (the engine uses it) each worker execs itself right after the fork
(`python -m fastverify.sim.worker_main`), as SGLang spawns its schedulers, so its
/proc/PID/environ holds the variables the main process set after it started (SGLang's
own NCCL rules, `fastverify.sglang.envrules`).

Each worker blocks on its socket (no polling, ~0% CPU). Commands are JSON lines:
  {"cmd": "log", "msg": str}                  log `msg` with this rank's TP prefix
  {"cmd": "nccl_init", "tuning": [...]}       print this rank's NCCL init lines
  {"cmd": "trace", "path": str, ...}          write this rank's profiler trace, reply
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send `sig` to this process when its parent thread exits."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    except (OSError, AttributeError):
        pass  # not Linux: the EOF on the command socket still ends the worker


@dataclass
class Worker:
    rank: int
    pid: int
    sock: socket.socket


Handler = Callable[[int, dict[str, Any]], dict[str, Any] | None]


def _child(rank: int, sock: socket.socket, parent_pid: int, handler: Handler) -> None:
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:  # parent died before prctl took effect
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the group; parent decides
    reader = sock.makefile("r", encoding="utf-8")
    for line in reader:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        try:
            reply = handler(rank, msg)
        except Exception as exc:  # keep the worker alive; report to the parent
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            print(
                f"[TP{rank}] sim worker: command {msg.get('cmd')!r} failed: {reply['error']}",
                file=sys.stderr,
                flush=True,
            )
        if msg.get("reply"):
            payload = json.dumps(reply or {"ok": True}) + "\n"
            try:
                sock.sendall(payload.encode())
            except OSError:
                break
    os._exit(0)


class WorkerPool:
    """The forked TP workers, seen from the main process (TP0)."""

    def __init__(self, workers: list[Worker]):
        self.workers = workers
        self._lock = threading.Lock()

    @classmethod
    def fork(
        cls, count: int, handler: Handler, exec_argv: Sequence[str] | None = None
    ) -> WorkerPool:
        """Fork `count` workers (ranks 1..count). Call before starting any thread.
        `exec_argv`: each child execs `[*exec_argv, rank, fd, parent_pid]` right after the
        fork, as SGLang spawns its schedulers: its /proc/PID/environ is then the main
        process's environment as it is now (with what the engine set), not as it was
        exec'd; the program runs `_child` with the inherited socket (`worker_main`)."""
        parent_pid = os.getpid()
        workers: list[Worker] = []
        for i in range(count):
            rank = i + 1
            parent_end, child_end = socket.socketpair()
            pid = os.fork()
            if pid == 0:  # child
                parent_end.close()
                for w in workers:
                    w.sock.close()
                try:
                    if exec_argv is not None:
                        os.set_inheritable(child_end.fileno(), True)
                        args = [*exec_argv, str(rank), str(child_end.fileno()), str(parent_pid)]
                        os.execv(args[0], args)
                    _child(rank, child_end, parent_pid, handler)
                finally:
                    os._exit(0)
            child_end.close()
            workers.append(Worker(rank, pid, parent_end))
        return cls(workers)

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def broadcast(self, msg: dict[str, Any]) -> None:
        data = (json.dumps(msg) + "\n").encode()
        with self._lock:
            for w in self.workers:
                with contextlib.suppress(OSError):
                    w.sock.sendall(data)

    def request_each(
        self, make_msg: Callable[[int], dict[str, Any]], timeout: float
    ) -> dict[int, dict[str, Any]]:
        """Send each worker its own message and collect one reply each (rank -> reply)."""
        replies: dict[int, dict[str, Any]] = {}
        with self._lock:
            for w in self.workers:
                msg = dict(make_msg(w.rank), reply=True)
                try:
                    w.sock.sendall((json.dumps(msg) + "\n").encode())
                except OSError as exc:
                    replies[w.rank] = {"ok": False, "error": str(exc)}
            for w in self.workers:
                if w.rank in replies:
                    continue
                w.sock.settimeout(timeout)
                buf = b""
                try:
                    while not buf.endswith(b"\n"):
                        chunk = w.sock.recv(65536)
                        if not chunk:
                            break
                        buf += chunk
                    replies[w.rank] = json.loads(buf) if buf else {"ok": False, "error": "EOF"}
                except (OSError, ValueError) as exc:
                    replies[w.rank] = {"ok": False, "error": str(exc)}
                finally:
                    w.sock.settimeout(None)
        return replies

    def terminate(self, grace: float = 3.0) -> None:
        """SIGTERM every worker, wait up to `grace` s, SIGKILL the rest, reap all."""
        import time

        for w in self.workers:
            with contextlib.suppress(OSError):
                w.sock.close()
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        alive = {w.pid for w in self.workers}
        while alive and time.monotonic() < deadline:
            for pid in list(alive):
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done = pid
                if done:
                    alive.discard(pid)
            if alive:
                time.sleep(0.02)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
