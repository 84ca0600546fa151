"""Client of the daemon's control API: HTTP/1.1 + JSON over a Unix socket (or TCP + token).

The CLI talks to the daemon only through this module. It is stdlib-only so that
`fastverifyctl status` starts fast.
"""

from __future__ import annotations

import http.client
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


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        # A Unix socket with a timeout is non-blocking: a full accept queue answers EAGAIN at
        # once instead of waiting. Retry within the timeout, as a blocking connect would wait.
        deadline = time.monotonic() + (self.timeout if self.timeout is not None else 30.0)
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self._path)
            except BlockingIOError:
                sock.close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)
                continue
            except OSError:
                sock.close()
                raise
            self.sock = sock
            return


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

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.tcp:
            host, _, port = self.tcp.rpartition(":")
            return http.client.HTTPConnection(host, int(port), timeout=timeout)
        return _UnixConnection(self.socket_path, timeout)

    def _send(
        self, method: str, path: str, body: Any, timeout: float | None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        conn = self._connection(timeout)
        try:
            conn.request(method, path, body=payload, headers=headers)
            return conn, conn.getresponse()
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            conn.close()
            where = self.tcp or self.socket_path
            raise DaemonUnavailable(
                f"fastverifyd is not reachable at {where} ({exc.strerror or exc}); "
                "is it running? (start it with `fastverifyd`, or pass --socket)"
            ) from None
        except PermissionError:
            conn.close()
            raise DaemonUnavailable(
                f"permission denied on {self.socket_path}: join the 'fastverify' group or use sudo"
            ) from None

    def request(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        conn, resp = self._send(method, path, body, timeout or self.timeout)
        try:
            raw = resp.read()
        finally:
            conn.close()
        data = json.loads(raw) if raw else {}
        if resp.status >= 400:
            raise ApiError(resp.status, data if isinstance(data, dict) else {"error": str(data)})
        return data

    def stream(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """Yield one dict per NDJSON line of a streaming response (operation events)."""
        conn, resp = self._send(method, path, body, timeout)
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
            conn.close()

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, body, **kw)


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
