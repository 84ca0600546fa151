"""The control API's TCP door: what a TCP connection goes through before any HTTP is read.

On a TLS door (`api.tls_cert`/`tls_key`), in the connection's own thread:
1. a first byte that is not a TLS handshake record is plaintext HTTP sent to a TLS port:
   it gets a plain HTTP 400 that says how to connect (counted `plaintext`), as Go's
   net/http answers "Client sent an HTTP request to an HTTPS server";
2. the TLS handshake, within the request deadline (below): the client's certificate is required and
   verified against `api.tls_client_ca` when one is set; a failure (none sent, another
   CA's, expired) is logged with the source and OpenSSL's reason and counted `tls`;
3. the certificate's subject becomes the caller's identity.
Backoff and tokens are checked per request (api_handler.Handler), on either door, so that an
identity backing off is told so (HTTP 429) rather than cut off mid-handshake. A refused
handshake or plaintext proves no identity: it is counted, never backed off (auth.py), so a
peer without a certificate cannot make one with a certificate wait. The handshake runs
within the connection's request deadline (fastverify.admission: one deadline for the
handshake, the request and its token, not a timeout per read). A plaintext door
(loopback only: fastverify.config refuses anything else) passes the connection through.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
from typing import TYPE_CHECKING, Any

from fastverify.credentials import subject_text
from fastverify.daemon.auth import Caller

if TYPE_CHECKING:
    from fastverify.config.fields import ApiConfig

log = logging.getLogger("fastverifyd.api")

HANDSHAKE_TIMEOUT_S = 10.0  # per read; the request deadline bounds the whole handshake
DRAIN_S, DRAIN_BYTES = 2.0, 1 << 20  # a refused client's leftovers read before closing
TLS_RECORD_HANDSHAKE = b"\x16"


def _plaintext_answer() -> bytes:
    body = json.dumps({
        "error": "this fastverifyd port speaks TLS: connect with TLS, e.g. fastverifyctl "
        "--host tcp://HOST:PORT --tls-ca CA.pem [--tls-cert CERT.pem --tls-key KEY.pem]",
        "reason": "tls_required",
    }).encode() + b"\n"  # fmt: skip
    head = (
        "HTTP/1.0 400 Bad Request\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _close(conn: socket.socket) -> None:
    """Close after what was sent (an answer, a TLS alert) reaches the client: FIN first,
    then read what the client had sent until it closes too (bounded), since closing with
    unread bytes sends a reset, and a reset makes the client's kernel drop the answer."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(DRAIN_S)
        left = DRAIN_BYTES
        while left > 0 and (chunk := conn.recv(min(65536, left))):
            left -= len(chunk)
    conn.close()


def _why(exc: BaseException) -> str:
    verify = getattr(exc, "verify_message", None)
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
    return f"{reason}: {verify}" if verify else str(reason)


def admit(server: Any, conn: socket.socket, caller: Caller) -> Any:
    """The connection to serve (TLS-wrapped on a TLS door), or None when it was refused and
    closed. `server`: the api.ApiServer (its `guard` and `tls` context)."""
    if server.tls is None:
        return conn
    guard, source = server.guard, caller.addr
    conn.settimeout(HANDSHAKE_TIMEOUT_S)
    try:
        first = conn.recv(1, socket.MSG_PEEK)
    except OSError:
        _close(conn)
        return None
    if not first:
        _close(conn)
        return None
    if first != TLS_RECORD_HANDSHAKE:
        guard.counted("plaintext")
        log.warning("refused a plaintext connection from %s on the TLS port", source)
        with contextlib.suppress(OSError):
            conn.sendall(_plaintext_answer())
        _close(conn)
        return None
    # the handshake apart from the wrapping: a failed one then leaves a socket to close
    # gently (wrap_socket's own handshake closes the descriptor at once, and the reset that
    # follows drops the TLS alert that tells the client why)
    tls = server.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
    try:
        tls.do_handshake()
    except (ssl.SSLError, OSError) as exc:
        if caller.ticket is not None and caller.ticket.cut_why:
            log.info("cut a TLS handshake from %s (%s)", source, caller.ticket.cut_why)
            _close(tls)
            return None
        guard.counted("tls")
        log.warning("refused a TLS connection from %s: %s", source, _why(exc))
        _close(tls)
        return None
    caller.subject = subject_text(tls.getpeercert())
    return tls


def load(api_cfg: ApiConfig) -> tuple[Any, Any]:
    """(tokens, TLS context) of the configured door, read before anything starts: a token
    file, certificate or key that cannot be used raises credentials.CredentialError."""
    from fastverify.credentials import read_tokens, server_context
    from fastverify.daemon.auth import Tokens

    d = api_cfg
    tokens = Tokens(read_tokens(d.token_file)) if d.token_file else None
    tls = server_context(d.tls_cert, d.tls_key, d.tls_client_ca) if d.tls_cert else None
    return tokens, tls
