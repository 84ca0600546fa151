"""sd_notify from a real fastverifyd, observed on a real AF_UNIX datagram socket."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.harness import DaemonHarness
from tests.support.notify import NotifyListener


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
