"""sd_notify from a real fastverifyd, observed on a real AF_UNIX datagram socket."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.harness import DaemonHarness


class NotifyListener:
    """Bind a datagram socket (path or abstract '@name') and collect every message."""

    def __init__(self, address: str):
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def fields(self) -> list[tuple[float, str]]:
        return [(t, f) for t, msg in self.messages for f in msg.split("\n")]

    def first(self, prefix: str) -> float | None:
        return next((t for t, f in self.fields() if f.startswith(prefix)), None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_sd_notify_ready_status_watchdog_extend_stopping(tmp_path: Path, abstract: bool) -> None:
    addr = (
        f"@fv-notify-{os.getpid()}-{time.monotonic_ns()}" if abstract else str(tmp_path / "n.sock")
    )
    listener = NotifyListener(addr)
    try:
        env = {"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "400000"}
        with DaemonHarness(tmp_path, env=env, metrics=False, sim_load_seconds=0.5) as d:
            d.wait_for(lambda: listener.first("READY=1"), 5, "READY=1")
            time.sleep(0.7)
            assert listener.first("EXTEND_TIMEOUT_USEC=") < listener.first("READY=1")
            statuses = [f for _, f in listener.fields() if f.startswith("STATUS=")]
            assert "STATUS=serving nccl-default/baseline (simulated)" in statuses
            assert any(f.startswith("STATUS=starting nccl-default/baseline") for f in statuses)
            dogs = [t for t, f in listener.fields() if f == "WATCHDOG=1"]
            assert len(dogs) >= 2, listener.messages
            os.kill(d.pid, signal.SIGHUP)
            d.wait_for(lambda: listener.first("RELOADING=1"), 5, "RELOADING=1")
            assert d.stop() == 0
        fields = [f for _, f in listener.fields()]
        assert "STOPPING=1" in fields
        assert fields.count("READY=1") == 2  # first READY, then after the reload
        assert fields.index("READY=1") < fields.index("RELOADING=1") < fields.index("STOPPING=1")
    finally:
        listener.close()
