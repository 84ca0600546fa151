"""The front door as fastverifyd's supervised process group: started in its own session with
a random `FASTVERIFY_FRONTDOOR_ID` in its environment and `frontdoor.pid` in the state dir;
adopted after a killed fastverifyd when a live member of the recorded group carries that id
(it keeps holding or serving meanwhile: clients never see the daemon die); restarted when it
exits; stopped with SIGTERM to its leader, SIGKILL to the group after the grace. Only its
own pids are ever signalled.

Kept to one small class (`FrontDoorGroup`: spawn / adopt / alive / stop) so it can move onto
a shared supervised-process-group class without touching the switch steps.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from fastverify.daemon import procs
from fastverify.frontdoor import control

ID_VAR = "FASTVERIFY_FRONTDOOR_ID"
PID_FILE = "frontdoor.pid"
SOCKET = "frontdoor.sock"
START_TIMEOUT_S = 30.0


class FrontDoorGroup:
    """See the module docstring. `cfg` is the engine-side config (layout.engine_side)."""

    def __init__(self, cfg: Any, store: Any) -> None:
        self.cfg = cfg
        self.store = store
        self.pid: int | None = None
        self.pgid: int | None = None
        self.door_id: str | None = None
        self.proc: Any = None
        self.adopted = False
        self.restarts = 0

    @property
    def socket(self) -> Path:
        return Path(self.store.dir) / SOCKET

    def argv(self, hold: bool) -> list[str]:
        d, s = self.cfg.daemon, self.cfg.server
        argv = [
            sys.executable, "-m", "fastverify.frontdoor",
            "--listen", f"{s.public_host}:{s.public_port}",
            "--engine-host", s.host,
            "--control", str(self.socket),
            "--queue-size", str(d.frontdoor_queue_size),
            "--max-wait-s", str(d.frontdoor_max_wait_s),
            "--retry-after-s", str(d.frontdoor_retry_after_s),
            # inside the daemon's own grace before its SIGKILL
            "--stop-grace-s", str(max(0.0, d.stop_grace_s - 1.0)),
        ]  # fmt: skip
        return argv + (["--hold"] if hold else [])

    def spawn(self, *, hold: bool, serve_port: int | None = None) -> str:
        """Start the front door (holding, or serving `serve_port`); wait for its socket."""
        door_id = secrets.token_hex(8)
        argv = self.argv(hold) + ([f"--engine-port={serve_port}"] if serve_port else [])
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
        env[ID_VAR] = door_id
        with contextlib.suppress(OSError):
            self.socket.unlink()
        log_path = Path(self.store.dir) / "frontdoor.log"
        proc = procs.spawn(argv, env, log_path)
        self.proc, self.pid, self.pgid, self.door_id = proc, proc.pid, proc.pid, door_id
        self.adopted = False
        self.store.save_json(
            PID_FILE,
            {"pid": proc.pid, "pgid": proc.pid, "engine_id": door_id, "argv": argv,
             "create_time": procs.create_time(proc.pid), "log": str(log_path)},
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"front door exited at start ({proc.returncode}); see {log_path}"
            with contextlib.suppress(OSError, ValueError):
                control.call(self.socket, "status", wait_s=1.0)
                where = f"{self.cfg.server.public_host}:{self.cfg.server.public_port}"
                return f"front door on {where} (pid {proc.pid})"
            time.sleep(0.05)
        return f"front door did not open its control socket in {START_TIMEOUT_S:g} s"

    def adopt(self) -> str | None:
        """After a killed fastverifyd: follow the group it left when it is ours and answers,
        else stop it (ours) or leave it alone (not ours). A message, None when none was left."""
        data = self.store.load_json(PID_FILE)
        if not data:
            return None
        ours, why = procs.is_ours(data, var=ID_VAR)
        if not ours:
            with contextlib.suppress(OSError):
                (Path(self.store.dir) / PID_FILE).unlink()
            return f"{PID_FILE} names pid {data.get('pid')}: {why}; leaving it alone"
        pgid = int(data.get("pgid", data["pid"]))
        if _fixed(data.get("argv") or []) != _fixed(self.argv(False)):
            procs.stop_group(pgid, self.cfg.daemon.stop_grace_s)
            return f"front door: stopped group {pgid}: the configuration changed"
        try:
            control.call(self.socket, "status", wait_s=2.0)
        except (OSError, ValueError) as exc:
            procs.stop_group(pgid, self.cfg.daemon.stop_grace_s)
            return f"front door: stopped group {pgid}: its control socket did not answer ({exc})"
        self.pid, self.pgid, self.door_id = int(data["pid"]), pgid, data["engine_id"]
        self.proc, self.adopted = None, True
        return f"front door: adopting the running front door (pid {self.pid})"

    def stop_leftover(self) -> str | None:
        """With the front door off: stop the one an earlier run left (ours by its id), which
        would hold the engine's public port."""
        data = self.store.load_json(PID_FILE)
        if not data:
            return None
        ours, _ = procs.is_ours(data, var=ID_VAR)
        if ours:
            procs.stop_group(int(data.get("pgid", data["pid"])), self.cfg.daemon.stop_grace_s)
        with contextlib.suppress(OSError):
            (Path(self.store.dir) / PID_FILE).unlink()
        return (
            f"front door: stopped the one an earlier run left (pid {data.get('pid')})"
            if ours
            else None
        )

    def alive(self) -> bool:
        if self.pid is None:
            return False
        if self.proc is not None:
            return self.proc.poll() is None
        info = procs.read_stat(self.pid)
        return info is not None and info.alive

    def call(self, op: str, wait_s: float = 5.0, **fields: Any) -> dict[str, Any]:
        return control.call(self.socket, op, wait_s=wait_s, **fields)

    def stop(self) -> None:
        if self.pgid is not None:
            procs.stop_group(self.pgid, self.cfg.daemon.stop_grace_s, proc=self.proc)
        with contextlib.suppress(OSError):
            (Path(self.store.dir) / PID_FILE).unlink()
        self.pid = self.pgid = self.proc = None


def _fixed(argv: list[str]) -> list[str]:
    """The part of a front door's argv that the configuration decides (not its start state)."""
    return [a for a in argv if a != "--hold" and not a.startswith("--engine-port=")]
