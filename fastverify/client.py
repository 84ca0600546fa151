"""Client of the daemon's control API: HTTP + JSON over a Unix socket (or TCP + token).

The CLI talks to the daemon only through this module. It speaks the little HTTP it needs
straight over the socket: `http.client` alone (email parser, ssl) costs ~30 ms of import,
half of `fastverifyctl status`'s start-up budget.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastverify import paths


class DaemonUnavailable(ConnectionError):
    """The control socket does not exist or nobody answers on it."""


class ApiError(RuntimeError):
    """The daemon answered with an HTTP error; `status` and the decoded JSON `body` are kept."""

    def __init__(self, status: int, body: dict[str, Any]):
        self.status = status
        self.body = body
        super().__init__(body.get("error") or body.get("message") or f"HTTP {status}")


class _Response:
    """One HTTP response read straight off the socket (the daemon speaks HTTP/1.0: the body is
    Content-Length delimited, or runs until the connection closes for streams)."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._file = sock.makefile("rb")
        status_line = self._file.readline(65537).decode("latin-1")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ConnectionError(f"not an HTTP response from the daemon: {status_line[:80]!r}")
        self.status = int(parts[1])
        self.headers: dict[str, str] = {}
        while (line := self._file.readline(65537)) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            self.headers[name.strip().lower()] = value.strip()
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            raise ConnectionError("unexpected chunked response from the daemon")
        length = self.headers.get("content-length")
        self._left = int(length) if length and length.isdigit() else None

    def read(self) -> bytes:
        return self._file.read() if self._left is None else self._file.read(self._left)

    def __iter__(self) -> Iterator[bytes]:
        if self._left is not None:
            yield from self.read().splitlines()
            return
        yield from self._file

    def close(self) -> None:
        self._file.close()
        self._sock.close()


def _connect_unix(path: str, timeout: float | None) -> socket.socket:
    # A Unix socket with a timeout is non-blocking: a full accept queue answers EAGAIN at
    # once instead of waiting. Retry within the timeout, as a blocking connect would wait.
    deadline = time.monotonic() + (timeout if timeout is not None else 30.0)
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            return sock
        except BlockingIOError:
            sock.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.005)
        except OSError:
            sock.close()
            raise


class ControlClient:
    """`ControlClient(socket_path).get("/v1/status")` -> dict; raises DaemonUnavailable/ApiError.

    TCP: `ControlClient(tcp="127.0.0.1:7070", token="...")` sends `Authorization: Bearer`.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        tcp: str | None = None,
        token: str | None = None,
        timeout: float | None = 30.0,
    ):
        self.socket_path = str(socket_path or paths.socket_path())
        self.tcp = tcp
        self.token = token
        self.timeout = timeout

    def _connect(self, timeout: float | None) -> socket.socket:
        if self.tcp:
            host, _, port = self.tcp.rpartition(":")
            return socket.create_connection((host, int(port)), timeout=timeout)
        return _connect_unix(self.socket_path, timeout)

    def _send(self, method: str, path: str, body: Any, timeout: float | None) -> _Response:
        payload = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {path} HTTP/1.1", "Host: localhost", "Connection: close",
                "Accept: application/json", f"Content-Length: {len(payload)}"]  # fmt: skip
        if body is not None:
            head.append("Content-Type: application/json")
        if self.token:
            head.append(f"Authorization: Bearer {self.token}")
        try:
            sock = self._connect(timeout)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            where = self.tcp or self.socket_path
            raise DaemonUnavailable(
                f"fastverifyd is not reachable at {where} ({exc.strerror or exc}); "
                "is it running? (start it with `fastverifyd`, or pass --socket)"
            ) from None
        except PermissionError:
            raise DaemonUnavailable(
                f"permission denied on {self.socket_path}: join the 'fastverify' group or use sudo"
            ) from None
        try:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
            return _Response(sock)
        except BaseException:
            sock.close()
            raise

    def request(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        resp = self._send(method, path, body, timeout or self.timeout)
        try:
            raw = resp.read()
        finally:
            resp.close()
        data = json.loads(raw) if raw else {}
        if resp.status >= 400:
            raise ApiError(resp.status, data if isinstance(data, dict) else {"error": str(data)})
        return data

    def stream(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """Yield one dict per NDJSON line of a streaming response (operation events)."""
        resp = self._send(method, path, body, timeout)
        try:
            if resp.status >= 400:
                raw = resp.read()
                data = json.loads(raw) if raw else {}
                raise ApiError(
                    resp.status, data if isinstance(data, dict) else {"error": str(data)}
                )
            for line in resp:
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            resp.close()

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, body, **kw)

    def cancel(self) -> dict[str, Any] | None:
        """Cancel the switch in flight (POST /v1/cancel): `{"result": "cancelled",
        "operation": {...}}` once the daemon accepted it, None when nothing was in flight;
        the previous profile is put back by the daemon (see the operation's result)."""
        try:
            return self.post("/v1/cancel", {})
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise


def try_status(
    socket_path: str | os.PathLike[str] | None = None, timeout: float = 0.5
) -> dict[str, Any] | None:
    """The daemon's /v1/status, or None when no daemon answers quickly (for `profile list`)."""
    if not Path(str(socket_path or paths.socket_path())).exists():
        return None
    try:
        return ControlClient(socket_path, timeout=timeout).get("/v1/status")
    except (DaemonUnavailable, ApiError, OSError, ValueError):
        return None
