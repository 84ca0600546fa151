"""The one small HTTP/1.1 server of fastverify's GET-only listeners: the exporter's /metrics
(exporters/http.py) and the daemon's health probes (daemon/health.py), each on its own
address, each with its own route table.

`HttpServer("127.0.0.1:9464", routes, not_found=..., name="/metrics").start()` binds (port 0
= any free port; see `.port`), serves in daemon threads, `.stop()` closes the socket and
joins. A route is `handler(path, headers) -> (status, content type, body, extra header
lines)`; `headers` maps lower-case names to lower-case values. GET and HEAD only (others:
405), no request bodies (400). It is a minimal keep-alive loop over raw sockets (one thread
per connection), 59x the throughput of the standard library's server on /metrics
(benchmarks/results/exporter.json).

`web=` (exporters.webconfig, exporter-toolkit's `--web-config-file`): TLS (a handshake per
connection in its own thread; a failed one is closed and logged; a plain HTTP request on
the TLS port gets a 400 that says to use https, as Go's servers answer it), client
certificates and their SANs, basic auth on every path (401 + `WWW-Authenticate: Basic`),
extra response headers and a rate limit (429).
At most `max_connections` (256) connections at once (more get 503 and are closed); an idle
keep-alive connection is closed after `idle_timeout_s` (60 s).

Slow peers (fastverify.admission.Gate, as Go's http.Server's ReadHeaderTimeout and
TLS handshake deadline guard node_exporter): each request, from its first byte (the TLS
handshake included) to its last header, has `request_deadline_s` (10 s) in all, not a
timeout per read; one address has at most 16 requests still arriving (one more cuts its
oldest that had half a second), 128 of all addresses, and 64 connections in all. A kept-alive
connection idling between requests counts as one still arriving (its deadline: the idle
timeout), so idle connections never keep a newcomer out. Basic auth is checked once the
request has arrived, within that deadline, so an unauthenticated peer never holds a slot
for longer. Standard library only.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any, Self

from fastverify.admission import REQUEST_DEADLINE_S, Gate, Ticket

log = logging.getLogger("fastverify.http")

_MAX_HEADER = 16384
Reply = tuple[int, bytes, bytes, bytes]  # status, content type, body, extra header lines
Route = Callable[[bytes, Mapping[bytes, bytes]], Reply]


def parse_listen(listen: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` or `PORT` -> (host, port); IPv6 as `[::1]:9464`."""
    listen = listen.strip()
    if not listen:
        raise ValueError("empty listen address (expected HOST:PORT)")
    host, sep, port = listen.rpartition(":")
    if not sep:
        host, port = "", listen
    host = host.strip("[]") or default_host
    try:
        num = int(port)
    except ValueError:
        raise ValueError(f"bad listen address {listen!r}: port {port!r} is not a number") from None
    if not 0 <= num <= 65535:
        raise ValueError(f"bad listen address {listen!r}: port out of range")
    return host, num


