"""The control API's doors: HTTP/1.0 + JSON over a Unix socket (optional TCP: TLS, tokens),
bound and served here; each request is handled by api_handler.Handler.

Paths are versioned (`/v1/...`; the contract: fastverify.api_models, docs/reference/api.md). The
Unix socket is created with mode 0660 and handed to group `fastverify` when that group exists.
TCP listens only when configured (off loopback only over TLS, client certificates when a CA
is given: tcpdoor.py) and then requires `Authorization: Bearer <token>` when a token file is
set (auth.py: named tokens, constant-time, per-identity backoff). Every request knows its
`Caller` (auth.py); state-changing ones are logged with it and it reaches the history as
`by`. Requests larger than MAX_BODY are refused (413); malformed JSON, wrong types, missing
fields, unknown paths and wrong methods get a 4xx JSON error that says what to send instead.
Operation requests can stream NDJSON events (`stream: true`).

Each door admits connections through a fastverify.admission.Gate: a connection has
REQUEST_DEADLINE_S for its whole request (the TLS handshake, the headers, the body, the
token), not a timeout per read; a peer (a uid on the Unix socket, an address on TCP) has at
most PENDING_PER_PEER requests still arriving (one more cuts its oldest that had
admission.EVICT_GRACE_S) and PER_PEER connections in all (streams and waiters included; one
more cuts its oldest pending one, or gets 503 when none is pending).
"""

from __future__ import annotations

import contextlib
import grp
import json
import logging
import os
import socket
import socketserver
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastverify import api_models as m
from fastverify.admission import REQUEST_DEADLINE_S, Buckets, Gate
from fastverify.daemon import tcpdoor
from fastverify.daemon.api_handler import MAX_BODY, Handler
from fastverify.daemon.auth import FAILURE_REASONS, Caller, Guard, unix_caller
from fastverify.daemon.facade import ControlFacade

if TYPE_CHECKING:
    from fastverify.config.fields import ApiConfig

log = logging.getLogger("fastverifyd.api")

__all__ = ["MAX_BODY", "ApiServer", "bind_tcp", "bind_unix", "open_tcp_door", "serve_in_thread",
           "stop"]  # fmt: skip

MAX_CONNECTIONS = 1024  # threads, all peers together
PER_PEER = 256  # connections of one peer (uid, address), streams and waiters included
PENDING_PER_PEER = 16  # requests of one peer still arriving
PENDING_TOTAL = 128  # requests still arriving, all peers together


class ApiServer(socketserver.ThreadingMixIn, socketserver.BaseServer):
    """Threaded HTTP server on an already-bound listening socket (Unix or TCP). A TCP one
    has a `guard` (auth.Guard) and, for TLS, an `ssl.SSLContext` (tcpdoor.py admits each
    connection in its own thread: a slow handshake never holds up the accept loop)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        sock: socket.socket,
        facade: ControlFacade,
        guard: Guard | None = None,
        tls: Any = None,
    ):
        self.socket = sock
        self.facade = facade
        self.guard = guard
        self.tls = tls
        self.unix = sock.family == socket.AF_UNIX
        self.closing = threading.Event()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.gate = Gate(deadline_s=REQUEST_DEADLINE_S, pending_per_peer=PENDING_PER_PEER,
                         pending_total=PENDING_TOTAL, per_peer=PER_PEER)  # fmt: skip
        self.records = Buckets(m.RECORD_RATE_PER_S, m.RECORD_BURST)  # per caller identity
        super().__init__(sock.getsockname(), Handler)

    def fileno(self) -> int:
        return self.socket.fileno()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = self.socket.accept()
        if self.unix:  # the peer's credentials, while the connection is fresh
            return conn, unix_caller(conn)
        return conn, Caller("tcp", addr=str(addr[0]), extra={"tls": self.tls is not None})

    def process_request(self, request: Any, client_address: Caller) -> None:
        # Bounded concurrency: followers and waiters hold a thread each.
        ticket = self.gate.enter(request, client_address.peer)
        if ticket is None:
            self._refuse(request, f"too many connections from {client_address.peer} "
                         f"(at most {PER_PEER}); close some and retry")  # fmt: skip
            return
        if not self.slots.acquire(blocking=False):
            self.gate.left(ticket)
            self._refuse(request, "too many concurrent API connections; retry")
            return
        client_address.ticket = ticket
        super().process_request(request, client_address)

    def _refuse(self, request: Any, why: str) -> None:
        with contextlib.suppress(OSError):
            request.sendall(
                b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n\r\n"
                + json.dumps({"error": why}).encode()
                + b"\n"
            )
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Caller) -> None:
        try:
            if not self.unix:
                request = tcpdoor.admit(self, request, client_address)
                if request is None:
                    return
            super().process_request_thread(request, client_address)
        finally:
            self.gate.left(client_address.ticket)
            self.slots.release()

    def server_close(self) -> None:
        self.closing.set()
        with contextlib.suppress(OSError):
            self.socket.close()

    def shutdown_request(self, request: Any) -> None:
        with contextlib.suppress(OSError):
            request.shutdown(socket.SHUT_WR)
        request.close()


def bind_unix(path: Path, group: str | None) -> socket.socket:
    """Bind the control socket (mode 0660, chgrp `group` when it exists); refuse when another
    daemon already answers on it, replace a stale socket file otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(0.5)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale: nobody listens
        else:
            raise RuntimeError(f"another fastverifyd is listening on {path}")
        finally:
            probe.close()
    # Bind under a temporary name and rename into place once listening, so the path only
    # ever names a socket that accepts connections.
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o117)
    try:
        sock.bind(str(tmp))
    finally:
        os.umask(old)
    os.chmod(tmp, 0o660)
    if group:
        # A number is a gid (the container gets the host group's gid, with no such group inside).
        try:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        except KeyError:
            gid = None
        if gid is not None:
            try:
                os.chown(tmp, -1, gid)
            except PermissionError as exc:
                log.warning("cannot chgrp %s to %s: %s", path, group, exc)
    sock.listen(socket.SOMAXCONN)  # bursts of clients must queue, not get EAGAIN
    os.replace(tmp, path)
    return sock


def bind_tcp(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(socket.SOMAXCONN)  # bursts of clients must queue, not get EAGAIN
    return sock


def open_tcp_door(
    api_cfg: ApiConfig, loaded: tuple[Any, Any], facade: ControlFacade, hub: Any = None
) -> ApiServer:
    """The TCP door's server, listening on `api.tcp_listen`; `loaded`: tcpdoor.load()'s
    (tokens, TLS context); refused attempts counted on `hub` (the exporter's, or None)."""
    tokens, tls = loaded
    guard = Guard(tokens, hub.api_auth.on_failure if hub is not None else None)
    if hub is not None:
        hub.api_auth.watch(FAILURE_REASONS, guard.backoff.sources)
    server = ApiServer(bind_tcp(api_cfg.tcp_listen), facade, guard, tls)
    how = "plaintext (loopback)" if tls is None else "TLS"
    if tls is not None and api_cfg.tls_client_ca:
        how += " with client certificates"
    names = f"bearer tokens {', '.join(tokens.names)}" if tokens else "no token"
    log.info("TCP control door on %s: %s, %s", api_cfg.tcp_listen, how, names)
    return server


def serve_in_thread(server: ApiServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    return t


def stop(server: ApiServer, timeout: float = 2.0) -> None:
    server.closing.set()
    done = threading.Event()

    def _shutdown() -> None:
        server.shutdown()
        done.set()

    threading.Thread(target=_shutdown, daemon=True).start()
    done.wait(timeout)
    server.server_close()
    time.sleep(0)
