"""Notifier datagrams on real sockets, and its no-op behaviour without systemd."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from fastverify.daemon.notify import Notifier


def _recv(sock: socket.socket) -> str:
    sock.settimeout(2)
    return sock.recv(4096).decode()


def test_path_socket(tmp_path: Path) -> None:
    addr = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(addr)
        n = Notifier.from_env({"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "3000000"})
        assert n.watchdog_interval_s == 1.5
        n.ready("serving ring-ll/baseline 82.4 tok/s")
        assert _recv(s) == "READY=1\nSTATUS=serving ring-ll/baseline 82.4 tok/s"
        n.watchdog()
        assert _recv(s) == "WATCHDOG=1"
        n.extend_timeout(30)
        assert _recv(s) == "EXTEND_TIMEOUT_USEC=30000000"
        n.stopping()
        assert _recv(s) == "STOPPING=1"
        n.reloading()
        assert _recv(s).startswith("RELOADING=1\nMONOTONIC_USEC=")
        n.close()


def test_abstract_socket() -> None:
    name = f"@fv-unit-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind("\0" + name[1:])
        Notifier.from_env({"NOTIFY_SOCKET": name}).status("starting")
        assert _recv(s) == "STATUS=starting"


def test_without_systemd_everything_is_a_noop() -> None:
    n = Notifier.from_env({})
    assert not n.enabled and n.watchdog_interval_s is None
    n.ready()
    n.watchdog()
    assert n.send("X=1") is False


def test_watchdog_for_another_pid_is_ignored_and_dead_socket_does_not_raise(tmp_path: Path) -> None:
    n = Notifier.from_env(
        {"NOTIFY_SOCKET": str(tmp_path / "gone"), "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"}
    )
    assert n.watchdog_usec is None
    assert n.send("READY=1") is False  # nobody listens: logged once, never raised
