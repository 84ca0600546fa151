"""sd_notify(3) without libsystemd: datagrams to $NOTIFY_SOCKET.

`Notifier.from_env()` reads NOTIFY_SOCKET (a filesystem path, or an abstract name
written with a leading '@') and WATCHDOG_USEC/WATCHDOG_PID. Every method is a no-op
when the daemon does not run under a notify-type service, so callers never check.
Sends are best-effort: a failure is logged once and never raised (systemd going
away must not take the supervisor down).
"""

from __future__ import annotations

import logging
import os
import socket
import threading

log = logging.getLogger("fastverifyd.notify")


class Notifier:
    def __init__(self, address: str | None, watchdog_usec: int | None = None):
        self.address = address
        self.watchdog_usec = watchdog_usec
        self.ready_sent = False
        self._lock = threading.Lock()
        self._warned = False
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        wd: int | None = None
        usec = env.get("WATCHDOG_USEC", "")
        wpid = env.get("WATCHDOG_PID", "")
        if usec.isdigit() and int(usec) > 0 and (not wpid or wpid == str(os.getpid())):
            wd = int(usec)
        return cls(address, wd)

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    @property
    def watchdog_interval_s(self) -> float | None:
        """Half the watchdog timeout (the interval sd_watchdog_enabled(3) recommends)."""
        return self.watchdog_usec / 2e6 if self.watchdog_usec else None

    def send(self, *fields: str) -> bool:
        """Send `KEY=VALUE` fields in one datagram; True when it was sent."""
        if not self.address:
            return False
        payload = "\n".join(fields).encode()
        addr = self.address
        if addr.startswith("@"):
            addr = "\0" + addr[1:]
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(
                        socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                    )
                self._sock.sendto(payload, addr)
                return True
            except OSError as exc:
                if not self._warned:
                    log.warning("sd_notify to %s failed: %s", self.address, exc)
                    self._warned = True
                return False

    def ready(self, status: str | None = None) -> None:
        fields = ["READY=1"]
        if status:
            fields.append(f"STATUS={status}")
        if self.send(*fields) or not self.address:
            self.ready_sent = True

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")

    def watchdog(self) -> None:
        if self.watchdog_usec:
            self.send("WATCHDOG=1")

    def extend_timeout(self, seconds: float) -> None:
        self.send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1e6)}")

    def stopping(self, status: str | None = None) -> None:
        self.send("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def reloading(self) -> None:
        import time

        # MONOTONIC_USEC lets systemd >= 253 order the reload (harmless for older ones).
        self.send(
            "RELOADING=1", f"MONOTONIC_USEC={int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)}"
        )

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
