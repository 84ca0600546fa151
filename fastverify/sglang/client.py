"""The one HTTP client of a running SGLang server (daemon, exporter, bench use it).

Endpoints (0.5.23 `srt/entrypoints/http_server.py`): `GET /server_info` (the deprecated
`/get_server_info` logs a WARNING on every call: used only when `/server_info` is 404, for
older servers), `GET /health`, `POST /start_profile` (errors come back as HTTP 500 with the
message as the body), `POST /stop_profile`, `POST /generate`, `GET /metrics`.

Requests go straight to the server (never through an `http_proxy` from the environment: the
engine is local). HTTP error statuses are returned to the caller; connection failures and
malformed answers raise `OSError`. The bench's streaming `/generate` load is not here (it
runs on httpx's async client).
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from typing import Any

SERVER_INFO = "/server_info"
SERVER_INFO_DEPRECATED = "/get_server_info"
HEALTH = "/health"
HEALTH_GENERATE = "/health_generate"
MODEL_INFO = "/model_info"
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
    url: str,
    path: str,
    body: dict[str, Any] | None = None,
    timeout: float = 10.0,
    *,
    sent: threading.Event | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """(status, body bytes) of GET (no body) or POST (JSON body) to `url` + `path`.

    HTTP error statuses are returned; connection errors raise OSError, a URL that is not
    http(s) raises ValueError. `sent` is set once the request is written (before the
    answer), for callers that wait on side effects rather than on the reply."""
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url}: only http(s) URLs are supported")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    hdrs = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    try:
        conn.request("POST" if data is not None else "GET", parts.path.rstrip("/") + path,
                     body=data, headers=hdrs)  # fmt: skip
        if sent is not None:
            sent.set()
        resp = conn.getresponse()
        return resp.status, resp.read()
    except http.client.HTTPException as exc:  # a broken answer: report it like a dropped one
        raise ConnectionError(f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def server_info(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """`/server_info`, or `/get_server_info` on servers that lack it (404)."""
    status, raw = request(url, SERVER_INFO, timeout=timeout)
    path = SERVER_INFO
    if status == 404:
        status, raw = request(url, SERVER_INFO_DEPRECATED, timeout=timeout)
        path = SERVER_INFO_DEPRECATED
    if status != 200:
        raise EngineHTTPError(path, status, _message(raw))
    info = json.loads(raw)
    if not isinstance(info, dict):
        raise EngineHTTPError(path, status, f"not a JSON object: {_message(raw)}")
    return info


def health(url: str, path: str = HEALTH, timeout: float = 10.0) -> int:
    """GET the health endpoint (`path`, e.g. an engine's own); its HTTP status."""
    status, _ = request(url, path, timeout=timeout)
    return status


def start_profile(
    url: str, body: dict[str, Any], timeout: float = 120.0, *, sent: threading.Event | None = None
) -> tuple[int, str]:
    """POST /start_profile; (status, message). 0.5.23 reports errors as HTTP 500."""
    status, raw = request(url, START_PROFILE, body, timeout=timeout, sent=sent)
    return status, _message(raw)


def stop_profile(url: str, timeout: float = 30.0) -> tuple[int, str]:
    """POST /stop_profile; (status, message). An error status when nothing was profiling."""
    status, raw = request(url, STOP_PROFILE, {}, timeout=timeout)
    return status, _message(raw)


def metrics_text(url: str, timeout: float = 2.0) -> str:
    """GET /metrics (`--enable-metrics`) as Prometheus text; EngineHTTPError on a non-200."""
    status, raw = request(url, METRICS, timeout=timeout, headers={"Accept": "text/plain"})
    if status != 200:
        raise EngineHTTPError(METRICS, status, _message(raw))
    return raw.decode("utf-8", "replace")


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