class HttpServer:
    """A small threaded HTTP/1.1 server for GET routes (see module docstring)."""

    def __init__(self, listen: str, routes: Mapping[bytes, Route], *, not_found: Route,
                 name: str, flag: str, web: Any = None, max_connections: int = 256,
                 idle_timeout_s: float = 60.0, request_deadline_s: float = REQUEST_DEADLINE_S,
                 per_peer: int = 64) -> None:  # fmt: skip
        self.host, self._requested_port = parse_listen(listen)
        self.routes, self.not_found = dict(routes), not_found
        self.name, self.flag = name, flag  # in logs and errors: what it serves, how to move it
        self.web = web  # webconfig.WebConfig or None
        self._headers = b"".join(
            f"{k}: {v}\r\n".encode("latin-1") for k, v in (web.headers if web else {}).items()
        )
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.gate = Gate(deadline_s=request_deadline_s, pending_per_peer=16, pending_total=128,
                         per_peer=per_peer)  # fmt: skip
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self.port = self._requested_port

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self.web is not None and self.web.tls is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    def start(self) -> Self:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self._requested_port))
        except OSError as exc:
            sock.close()
            raise OSError(
                exc.errno,
                f"cannot listen on {self.host}:{self._requested_port} for {self.name}: "
                f"{exc.strerror} (pick another {self.flag} address)",
            ) from None
        sock.listen(256)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(
            target=self._accept_loop, name=f"fastverify-http-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        with self._conns_lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, addr = self._sock.accept()
            except OSError:
                return
            ticket = self.gate.enter(conn, str(addr[0]))
            with self._conns_lock:
                full = ticket is None or len(self._conns) >= self.max_connections
                if not full:
                    self._conns.add(conn)
            if full:  # a thread per connection, so the number of connections is capped
                if ticket is not None:
                    self.gate.left(ticket)
                if self.web is None or self.web.tls is None:
                    with contextlib.suppress(OSError):
                        conn.sendall(response(503, b"text/plain", b"too many connections\n", False))
                conn.close()
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn, ticket), daemon=True).start()

    def _tls(self, conn: socket.socket) -> Any:
        """The TLS side of `conn` (None: refused, and closed after the alert went out; a
        plain HTTP request gets a 400 that says to use https, as Go's servers answer it)."""
        import ssl

        first = conn.recv(1, socket.MSG_PEEK)
        if first and first != b"\x16":  # not a TLS handshake record: plain HTTP (or junk)
            log.warning("%s: a plain HTTP request on the TLS port; answered 400", self.name)
            body = (
                f"Client sent an HTTP request to an HTTPS server: this {self.name} port speaks "
                f"TLS only (its web config); scrape {self.base_url}{self.name} "
                "(Prometheus: scheme: https)\n"
            ).encode()
            with contextlib.suppress(OSError):
                conn.sendall(response(400, b"text/plain", body, False))
            return None
        tls = self.web.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        try:
            tls.do_handshake()
        except (ssl.SSLError, OSError) as exc:
            why = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or exc
            log.warning("%s: refused a TLS connection: %s", self.name, why)
            with contextlib.suppress(OSError):
                tls.shutdown(socket.SHUT_WR)  # the alert first; a reset would drop it
                tls.settimeout(2.0)
                while tls.recv(65536):
                    pass
            return None
        if not self.web.sans_ok(tls.getpeercert()):
            log.warning("%s: refused a client certificate without an allowed SAN", self.name)
            return None
        return tls

    def _serve(self, conn: socket.socket, ticket: Ticket) -> None:
        buf = b""
        try:
            conn.settimeout(self.idle_timeout_s)
            if self.web is not None and self.web.tls is not None:
                tls = self._tls(conn)
                if tls is None:
                    return
                with self._conns_lock:  # the same connection, now its TLS socket
                    self._conns.discard(conn)
                    self._conns.add(tls)
                conn = tls
            idle = False  # between two requests of a kept-alive connection
            while not self._stopping.is_set():
                if not buf:
                    buf = conn.recv(65536)
                    if not buf:
                        return
                if idle:  # its next request began: the request deadline from now
                    idle = False
                    self.gate.again(ticket, conn)
                end = buf.find(b"\r\n\r\n")
                while end < 0:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                    if len(buf) > _MAX_HEADER:
                        conn.sendall(response(431, b"text/plain", b"headers too large\n", False))
                        return
                    end = buf.find(b"\r\n\r\n")
                if not self.gate.admitted(ticket):
                    return  # past its deadline, or evicted: the gate cut it
                head, buf = buf[:end], buf[end + 4 :]
                keep_alive = self._handle(conn, head)
                if not keep_alive:
                    return
                # pending again: idle until its next request (evictable meanwhile), or
                # that request's deadline when it came pipelined
                idle = not buf
                self.gate.again(ticket, conn, self.idle_timeout_s if idle else None)
        except OSError:
            return
        finally:
            self.gate.left(ticket)
            with self._conns_lock:
                self._conns.discard(conn)
            conn.close()

    def _handle(self, conn: socket.socket, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")

        def send(status: int, ctype: bytes, body: bytes, keep: bool, extra: bytes = b"",
                 head_only: bool = False) -> None:  # fmt: skip
            conn.sendall(response(status, ctype, body, keep, extra=self._headers + extra,
                                  head_only=head_only))  # fmt: skip

        if len(parts) != 3:
            send(400, b"text/plain", b"bad request\n", False)
            return False
        method, target, version = parts
        headers, authorization = {}, ""
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip().lower()
            if k.strip().lower() == b"authorization":  # base64: case matters
                authorization = v.strip().decode("latin-1")
        conn_hdr = headers.get(b"connection", b"")
        keep = (version == b"HTTP/1.1" and conn_hdr != b"close") or conn_hdr == b"keep-alive"
        if self.web is not None:
            if not self.web.allow_request():
                send(429, b"text/plain", b"too many requests\n", keep)
                return keep
            if not self.web.check_user(authorization):
                send(401, b"text/plain", b"unauthorized\n", keep,
                     extra=b"WWW-Authenticate: Basic\r\n")  # fmt: skip
                return keep
        if b"content-length" in headers and headers[b"content-length"] != b"0":
            send(400, b"text/plain", b"request bodies are not accepted\n", False)
            return False
        if method not in (b"GET", b"HEAD"):
            send(405, b"text/plain", b"method not allowed\n", keep, extra=b"Allow: GET, HEAD\r\n")
            return keep
        path = target.split(b"?", 1)[0]
        route = self.routes.get(path, self.not_found)
        try:
            status, ctype, body, extra = route(path, headers)
        except Exception as exc:  # a bug in a route must not kill the server
            log.exception("%s: %s failed", self.name, path.decode("latin-1"))
            status, ctype, body, extra = 500, b"text/plain", f"error: {exc!r}\n".encode(), b""
        send(status, ctype, body, keep, extra=extra, head_only=method == b"HEAD")
        return keep


_REASONS = {
    503: b"Service Unavailable",
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    429: b"Too Many Requests",
    404: b"Not Found",
    405: b"Method Not Allowed",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
}


def response(
    status: int,
    ctype: bytes,
    body: bytes,
    keep: bool,
    *,
    extra: bytes = b"",
    head_only: bool = False,
) -> bytes:
    """One HTTP/1.1 response's bytes (only its head for HEAD)."""
    head = (
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%sConnection: %s\r\n\r\n"
        % (status, _REASONS[status], ctype, len(body), extra, b"keep-alive" if keep else b"close")
    )
    return head if head_only else head + body
