"""Serve /metrics (Prometheus text format 0.0.4) on a TCP listen address, fast.

`MetricsServer(hub, "127.0.0.1:9464").start()` binds (port 0 = any free port; see `.port`),
serves in daemon threads, `.stop()` closes the socket and joins. Default bind: loopback.

Speed comes from two things: the exposition is rendered from the hub's prepared state by
the per-source collectors and cached per (hub version, wall-clock second), so concurrent scrapes
of an unchanged hub cost a dictionary lookup; and the HTTP layer is fastverify.httpserver, a
minimal HTTP/1.1 keep-alive loop over raw sockets (one thread per connection) instead of
wsgiref, with its TLS, basic auth, rate limit, connection caps and request deadline (`web=`:
exporters.webconfig, exporter-toolkit's `--web-config-file`; the other keyword options:
httpserver.HttpServer's). Gzip is served when the scraper asks for it (Prometheus does),
compressed once per render.

Paths: `/metrics`, `/healthz` (200 "ok"), `/` (a pointer to /metrics); others 404.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Mapping
from typing import Any

from fastverify.exporters.hub import MetricsHub
from fastverify.httpserver import HttpServer, Reply, parse_listen

__all__ = ["CONTENT_TYPE", "MetricsServer", "Renderer", "parse_listen"]

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


class Renderer:
    """Exposition bytes for a hub, cached per (hub.version, whole second of wall clock)."""

    def __init__(self, hub: MetricsHub) -> None:
        from prometheus_client import CollectorRegistry

        from fastverify.exporters import collectors

        self.hub = hub
        self.registry = CollectorRegistry()
        collectors.register(self.registry, hub)
        self._lock = threading.Lock()
        self._key: tuple[int, int] | None = None
        self._plain = b""
        self._gzip: bytes | None = None

    def render(self, want_gzip: bool = False) -> bytes:
        from prometheus_client.exposition import generate_latest

        key = (self.hub.version, int(self.hub.now()))
        with self._lock:
            if key != self._key:
                self._plain = generate_latest(self.registry)
                self._gzip = None
                self._key = key
            if not want_gzip:
                return self._plain
            if self._gzip is None:
                self._gzip = gzip.compress(self._plain, compresslevel=1)
            return self._gzip


class MetricsServer(HttpServer):
    """The exporter's listener: /metrics on the raw-socket server (see module docstring)."""

    def __init__(
        self,
        hub: MetricsHub,
        listen: str = "127.0.0.1:9464",
        *,
        renderer: Callable[[bool], bytes] | None = None,
        **options: Any,
    ) -> None:
        self._render = renderer or Renderer(hub).render
        routes = {b"/metrics": self._metrics, b"/healthz": _healthz, b"/": _index}
        super().__init__(listen, routes, not_found=_not_found, name="/metrics",
                         flag="--metrics-listen / --listen", **options)  # fmt: skip

    @property
    def url(self) -> str:
        return f"{self.base_url}/metrics"

    def _metrics(self, _path: bytes, headers: Mapping[bytes, bytes]) -> Reply:
        gz = b"gzip" in headers.get(b"accept-encoding", b"")
        try:
            body = self._render(gz)
        except Exception as exc:  # a bug in a collector must not kill the server
            return 500, b"text/plain", f"error rendering metrics: {exc!r}\n".encode(), b""
        return 200, CONTENT_TYPE, body, b"Content-Encoding: gzip\r\n" if gz else b""


def _healthz(_path: bytes, _headers: Mapping[bytes, bytes]) -> Reply:
    return 200, b"text/plain", b"ok\n", b""


def _index(_path: bytes, _headers: Mapping[bytes, bytes]) -> Reply:
    return 200, b"text/plain", b"fastverify exporter: see /metrics\n", b""


def _not_found(_path: bytes, _headers: Mapping[bytes, bytes]) -> Reply:
    return 404, b"text/plain", b"not found (try /metrics)\n", b""
