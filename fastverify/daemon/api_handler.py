"""The control API's HTTP handler: one request on either door (the Unix socket, the TCP
door) from its first line to its answer.

It admits the caller (the TCP door's backoff and token: auth.py), routes the path to its
handler (`h_<path>`, methods from fastverify.api_models.ROUTES), checks the body or query
against the endpoint's model (api_requests.py), calls the facade (ControlFacade, the one door
into the daemon) and answers JSON, or NDJSON for streams (`stream: true` operations, logs).
Errors are JSON that say what to send instead. Binding and serving the sockets: api.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import select
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol, TypeVar, cast
from urllib.parse import parse_qs, urlsplit

from fastverify import api_answers as a
from fastverify import api_bodies as b
from fastverify import api_models as m
from fastverify.admission import Buckets, Gate
from fastverify.daemon.api_requests import options, parse_query, validate_body
from fastverify.daemon.auth import Caller, Guard
from fastverify.daemon.facade import ControlFacade
from fastverify.daemon.lease import public as public_lease
from fastverify.daemon.operations import Operation
from fastverify.daemon.resolve import RequestError

log = logging.getLogger("fastverifyd.api")

MAX_BODY = m.MAX_BODY
B = TypeVar("B")  # an endpoint's request model
A = TypeVar("A")  # an endpoint's answer model
R = TypeVar("R")  # a read's answer model (the GET beside a record's POST)
MAX_HEAD = 128 * 1024  # the request line and headers (http.server: 64 KiB a line, 100 lines)


class _Capped(io.BufferedIOBase):
    """A request's bytes up to `left` (MAX_HEAD for the head, then MAX_BODY more for the
    body), then end of input (`hit` set): what one request still arriving can make the
    daemon hold is bounded, whatever it sends. The handler's `rfile` (a buffered reader, as
    http.server expects)."""

    def __init__(self, f: io.BufferedIOBase, left: int) -> None:
        super().__init__()
        self.f, self.left, self.hit = f, left, False

    def _n(self, want: int | None) -> int:
        n = self.left if want is None or want < 0 else min(want, self.left)
        if n <= 0:
            self.hit = True
        return n

    def readline(self, limit: int | None = -1, /) -> bytes:
        n = self._n(limit)
        line = self.f.readline(n) if n > 0 else b""
        self.left -= len(line)
        return line

    def read(self, size: int | None = -1, /) -> bytes:
        n = self._n(size)
        data = self.f.read(n) if n > 0 else b""
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.f.close()


class Served(Protocol):
    """What a handler needs of its server (api.ApiServer)."""

    facade: ControlFacade
    guard: Guard | None
    closing: threading.Event
    gate: Gate
    records: Buckets


class Handler(BaseHTTPRequestHandler):
    server: Served  # type: ignore[assignment]  # narrower than socketserver's BaseServer: ours
    protocol_version = "HTTP/1.0"
    server_version = "fastverifyd/1"
    # seconds a read or write may stall; the whole request has the gate's deadline
    # (fastverify.admission.REQUEST_DEADLINE_S)
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("api: " + format, *args)

    def setup(self) -> None:
        super().setup()
        self.rfile = self.capped = _Capped(self.rfile, MAX_HEAD)

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.capped.hit:
            self.send_error(431, f"request line and headers over {MAX_HEAD} bytes")
            return False
        self.capped.left += MAX_BODY
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors http.server raises itself (bad request line, header too long, unknown method)
        are JSON like every other error; an unknown method is 405 (the API has GET and POST)."""
        self.close_connection = True
        if code == 501:
            code, message = 405, f"{message or 'unsupported method'} (use GET or POST)"
        self._send_json(code, {"error": message or self.responses.get(code, ("error",))[0]})

    # --------------------------------------------------------------- plumbing
    def _send_json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        payload = (json.dumps(data, default=str) + "\n").encode()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the caller left
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)

    def _reply(self, ep: m.Endpoint[Any, A], answer: A | None, status: int = 200) -> None:
        """`ep`'s answer, its declared model (None: `{}`, what an endpoint whose answer may
        be missing answers then): the type checker holds what the daemon builds to what the
        API declares."""
        self._send_json(status, {} if answer is None else answer)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

    def _write_line(self, obj: Any) -> bool:
        try:
            self.wfile.write((json.dumps(obj, default=str) + "\n").encode())
            self.wfile.flush()
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            return False

    @property
    def caller(self) -> Caller:
        return self.client_address  # type: ignore[return-value]  # ApiServer passes a Caller

    def _admit(self, method: str, path: str) -> None:
        """The TCP door's checks (none on the Unix socket): backoff, then the token. Backoff
        is per identity (auth.py): the certificate's subject when one was verified."""
        guard = self.server.guard
        if guard is None:
            return
        source, key = self.caller.addr, self.caller.backoff_key
        wait = guard.backoff.wait_s(key)
        if wait > 0:
            guard.failed(key, "backoff")
            who = self.caller.subject or source
            raise RequestError(
                429,
                f"too many failed attempts from {who}; retry in {math.ceil(wait)} s",
                retry_after_s=math.ceil(wait),
                reason="backoff",
            )
        if guard.tokens is not None:
            name = guard.tokens.name_of(self.headers.get("Authorization", ""))
            if name is None:
                guard.failed(key, "token")
                log.warning("refused %s %s from %s: missing or wrong bearer token",
                            method, path, source)  # fmt: skip
                raise RequestError(
                    401,
                    "missing or wrong bearer token: fastverifyctl sends the one in --token-file "
                    "FILE (or FASTVERIFY_TOKEN_FILE), a token of the daemon's --token-file; "
                    "other clients send `Authorization: Bearer <token>`",
                )
            self.caller.token = name
        guard.backoff.succeeded(key)

    def _rate(self) -> None:
        """429 when the caller's record requests exceed api_models' RECORD_RATE_PER_S."""
        wait = self.server.records.take(self.caller.identity)
        if wait > 0:
            raise RequestError(
                429,
                f"too many records from {self.caller.identity}: at most {m.RECORD_BURST} at "
                f"once and {m.RECORD_RATE_PER_S:g} a second; retry in {math.ceil(wait)} s",
                retry_after_s=math.ceil(wait),
                reason="rate_limited",
            )

    def _read_body(self, max_body: int = MAX_BODY) -> Any:
        length_h = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise RequestError(411, "chunked request bodies are not supported; send Content-Length")
        if not length_h:
            return None
        try:
            length = int(length_h)
        except ValueError:
            raise RequestError(400, f"bad Content-Length {length_h!r}") from None
        if length < 0:
            raise RequestError(400, f"bad Content-Length {length_h!r}")
        if length > max_body:
            raise RequestError(
                413, f"request body of {length} bytes exceeds the {max_body}-byte limit"
            )
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"malformed JSON body: {exc}") from None
        except RecursionError:
            raise RequestError(400, "malformed JSON body: nested too deeply") from None

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        try:
            self._admit(method, path)
            methods = m.ROUTES.get(path)
            if methods is None:
                raise RequestError(
                    404,
                    f"unknown path {path} (see docs/reference/api.md; "
                    f"known: {', '.join(m.ROUTES)})",
                )
            if method not in methods:
                self._send_json(
                    405,
                    {"error": f"{method} not allowed on {path} (use {', '.join(methods)})"},
                    {"Allow": ", ".join(methods)},
                )
                return
            ep = m.endpoint(method, path)
            body = self._read_body(ep.max_body if ep else MAX_BODY) if method == "POST" else None
            if ep is not None and ep.recorded:  # a body of its size, then its rate
                self._rate()
            ticket = self.caller.ticket
            if ticket is not None and not self.server.gate.admitted(ticket):
                self.close_connection = True
                return  # past its request deadline, or evicted: the gate cut it
            if method == "POST":  # every request that changes state, with who sent it
                log.info("%s %s by %s", method, path, self.caller.by)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            getattr(self, "h_" + path[len("/v1/") :].replace("/", "_"))(method, body, query)
        except RequestError as exc:
            retry = exc.body.get("retry_after_s") if exc.status == 429 else None
            self._send_json(exc.status, exc.body, {"Retry-After": str(retry)} if retry else None)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:
            log.exception("API handler failed for %s %s", method, path)
            with contextlib.suppress(Exception):
                self._send_json(500, {"error": f"internal error: {exc}"})

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    # --------------------------------------------------------------- handlers
    @property
    def api(self) -> ControlFacade:
        return self.server.facade

    def h_status(self, method: str, body: Any, query: dict[str, str]) -> None:
        self._reply(m.STATUS, self.api.status())

    def h_profiles(self, method: str, body: Any, query: dict[str, str]) -> None:
        self._reply(m.PROFILES, self.api.profiles())

    def h_history(self, method: str, body: Any, query: dict[str, str]) -> None:
        q = parse_query(m.HISTORY, query)
        if q["n"] < 1:
            raise RequestError(
                400,
                f"query parameter n={q['n']} must be >= 1 (a page of "
                f"at most {m.HISTORY_PAGE_MAX}; page back with before=)",
            )
        self._reply(m.HISTORY, self.api.history(min(q["n"], m.HISTORY_PAGE_MAX), q["before"]))

    def h_logs(self, method: str, body: Any, query: dict[str, str]) -> None:
        q = parse_query(m.LOGS, query)
        entries = self.api.log_tail(q["n"])
        self._start_stream()
        last = entries[-1]["seq"] if entries else self.api.log_seq()
        for e in entries:
            if not self._write_line({"event": "log", **e}):
                return
        while q["follow"] and not self.server.closing.is_set():
            batch = self.api.log_since(last, timeout=1.0)
            if not batch:
                if _peer_closed(self.connection):  # an idle daemon writes nothing to notice
                    return
                continue
            for e in batch:
                last = e["seq"]
                if not self._write_line({"event": "log", **e}):
                    return

    def h_server_argv(self, method: str, body: Any, query: dict[str, str]) -> None:
        q = parse_query(m.SERVER_ARGV, query)
        self._reply(m.SERVER_ARGV, self.api.server_argv(q["profile"], q["mode"], q["check"]))

    def _operation(self, ep: m.Endpoint[Any, a.OperationResult], kind: str, body: Any) -> None:
        """A switch, mode or restart: the body checked against `ep`, its defaults filled in."""
        opts: dict[str, Any] = options(ep, validate_body(ep, body))
        wait, stream = opts.pop("wait"), opts.pop("stream")
        name, mode = opts.pop("name", None), opts.pop("mode", None)
        op = self.api.operate(kind, name, mode, caller=self.caller,
                              withdrawn=lambda: _peer_closed(self.connection), **opts)  # fmt: skip
        self._answer(ep, op, wait=wait, stream=stream)

    def _answer(
        self, ep: m.Endpoint[Any, a.OperationResult], op: Operation, wait: bool, stream: bool
    ) -> None:
        if stream:
            self._start_stream()
            for ev in op.iter_events():
                if not self._write_line(ev):
                    return  # the caller went away; the operation goes on
            return
        if not wait:
            accepted: a.Accepted = {"accepted": True, "op": op.describe()}
            self._send_json(202, accepted)
            return
        result = op.wait()
        assert result is not None
        self._reply(ep, result, 200 if result["result"] in ("ok", "unchanged") else 502)

    def h_profile(self, method: str, body: Any, query: dict[str, str]) -> None:
        self._operation(m.SET_PROFILE, "switch", body)

    def h_mode(self, method: str, body: Any, query: dict[str, str]) -> None:
        self._operation(m.SET_MODE, "mode", body)

    def h_restart(self, method: str, body: Any, query: dict[str, str]) -> None:
        self._operation(m.RESTART, "restart", body)

    def h_cancel(self, method: str, body: Any, query: dict[str, str]) -> None:
        validate_body(m.CANCEL, body)
        op = self.api.cancel(self.caller)
        if op is None:
            raise RequestError(404, "no operation in flight")
        cancelled: a.Cancelled = {"result": "cancelled", "operation": op.describe()}
        self._reply(m.CANCEL, cancelled)

    def _read_or_record(
        self,
        method: str,
        body: Any,
        reads: tuple[m.Endpoint[b.NoBody, R], Callable[[], R | None]],
        records: tuple[m.Endpoint[B, A], Callable[[B], A]],
    ) -> None:
        """GET: `read()` (`reads`: its endpoint, read); POST: `record(body)` once the body
        is checked against its endpoint (its types: the facade checks the values)."""
        if method == "GET":
            self._reply(reads[0], reads[1]())
            return
        ep, record = records
        self._reply(ep, record(validate_body(ep, body)))

    def h_baselines(self, method: str, body: Any, query: dict[str, str]) -> None:
        api = self.api
        self._read_or_record(method, body, (m.BASELINES, api.baselines),
                             (m.RECORD_BASELINE, api.set_baseline))  # fmt: skip

    def h_decision(self, method: str, body: Any, query: dict[str, str]) -> None:
        def record(decided: b.RecordDecisionBody) -> a.DecisionRecord:
            return self.api.record_decision(decided, self.caller)

        self._read_or_record(method, body, (m.DECISION, self.api.decision),
                             (m.RECORD_DECISION, record))  # fmt: skip

    def h_acceptance(self, method: str, body: Any, query: dict[str, str]) -> None:
        api = self.api
        self._read_or_record(method, body, (m.ACCEPTANCE, api.acceptance),
                             (m.RECORD_ACCEPTANCE, api.record_acceptance))  # fmt: skip

    def h_spec_plan(self, method: str, body: Any, query: dict[str, str]) -> None:
        api = self.api
        self._read_or_record(method, body, (m.SPEC_PLAN, api.spec_plan),
                             (m.STORE_SPEC_PLAN, api.store_spec_plan))  # fmt: skip

    def h_lease(self, method: str, body: Any, query: dict[str, str]) -> None:
        if method == "GET":  # its id to its holder only
            lease = self.api.leases.current()
            if lease is not None and lease.get("holder") != self.caller.identity:
                lease = public_lease(lease)
            answer: a.LeaseInForce = {"lease": cast(a.LeaseSeen | None, lease)}
            self._reply(m.LEASE, answer)
            return
        opts = options(m.TAKE_LEASE, validate_body(m.TAKE_LEASE, body))
        # the holder: the caller's identity; its process on the Unix socket's other end
        # (SO_PEERCRED) for the lease to lapse with; unknown on TCP
        pid = self.caller.pid if self.caller.door == "unix" else None
        taken = self.api.take_lease(opts["experiment"], opts["description"] or "", pid,
                                    bool(opts["force"]), self.caller)  # fmt: skip
        self._reply(m.TAKE_LEASE, taken)

    def h_lease_release(self, method: str, body: Any, query: dict[str, str]) -> None:
        released = validate_body(m.RELEASE_LEASE, body)
        self._reply(m.RELEASE_LEASE, self.api.release_lease(released["id"], self.caller))

    def h_verify(self, method: str, body: Any, query: dict[str, str]) -> None:
        from fastverify.daemon.reverify import rerun  # the verifiers again (reverify.py)

        self._reply(m.VERIFY, rerun(self.api.ctl))

    def h_trace_capture(self, method: str, body: Any, query: dict[str, str]) -> None:
        steps = validate_body(m.CAPTURE_TRACE, body).get("steps")
        cancelled = lambda: _peer_closed(self.connection)  # noqa: E731
        self._reply(m.CAPTURE_TRACE, self.api.capture_trace(steps, cancelled))


def _peer_closed(sock: socket.socket) -> bool:
    """True when the client has closed its end of `sock` (readable, and EOF on peek; over
    TLS, where nothing can be peeked, a read that finds the end: a client sends nothing
    after its request, so a read that finds data loses nothing)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        if not isinstance(sock, ssl.SSLSocket):
            return sock.recv(1, socket.MSG_PEEK) == b""
        timeout = sock.gettimeout()
        sock.settimeout(0)
        try:
            return sock.recv(1) == b""
        except ssl.SSLWantReadError:
            return False
        finally:
            sock.settimeout(timeout)
    except (OSError, ValueError):
        return True
