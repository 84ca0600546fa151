"""The control API: HTTP/1.0 + JSON over a Unix socket (optional TCP: TLS, tokens).

Paths are versioned (`/v1/...`, see docs/api.md). The Unix socket is created with mode
0660 and handed to group `fastverify` when that group exists. TCP listens only when
configured (off loopback only over TLS, client certificates when a CA is given: tcpdoor.py)
and then requires `Authorization: Bearer <token>` when a token file is set (auth.py: named
tokens, constant-time, per-source backoff). Every request knows its `Caller` (auth.py);
state-changing ones are logged with it and it reaches the history as `by`. Requests
larger than MAX_BODY are refused (413); malformed JSON, wrong types, missing fields,
unknown paths and wrong methods get a 4xx JSON error that says what to send instead.
Operation requests can stream NDJSON events (`stream: true`).
"""

from __future__ import annotations

import contextlib
import grp
import json
import logging
import math
import os
import select
import socket
import socketserver
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fastverify import config as configmod
from fastverify.daemon import tcpdoor
from fastverify.daemon.auth import FAILURE_REASONS, Caller, Guard, unix_caller
from fastverify.daemon.facade import ControlFacade
from fastverify.daemon.operations import Operation
from fastverify.daemon.resolve import RequestError

log = logging.getLogger("fastverifyd.api")

MAX_BODY = 64 * 1024
MAX_CONNECTIONS = 1024  # threads; idle clients are cut after Handler.timeout
API_VERSION = "v1"

# path -> allowed methods
ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/status": ("GET",),
    "/v1/history": ("GET",),
    "/v1/logs": ("GET",),
    "/v1/server/argv": ("GET",),
    "/v1/profile": ("POST",),
    "/v1/mode": ("POST",),
    "/v1/restart": ("POST",),
    "/v1/cancel": ("POST",),
    "/v1/baselines": ("GET", "POST"),
    "/v1/trace/capture": ("POST",),
    "/v1/decision": ("GET", "POST"),
    "/v1/lease": ("GET", "POST"),
    "/v1/lease/release": ("POST",),
    "/v1/acceptance": ("GET", "POST"),
    "/v1/spec/plan": ("GET", "POST"),
    "/v1/verify": ("GET",),
}

# field -> (types, required)
_BOOL = (bool,)
_NUM = (int, float)
SCHEMAS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "/v1/profile": {
        "lease": ((str,), False),  # an experiment's own operation (fastverify.daemon.lease)
        "name": ((str,), True),
        "mode": ((str,), False),
        "wait": (_BOOL, False),
        "stream": (_BOOL, False),
        "force": (_BOOL, False),
        "queue": (_BOOL, False),
        "timeout_s": (_NUM, False),
        "restart": (_BOOL, False),
        "load_format": ((str,), False),  # SGLang --load-format; "dummy" = trial
        # a timing trial's EAGLE-3 steps (mode eagle3, dummy weights; `spec costs`)
        "eagle3_steps": ((int,), False),
        "canary": (_BOOL, False),  # declarative mode: leave the declared profile on purpose
    },
    "/v1/mode": {
        "lease": ((str,), False),  # an experiment's own operation (fastverify.daemon.lease)
        "force": (_BOOL, False),  # even while an experiment holds a lease
        "mode": ((str,), True),
        "wait": (_BOOL, False),
        "stream": (_BOOL, False),
        "queue": (_BOOL, False),
        "timeout_s": (_NUM, False),
        "restart": (_BOOL, False),
        "canary": (_BOOL, False),
    },
    "/v1/restart": {
        "lease": ((str,), False),  # an experiment's own operation (fastverify.daemon.lease)
        "force": (_BOOL, False),  # even while an experiment holds a lease
        "wait": (_BOOL, False),
        "stream": (_BOOL, False),
        "queue": (_BOOL, False),
        "timeout_s": (_NUM, False),
    },
    "/v1/cancel": {},
    "/v1/baselines": {
        "profile": ((str,), True),
        "tokens_per_second": (_NUM, True),
        "per_request_tokens_per_second": (_NUM, True),
        "measured_at": (_NUM, False),
        "accept_length": (_NUM, False),  # EAGLE-3, real weights (read by trial sweeps)
        # concurrent requests it was measured at; required (the facade says why when absent)
        "concurrency": ((int,), False),
    },
    "/v1/trace/capture": {"steps": ((int,), False)},
    "/v1/lease": {  # fastverifyctl sweep / tune (fastverify.daemon.lease)
        "experiment": ((str,), True),
        "description": ((str,), False),
        "force": (_BOOL, False),
    },
    "/v1/lease/release": {"id": ((str,), True)},
    "/v1/acceptance": {  # bench on the served EAGLE-3 engine (fastverify.daemon.acceptance)
        "histogram": ((list,), True),
        "requests": ((list,), False),
        "dataset": ((dict,), False),
        "sampling": ((dict,), False),
        "input_len": ((int,), False),
        "output_len": ((int,), False),
        "profile": ((str,), False),
        "mode": ((str,), False),
        "measured_at": (_NUM, False),
    },
    "/v1/spec/plan": {"plan": ((dict,), True), "adaptive_config": ((dict,), True)},
    "/v1/decision": {  # fastverifyctl tune (fastverify.daemon.decision)
        "profile": ((str,), True),
        "mode": ((str,), True),
        "backend": ((str,), True),
        "applied": (_BOOL, True),
        "why": ((str,), True),
        "report": ((str,), False),
        "accept_length": (_NUM, False),
        "tokens_per_second": (_NUM, False),
        "adaptive_config": ((str,), False),  # mode adaptive: the plan's SGLang config
    },
}


