"""The one HTTP client of a running SGLang server (daemon, exporter, bench use it).

Endpoints (0.5.23 `srt/entrypoints/http_server.py`): `GET /server_info` (the deprecated
`/get_server_info` logs a WARNING on every call: used only when `/server_info` is 404, for
older servers), `GET /health`, `POST /start_profile` (errors come back as HTTP 500 with the
message as the body), `POST /stop_profile`, `POST /generate`, `GET /metrics`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

SERVER_INFO = "/server_info"
SERVER_INFO_DEPRECATED = "/get_server_info"
HEALTH = "/health"
HEALTH_GENERATE = "/health_generate"
START_PROFILE = "/start_profile"
STOP_PROFILE = "/stop_profile"
GENERATE = "/generate"
METRICS = "/metrics"


class EngineHTTPError(RuntimeError):
    """The server answered with an error status; `status` and the body's `message`."""

    def __init__(self, path: str, status: int, message: str):
        super().__init__(f"{path} answered HTTP {status}: {message}")
        self.path, self.status, self.message = path, status, message


def request(
    url: str, path: str, body: dict[str, Any] | None = None, timeout: float = 10.0
) -> tuple[int, bytes]:
    """(status, body bytes) of GET (no body) or POST (JSON body); HTTP errors are returned,
    connection errors raise OSError."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url.rstrip("/") + path, data=data, method="POST" if data else "GET"
    )
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def server_info(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """`/server_info`, or `/get_server_info` on servers that lack it (404)."""
    status, raw = request(url, SERVER_INFO, timeout=timeout)
    path = SERVER_INFO
    if status == 404:
        status, raw = request(url, SERVER_INFO_DEPRECATED, timeout=timeout)
        path = SERVER_INFO_DEPRECATED
    if status != 200:
        raise EngineHTTPError(path, status, _message(raw))
    return json.loads(raw)


def start_profile(url: str, body: dict[str, Any], timeout: float = 120.0) -> tuple[int, str]:
    """POST /start_profile; (status, message). 0.5.23 reports errors as HTTP 500."""
    status, raw = request(url, START_PROFILE, body, timeout=timeout)
    return status, _message(raw)


def _message(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(obj, dict):
        for key in ("message", "error", "detail"):
            if obj.get(key):
                return str(obj[key])[:500]
    return text[:500]
