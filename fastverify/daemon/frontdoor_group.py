"""The front door as fastverifyd's supervised process group, on `SupervisedGroup` (group.py):
started in its own session with a random `FASTVERIFY_FRONTDOOR_ID` in its environment and
`frontdoor.pid` in the state dir; ready when its control socket answers; adopted after a
killed fastverifyd when the record is ours and the socket answers (it keeps holding or
serving meanwhile: clients never see the daemon die); restarted by the group's policy when it
exits (1 s doubling to 30 s), holding or serving whatever engine serves then; stopped with
SIGTERM to its leader (it answers the held requests 503 first), SIGKILL to the group after
the grace. Only its own pids are ever signalled.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastverify.config import Config
from fastverify.daemon import procs
from fastverify.daemon.failures import Failure
from fastverify.daemon.group import GroupSpec, GroupState, Member, SupervisedGroup
from fastverify.daemon.restart import RestartPolicy
from fastverify.frontdoor import control

if TYPE_CHECKING:
    from fastverify.daemon.statestore import StateStore

ID_VAR = "FASTVERIFY_FRONTDOOR_ID"
PID_FILE = "frontdoor.pid"
SOCKET = "frontdoor.sock"
START_TIMEOUT_S = 30.0
RESTART = RestartPolicy(window_s=math.inf, backoff_s=(1.0, 30.0), burst=sys.maxsize)


class FrontDoorGroup:
    """See the module docstring. `cfg` is the engine-side config (layout.engine_side);
    `serving_port()` the port of the engine that serves now (None: none does)."""

    def __init__(
        self,
        cfg: Config,
        store: StateStore,
        say: Callable[..., None] | None = None,
        serving_port: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.serving_port = serving_port
        spec = GroupSpec("front door", ID_VAR, "door_id", Path(store.dir) / PID_FILE,
                         restart=RESTART)  # fmt: skip
        self.group: SupervisedGroup[Member] = SupervisedGroup(
            spec, grace_s=lambda: self.cfg.restart.stop_grace_s, gpu_release_s=lambda: 0.0,
            say=say,
        )  # fmt: skip
        self.group.restart_with = self._restart

    def _restart(self) -> None:
        self.spawn(*self._start_state())

    @property
    def socket(self) -> Path:
        return Path(self.store.dir) / SOCKET

    @property
    def pid(self) -> int | None:
        m = self.group.member
        return m.pid if m is not None else None

    @property
    def restarts(self) -> int:
        return self.group.restarts

    def _start_state(self) -> tuple[bool, int | None]:
        port = self.serving_port()
        return port is None, port

    def argv(self, hold: bool) -> list[str]:
        d, s = self.cfg.frontdoor, self.cfg.server
        argv = [
            sys.executable, "-m", "fastverify.frontdoor",
            "--listen", f"{s.public_host}:{s.public_port}",
            "--engine-host", s.host,
            "--control", str(self.socket),
            "--queue-size", str(d.queue_size),
            "--max-wait-s", str(d.max_wait_s),
            "--retry-after-s", str(d.retry_after_s),
            # inside the daemon's own grace before its SIGKILL
            "--stop-grace-s", str(max(0.0, self.cfg.restart.stop_grace_s - 1.0)),
        ]  # fmt: skip
        return argv + (["--hold"] if hold else [])

    def _answers(self) -> bool:
        try:
            control.call(self.socket, "status", wait_s=1.0)
        except (OSError, ValueError):
            return False
        return True

    def _ready(self, m: Member, timeout_s: float) -> Failure | None:
        log = m.log_path
        return self.group.wait_ready(
            m,
            self._answers,
            timeout_s=timeout_s,
            cancel=self.group.shutting_down,
            exit_failure=lambda: Failure("frontdoor_exited", f"the front door exited; see {log}"),
            timeout_failure=lambda: Failure(
                "frontdoor_timeout", f"the front door's control socket did not answer in "
                f"{timeout_s:g} s; see {log}"),
            cancelled=Failure("cancelled", "fastverifyd is stopping"),
        )  # fmt: skip

    def spawn(self, hold: bool, serve_port: int | None = None) -> str:
        """Start the front door (holding, or serving `serve_port`); wait until it answers."""
        door_id = self.group.new_id()
        argv = self.argv(hold) + ([f"--engine-port={serve_port}"] if serve_port else [])
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
        env[ID_VAR] = door_id
        with contextlib.suppress(OSError):
            self.socket.unlink()
        log_path = Path(self.store.dir) / "frontdoor.log"
        try:
            m = self.group.spawn(
                door_id, argv, env, log_path,
                lambda proc: Member(door_id, proc.pid, proc.pid, procs.create_time(proc.pid),
                                    argv, log_path, proc=proc),
            )  # fmt: skip
        except OSError as exc:
            return f"front door: cannot start it ({exc})"
        failure = self._ready(m, START_TIMEOUT_S)
        if failure is not None:
            return f"front door: {failure.message}"
        port = self.serving_port()  # an engine that became READY while this one started
        if port is not None and port != serve_port:
            with contextlib.suppress(OSError, ValueError):
                self.call("serve", port=port)
        where = f"{self.cfg.server.public_host}:{self.cfg.server.public_port}"
        return f"front door on {where} (pid {m.pid})"

    def adopt(self) -> str | None:
        """After a killed fastverifyd: follow the group it left when it is ours, built from
        this configuration and answering, else stop it (ours) or leave it alone (not ours).
        A message, None when none was left."""
        prev = self.group.previous()
        if prev.kind == "none":
            return None
        if prev.kind == "reaped":
            return f"front door: stopped {[p for p, _ in prev.stopped]} (never recorded)"
        if prev.kind != "ours":
            return f"{PID_FILE}: {prev.why}; leaving it alone"
        data = prev.record
        if _fixed(data.get("argv") or []) != _fixed(self.argv(False)):
            self.group.stop_pgid(prev.pgid)
            self.group.clear_record()
            return f"front door: stopped group {prev.pgid}: the configuration changed"
        m = self.group.adopt(
            lambda: Member(data["door_id"], int(data["pid"]), prev.pgid, data.get("create_time"),
                           list(data["argv"]), Path(data.get("log", "")))
        )  # fmt: skip
        if self._ready(m, 5.0) is not None:
            self.group.stop(m)
            return f"front door: stopped group {prev.pgid}: its control socket did not answer"
        return f"front door: adopting the running front door (pid {m.pid})"

    def failed(self) -> bool:
        """Down with no restart of the group's own to come (a start that failed)."""
        return self.group.state in (GroupState.FAILED, GroupState.STOPPED)

    def alive(self) -> bool:
        m = self.group.member
        return m is not None and m.alive()

    def call(self, op: str, wait_s: float = 5.0, **fields: Any) -> dict[str, Any]:
        return control.call(self.socket, op, wait_s=wait_s, **fields)

    def stop(self) -> None:
        self.group.shutdown()
        m = self.group.member
        if m is not None:
            self.group.stop(m)
        self.group.clear_record()

    def stop_leftover(self) -> str | None:
        """With the front door off: stop the one an earlier run left (ours by its id), which
        would hold the engine's public port."""
        prev = self.group.previous()
        if prev.kind != "ours":
            return None
        self.group.stop_pgid(prev.pgid)
        self.group.clear_record()
        return f"front door: stopped the one an earlier run left (pid {prev.record.get('pid')})"

    def status(self) -> dict[str, Any]:
        return self.group.status()


def _fixed(argv: list[str]) -> list[str]:
    """The part of a front door's argv that the configuration decides (not its start state)."""
    return [a for a in argv if a != "--hold" and not a.startswith("--engine-port=")]
