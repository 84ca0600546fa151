"""A datagram socket that collects sd_notify messages, as systemd's would."""

from __future__ import annotations

import socket
import threading
import time


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