# Request fields that are per-request values of a configuration key: checked by the same
# function as the configuration file (fastverify.config.validate_fields).
MIRRORS: dict[str, str] = {
    "timeout_s": "daemon.readiness_timeout_s",
    "steps": "daemon.trace_steps",
    "mode": "server.mode",
    "eagle3_steps": "server.eagle3.num_steps",
}


def validate_body(path: str, body: Any) -> dict[str, Any]:
    """Check a request body against SCHEMAS[path]; RequestError(400/422) says what is wrong."""
    schema = SCHEMAS.get(path, {})
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise RequestError(400, f"request body must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(schema))
    if unknown:
        raise RequestError(
            422, f"unknown field(s) {', '.join(unknown)} (accepted: {', '.join(schema) or 'none'})"
        )
    for name, (types, required) in schema.items():
        if name not in body or body[name] is None:
            if required:
                raise RequestError(422, f"missing field {name!r}")
            continue
        value = body[name]
        ok = isinstance(value, types) and not (bool not in types and isinstance(value, bool))
        if not ok:
            want = " or ".join(
                dict.fromkeys(  # (int, float) is one word: "a number", not "number or number"
                    "a number" if t in (int, float) and len(types) > 1 else t.__name__
                    for t in types
                )
            )
            raise RequestError(422, f"field {name!r} must be {want}, got {json.dumps(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise RequestError(422, f"field {name!r} must be a finite number, got {value}")
        if required and isinstance(value, str) and not value.strip():
            raise RequestError(422, f"field {name!r} is empty")
    for name, key in MIRRORS.items():
        if name == "eagle3_steps" and body.get(name) == 0 and body.get("mode") == "adaptive":
            continue  # SGLang's steps-0 pass, spec costs' trial (resolve.check_trial_steps)
        if name in schema and body.get(name) is not None:
            problems = configmod.validate_fields({key: body[name]})
            if problems:  # "daemon.readiness_timeout_s: -1 is out of range (expected ...)"
                why = problems[0].message.partition(": ")[2]
                raise RequestError(422, f"field {name!r} (like {key} in the config): {why}")
    if body.get("load_format") is not None and configmod.load_format_problem(body["load_format"]):
        raise RequestError(422, f"field {configmod.load_format_problem(body['load_format'])}")
    return body


class Handler(BaseHTTPRequestHandler):
    server: ApiServer  # type: ignore[assignment]
    protocol_version = "HTTP/1.0"
    server_version = "fastverifyd/1"
    timeout = 30  # seconds a client may stall while sending its request (then it is cut)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("api: " + format, *args)

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
        """The TCP door's checks (none on the Unix socket): backoff, then the token."""
        guard = self.server.guard
        if guard is None:
            return
        source = self.caller.addr
        wait = guard.backoff.wait_s(source)
        if wait > 0:
            guard.failed(source, "backoff")
            raise RequestError(
                429,
                f"too many failed attempts from {source}; retry in {math.ceil(wait)} s",
                retry_after_s=math.ceil(wait),
                reason="backoff",
            )
        if guard.tokens is not None:
            name = guard.tokens.name_of(self.headers.get("Authorization", ""))
            if name is None:
                guard.failed(source, "token")
                log.warning("refused %s %s from %s: missing or wrong bearer token",
                            method, path, source)  # fmt: skip
                raise RequestError(
                    401,
                    "missing or wrong bearer token: fastverifyctl sends the one in --token-file "
                    "FILE (or FASTVERIFY_TOKEN_FILE), a token of the daemon's --token-file; "
                    "other clients send `Authorization: Bearer <token>`",
                )
            self.caller.token = name
        guard.backoff.succeeded(source)

    def _read_body(self) -> Any:
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
        if length > MAX_BODY:
            raise RequestError(
                413, f"request body of {length} bytes exceeds the {MAX_BODY}-byte limit"
            )
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"malformed JSON body: {exc}") from None

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        try:
            self._admit(method, path)
            methods = ROUTES.get(path)
            if methods is None:
                raise RequestError(
                    404, f"unknown path {path} (see docs/api.md; known: {', '.join(ROUTES)})"
                )
            if method not in methods:
                self._send_json(
                    405,
                    {"error": f"{method} not allowed on {path} (use {', '.join(methods)})"},
                    {"Allow": ", ".join(methods)},
                )
                return
            body = self._read_body() if method == "POST" else None
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
        self._send_json(200, self.api.status())

    def h_history(self, method: str, body: Any, query: dict[str, str]) -> None:
        records = self.api.history()
        n = _int_query(query, "n", 0)
        self._send_json(200, records[-n:] if n > 0 else records)

    def h_logs(self, method: str, body: Any, query: dict[str, str]) -> None:
        n = _int_query(query, "n", 100)
        follow = query.get("follow", "0") in ("1", "true", "yes")
        entries = self.api.log_tail(n)
        self._start_stream()
        last = entries[-1]["seq"] if entries else self.api.log_seq()
        for e in entries:
            if not self._write_line({"event": "log", **e}):
                return
        while follow and not self.server.closing.is_set():
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
        check = query.get("check", "0") in ("1", "true", "yes")
        self._send_json(200, self.api.server_argv(query.get("profile"), query.get("mode"), check))

    def _operation(
        self, kind: str, body: dict[str, Any], name: str | None, mode: str | None
    ) -> None:
        op = self.api.operate(
            kind,
            name,
            mode,
            force=bool(body.get("force", False)),
            queue=bool(body.get("queue", False)),
            timeout_s=body.get("timeout_s"),
            withdrawn=lambda: _peer_closed(self.connection),
            restart=bool(body.get("restart", False)),
            canary=bool(body.get("canary", False)),
            lease=body.get("lease"),
            caller=self.caller,
            **({"load_format": body["load_format"]} if body.get("load_format") else {}),
            **({"eagle3_steps": body["eagle3_steps"]} if "eagle3_steps" in body else {}),
        )
        self._answer(op, wait=body.get("wait", True), stream=body.get("stream", False))

    def _answer(self, op: Operation, wait: bool, stream: bool) -> None:
        if stream:
            self._start_stream()
            for ev in op.iter_events():
                if not self._write_line(ev):
                    return  # the caller went away; the operation goes on
            return
        if not wait:
            self._send_json(202, {"accepted": True, "op": op.describe()})
            return
        result = op.wait()
        assert result is not None
        self._send_json(200 if result["result"] in ("ok", "unchanged") else 502, result)

    def h_profile(self, method: str, body: Any, query: dict[str, str]) -> None:
        body = validate_body("/v1/profile", body)
        self._operation("switch", body, body["name"], body.get("mode"))

    def h_mode(self, method: str, body: Any, query: dict[str, str]) -> None:
        body = validate_body("/v1/mode", body)
        self._operation("mode", body, None, body["mode"])

    def h_restart(self, method: str, body: Any, query: dict[str, str]) -> None:
        body = validate_body("/v1/restart", body)
        self._operation("restart", body, None, None)

    def h_cancel(self, method: str, body: Any, query: dict[str, str]) -> None:
        validate_body("/v1/cancel", body)
        op = self.api.cancel(self.caller)
        if op is None:
            raise RequestError(404, "no operation in flight")
        self._send_json(200, {"result": "cancelled", "operation": op.describe()})

    def h_baselines(self, method: str, body: Any, query: dict[str, str]) -> None:
        if method == "GET":
            self._send_json(200, self.api.baselines())
            return
        body = validate_body("/v1/baselines", body)  # types; the facade checks values
        if body.get("accept_length") is not None and body["accept_length"] < 1:
            raise RequestError(422, "field 'accept_length' must be >= 1 (bonus token included)")
        self._send_json(200, self.api.set_baseline(body))

    def h_decision(self, method: str, body: Any, query: dict[str, str]) -> None:
        if method == "GET":
            self._send_json(200, self.api.decision())
            return
        body = validate_body("/v1/decision", body)  # types; the facade checks values
        self._send_json(200, self.api.record_decision(body, self.caller))

    def h_acceptance(self, method: str, body: Any, query: dict[str, str]) -> None:
        if method == "GET":
            self._send_json(200, self.api.acceptance())
            return
        self._send_json(200, self.api.record_acceptance(validate_body("/v1/acceptance", body)))

    def h_spec_plan(self, method: str, body: Any, query: dict[str, str]) -> None:
        if method == "GET":
            self._send_json(200, self.api.spec_plan())
            return
        self._send_json(200, self.api.store_spec_plan(validate_body("/v1/spec/plan", body)))

    def h_lease(self, method: str, body: Any, query: dict[str, str]) -> None:
        if method == "GET":
            self._send_json(200, {"lease": self.api.leases.current()})
            return
        body = validate_body("/v1/lease", body)
        # the holder: the process on the Unix socket's other end (SO_PEERCRED); unknown on TCP
        pid = self.caller.pid if self.caller.door == "unix" else None
        self._send_json(200, self.api.take_lease(body["experiment"],
                                                 body.get("description") or "", pid,
                                                 bool(body.get("force"))))  # fmt: skip

    def h_lease_release(self, method: str, body: Any, query: dict[str, str]) -> None:
        body = validate_body("/v1/lease/release", body)
        self._send_json(200, self.api.release_lease(body["id"]))

    def h_verify(self, method: str, body: Any, query: dict[str, str]) -> None:
        from fastverify.daemon.reverify import rerun  # the verifiers again (reverify.py)

        self._send_json(200, rerun(self.api.ctl))

    def h_trace_capture(self, method: str, body: Any, query: dict[str, str]) -> None:
        body = validate_body("/v1/trace/capture", body)
        cancelled = lambda: _peer_closed(self.connection)  # noqa: E731
        self._send_json(200, self.api.capture_trace(body.get("steps"), cancelled))


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


def _int_query(query: dict[str, str], name: str, default: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise RequestError(400, f"query parameter {name}={raw!r} must be an integer") from None


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
        super().__init__(sock.getsockname(), Handler)

    def fileno(self) -> int:
        return self.socket.fileno()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = self.socket.accept()
        if self.unix:  # the peer's credentials, while the connection is fresh
            return conn, unix_caller(conn)
        return conn, Caller("tcp", addr=str(addr[0]), extra={"tls": self.tls is not None})

    def process_request(self, request: Any, client_address: Any) -> None:
        # Bounded concurrency: followers and waiters hold a thread each.
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(
                    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n\r\n"
                    b'{"error": "too many concurrent API connections; retry"}\n'
                )
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            if not self.unix:
                request = tcpdoor.admit(self, request, client_address)
                if request is None:
                    return
            super().process_request_thread(request, client_address)
        finally:
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
    daemon_cfg: Any, loaded: tuple[Any, Any], facade: ControlFacade, hub: Any = None
) -> ApiServer:
    """The TCP door's server, listening on `daemon.tcp_listen`; `loaded`: tcpdoor.load()'s
    (tokens, TLS context); refused attempts counted on `hub` (the exporter's, or None)."""
    tokens, tls = loaded
    guard = Guard(tokens, hub.on_auth_failure if hub is not None else None)
    if hub is not None:
        hub.watch_auth(FAILURE_REASONS, guard.backoff.sources)
    server = ApiServer(bind_tcp(daemon_cfg.tcp_listen), facade, guard, tls)
    how = "plaintext (loopback)" if tls is None else "TLS"
    if tls is not None and daemon_cfg.tls_client_ca:
        how += " with client certificates"
    names = f"bearer tokens {', '.join(tokens.names)}" if tokens else "no token"
    log.info("TCP control door on %s: %s, %s", daemon_cfg.tcp_listen, how, names)
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
