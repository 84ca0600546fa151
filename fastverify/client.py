"""Client of the daemon's control API: HTTP + JSON over a Unix socket (or TCP: a token,
TLS with an `ssl.SSLContext` from fastverify.credentials.client_context).

The CLI and the experiments it runs talk to the daemon only through this module, by its
typed methods (`status()`, `set_profile(name, mode=..., wait=...)`, ...; `call(ep, ...)` and
`follow(ep, ...)` for any endpoint): each calls one endpoint of fastverify.api_models, whose
fields it accepts and checks before anything is sent.

It speaks the little HTTP it needs straight over the socket: `http.client` alone (email
parser, ssl) costs ~30 ms of import, half of `fastverifyctl status`'s start-up budget; for
the Unix socket it uses the C module `_socket` with its own small reader (the `socket`
module pulls in selectors, array and enum classes), and it imports neither pathlib nor
urllib. `socket` is imported only for TCP, `ssl` only by whoever builds a TLS context. A
refused TLS handshake is a DaemonUnavailable that says which side refused what, and the
flag that fixes it.
"""

from __future__ import annotations

import _socket
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, cast

from fastverify import api_models as m

if TYPE_CHECKING:  # the models are types only here: a call builds its request's to check it
    from fastverify import api_answers as a
    from fastverify import api_bodies as b

A = TypeVar("A")  # an endpoint's answer model


class DaemonUnavailable(ConnectionError):
    """Nobody answers on the control socket: it does not exist, the daemon is stopped or
    overloaded (timeout, HTTP 503), or it closed the connection before answering. The message
    is one sentence for the operator (the CLI exits 3 with it)."""


class DaemonRefused(DaemonUnavailable):
    """The daemon is there and refused this client: the socket's permissions, a TLS door
    that rejected its certificate (the CLI exits 8 with the message)."""

    refused = True


class ConnectionLost(ConnectionError):
    """The daemon answered, then the connection broke before the response was complete
    (an operation may still be running: see `fastverifyctl status`)."""


# HTTP answers by which the daemon refuses the client itself (no or a wrong token; the
# backoff after repeated failures): `ApiError.refused`, the CLI's exit 8
REFUSED_STATUSES = (401, 429)


class ApiError(RuntimeError):
    """The daemon answered with an HTTP error; `status` and the decoded JSON `body` are kept.
    `refused`: it refused this client (REFUSED_STATUSES)."""

    def __init__(self, status: int, body: dict[str, Any]):
        self.status = status
        self.body = body
        self.refused = status in REFUSED_STATUSES
        super().__init__(body.get("error") or body.get("message") or f"HTTP {status}")


class _Reader:
    """Buffered reads off a raw socket: `readline(limit)`, `read(n | None)`, line iteration."""

    def __init__(self, sock: Any):
        self._sock = sock
        self._buf = b""
        self._eof = False

    def _fill(self) -> bool:
        if self._eof:
            return False
        chunk = self._sock.recv(65536)
        if not chunk:
            self._eof = True
            return False
        self._buf += chunk
        return True

    def readline(self, limit: int = 65537) -> bytes:
        while b"\n" not in self._buf and len(self._buf) < limit and self._fill():
            pass
        end = self._buf.find(b"\n")
        end = min(limit, len(self._buf)) if end < 0 else min(limit, end + 1)
        line, self._buf = self._buf[:end], self._buf[end:]
        return line

    def read(self, n: int | None = None) -> bytes:
        while (n is None or len(self._buf) < n) and self._fill():
            pass
        if n is None:
            n = len(self._buf)
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline(1 << 20):
            yield line


class _Response:
    """One HTTP response read straight off the socket (the daemon speaks HTTP/1.0: the body is
    Content-Length delimited, or runs until the connection closes for streams)."""

    def __init__(self, sock: Any):
        self._sock = sock
        self._file = _Reader(sock)
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
        self._sock.close()


def _connect_unix(path: str, timeout: float | None) -> Any:
    # A Unix socket with a timeout is non-blocking: a full accept queue answers EAGAIN at
    # once instead of waiting. Retry within the timeout, as a blocking connect would wait.
    deadline = time.monotonic() + (timeout if timeout is not None else 30.0)
    while True:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
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


class Calls:
    """The typed calls of the control API, over `request` and `stream` (whoever provides
    them: ControlClient, or a wrapper that adds to what is sent, as an experiment's lease)."""

    def request(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        raise NotImplementedError

    # (method, path, body=None, *, timeout=None, answer_timeout=None): ControlClient.stream
    stream: Callable[..., Iterator[dict[str, Any]]]

    def get(self, path: str, **kw: Any) -> Any:
        """A raw GET of `path` (tests, probes); code calls the typed methods instead."""
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        """A raw POST of `body` to `path` (tests, probes), through `request` as the typed
        calls go (a lease's wrapper adds its id here too)."""
        return self.request("POST", path, body, **kw)

    def call(self, ep: m.Endpoint[Any, A], /, *, timeout: float | None = None, **fields: Any) -> A:
        """One request to `ep` with `fields` (its body, or its query for a GET; None values
        are left out) -> the decoded JSON answer, `ep`'s answer model. A field `ep` does not
        declare is a TypeError here, before anything is sent."""
        return cast(A, self.request(ep.method, *_target(ep, fields), timeout=timeout))

    def follow(
        self,
        ep: m.Endpoint[Any, Any],
        /,
        *,
        timeout: float | None = None,
        answer_timeout: float | None = None,
        **fields: Any,
    ) -> Iterator[dict[str, Any]]:
        """`call` for an answer of NDJSON events (an operation with `stream=True`, the logs):
        one dict per event, as `stream`."""
        return self.stream(ep.method, *_target(ep, fields), timeout=timeout,
                           answer_timeout=answer_timeout)  # fmt: skip

    def status(self, *, timeout: float | None = None) -> a.StatusBody:
        """The status body; its fields are api_answers.StatusBody's (the daemon answers that)."""
        return self.call(m.STATUS, timeout=timeout)

    def profiles(self, *, timeout: float | None = None) -> list[a.ProfileListed]:
        """Every profile the daemon can switch to, the active one marked."""
        return self.call(m.PROFILES, timeout=timeout)

    def history(
        self, n: int | None = None, *, timeout: float | None = None
    ) -> list[a.HistoryRecord]:
        """The newest `n` history records (None: all of them), oldest first, read a page
        (api_models.HISTORY_PAGE_MAX records) at a time back from the newest."""
        out: list[a.HistoryRecord] = []
        before = None
        while n is None or len(out) < n:
            want = m.HISTORY_PAGE_MAX if n is None else min(n - len(out), m.HISTORY_PAGE_MAX)
            page = self.call(m.HISTORY, n=want, before=before, timeout=timeout)
            out[:0] = page
            if len(page) < want:
                break
            before = min(_finished(r) for r in page)
        return out if n is None else out[-n:]

    def logs(
        self,
        *,
        timeout: float | None = None,
        answer_timeout: float | None = None,
        **query: Unpack[b.LogsQuery],
    ) -> Iterator[a.LogEvent]:
        """The log lines (`n`, `follow`), as NDJSON events; `answer_timeout`, `timeout` as
        `follow`."""
        events = self.follow(m.LOGS, timeout=timeout, answer_timeout=answer_timeout, **query)
        return cast("Iterator[a.LogEvent]", events)

    def server_argv(
        self, *, timeout: float | None = None, **query: Unpack[b.ServerArgvQuery]
    ) -> a.ServerArgv:
        """The argv of `profile` and `mode` (default: the active ones); `check=True` runs the
        engine's argv parser."""
        return self.call(m.SERVER_ARGV, timeout=timeout, **query)

    def set_profile(
        self, name: str, *, timeout: float | None = None, **fields: Unpack[b.SetProfileOptions]
    ) -> a.OperationResult:
        """Switch to profile `name` (fields: api_bodies.SetProfileBody)."""
        return self.call(m.SET_PROFILE, timeout=timeout, name=name, **fields)

    def set_mode(self, mode: str, **fields: Unpack[b.SetModeOptions]) -> a.OperationResult:
        """Switch the mode (fields: api_bodies.SetModeBody)."""
        return self.call(m.SET_MODE, mode=mode, **fields)

    def restart(self, **fields: Unpack[b.RestartBody]) -> a.OperationResult:
        """Restart the engine (fields: api_bodies.RestartBody)."""
        return self.call(m.RESTART, **fields)

    def cancel(self) -> a.Cancelled | None:
        """Cancel the switch in flight (POST /v1/cancel): `{"result": "cancelled",
        "operation": {...}}` once the daemon accepted it, None when nothing was in flight;
        the previous profile is put back by the daemon (see the operation's result)."""
        try:
            return self.call(m.CANCEL)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def take_lease(self, experiment: str, **fields: Unpack[b.TakeLeaseOptions]) -> a.Lease:
        return self.call(m.TAKE_LEASE, experiment=experiment, **fields)

    def release_lease(self, lease_id: str, *, timeout: float | None = None) -> a.Released:
        return self.call(m.RELEASE_LEASE, timeout=timeout, id=lease_id)

    def store_spec_plan(self, plan: dict[str, Any], adaptive_config: dict[str, Any]) -> a.SpecPlan:
        return self.call(m.STORE_SPEC_PLAN, plan=plan, adaptive_config=adaptive_config)

    def record_baseline(self, **fields: Unpack[b.RecordBaselineBody]) -> a.BaselineRecord:
        """A bench's or a sweep's baseline measurement (the stored record)."""
        return self.call(m.RECORD_BASELINE, **fields)

    def record_decision(self, **fields: Unpack[b.RecordDecisionBody]) -> a.DecisionRecord:
        """What tune decided, after it applied it (the stored record)."""
        return self.call(m.RECORD_DECISION, **fields)

    def record_acceptance(self, **fields: Unpack[b.RecordAcceptanceBody]) -> a.AcceptanceRecord:
        """A bench's acceptance on the served EAGLE-3 engine (the stored record)."""
        return self.call(m.RECORD_ACCEPTANCE, **fields)

    def capture_trace(
        self, *, timeout: float | None = None, **fields: Unpack[b.CaptureTraceBody]
    ) -> a.TraceCapture:
        """One profile window of the serving engine now, analysed."""
        return self.call(m.CAPTURE_TRACE, timeout=timeout, **fields)

    # the endpoints that take no fields
    def baselines(self, *, timeout: float | None = None) -> dict[str, a.ProfileBaselines]:
        """GET /v1/baselines: each profile's recorded baselines."""
        return self.call(m.BASELINES, timeout=timeout)

    def decision(self, *, timeout: float | None = None) -> a.DecisionRecord | None:
        """GET /v1/decision: the newest tuning decision, None when there is none."""
        return self.call(m.DECISION, timeout=timeout) or None

    def lease(self, *, timeout: float | None = None) -> a.LeaseInForce:
        """GET /v1/lease: the lease in force."""
        return self.call(m.LEASE, timeout=timeout)

    def acceptance(self, *, timeout: float | None = None) -> a.AcceptanceCurves:
        """GET /v1/acceptance: every bench's acceptance."""
        return self.call(m.ACCEPTANCE, timeout=timeout)

    def spec_plan(self, *, timeout: float | None = None) -> a.SpecPlan | None:
        """GET /v1/spec/plan: the stored speculation plan, None when there is none."""
        return self.call(m.SPEC_PLAN, timeout=timeout) or None

    def verify(self, *, timeout: float | None = None) -> a.Verification:
        """GET /v1/verify: the after-READY verifiers again on the serving engine."""
        return self.call(m.VERIFY, timeout=timeout)


class ControlClient(Calls):
    """`ControlClient(socket_path).status()` -> dict; raises DaemonUnavailable/ApiError.

    TCP: `ControlClient(tcp="127.0.0.1:7070", token="...")` sends `Authorization: Bearer`;
    `tls=ssl_context` speaks TLS (the daemon's name checked against `tcp`'s host).
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        tcp: str | None = None,
        token: str | None = None,
        tls: Any = None,
        timeout: float | None = 30.0,
    ):
        if not socket_path:
            from fastverify import paths  # pathlib: only when no socket was given

            socket_path = paths.socket_path()
        self.socket_path = str(socket_path)
        self.tcp = tcp
        self.token = token
        self.tls = tls
        self.timeout = timeout

    def _connect(self, timeout: float | None) -> Any:
        if self.tcp:
            import socket

            host, _, port = self.tcp.rpartition(":")
            sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
            if self.tls is None:
                return sock
            try:
                return self.tls.wrap_socket(sock, server_hostname=host.strip("[]"))
            except BaseException:
                sock.close()
                raise
        return _connect_unix(self.socket_path, timeout)

    def _tls_refusal(self, exc: BaseException) -> DaemonUnavailable | None:
        """One sentence for a failed TLS handshake (either side refused), else None."""
        if self.tls is None or not type(exc).__name__.startswith("SSL"):
            return None
        where, text = self._where(), str(exc)
        verify = getattr(exc, "verify_message", None)
        if verify:  # this side refused the daemon's certificate
            why = (f"its certificate failed verification ({verify}); pass the CA that "
                   "signed it with --tls-ca (FASTVERIFY_TLS_CA), and connect by a name or "
                   "address the certificate holds")  # fmt: skip
        elif "WRONG_VERSION_NUMBER" in text or "wrong version number" in text:
            why = "it does not speak TLS on that port (a plaintext loopback door?)"
        elif "certificate" in text.lower() or "unknown ca" in text.lower():
            return DaemonRefused(
                f"fastverifyd at {where}: it refused this client's certificate "
                f"({getattr(exc, 'reason', text)}): it requires one signed by its client CA "
                "and in date; pass --tls-cert and --tls-key (FASTVERIFY_TLS_CERT, "
                "FASTVERIFY_TLS_KEY)"
            )
        else:
            why = f"the TLS handshake failed ({getattr(exc, 'reason', None) or text})"
        return DaemonUnavailable(f"fastverifyd at {where}: {why}")

    def _where(self) -> str:
        return f"tcp://{self.tcp}" if self.tcp else str(self.socket_path)

    def _no_answer(self, exc: BaseException, timeout: float | None) -> DaemonUnavailable:
        """One sentence for a daemon that took the connection but did not answer."""
        where = self._where()
        if isinstance(exc, TimeoutError):
            return DaemonUnavailable(
                f"fastverifyd at {where} did not answer within {timeout or 0:g} s: it is stopped "
                "(SIGSTOP, a debugger) or overloaded; check `systemctl status fastverifyd` "
                "or its process state"
            )
        if isinstance(exc, BlockingIOError):
            return DaemonUnavailable(
                f"fastverifyd at {where} is not accepting connections (its queue is full: "
                "stopped or overloaded); retry in a moment"
            )
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return DaemonUnavailable(
            f"fastverifyd at {where} closed the connection without answering ({reason}); "
            "it may be overloaded or restarting: retry in a moment"
        )

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
            if self.tcp:
                hint = (
                    "is it running and listening there? (fastverifyd --tcp-listen HOST:PORT; "
                    "another daemon: pass --host tcp://HOST:PORT or set FASTVERIFY_HOST)"
                )
            else:
                hint = (
                    "is it running? (start it with `fastverifyd`; another socket: pass "
                    "--socket PATH or set FASTVERIFY_SOCKET)"
                )
            raise DaemonUnavailable(
                f"fastverifyd is not reachable at {self._where()} ({exc.strerror or exc}); {hint}"
            ) from None
        except PermissionError:
            raise DaemonRefused(
                f"permission denied on {self.socket_path}: join the 'fastverify' group or use sudo"
            ) from None
        except OSError as exc:  # EAGAIN (full accept queue), timeout, reset, ...
            raise self._tls_refusal(exc) or self._no_answer(exc, timeout) from None
        try:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
            resp = _Response(sock)
        except OSError as exc:  # TimeoutError, ConnectionResetError, BrokenPipeError, ...
            sock.close()  # (TLS 1.3: a refused client certificate shows on the first read)
            raise self._tls_refusal(exc) or self._no_answer(exc, timeout) from None
        except BaseException:
            sock.close()
            raise
        if resp.status == 503:  # too many connections, or shutting down: nothing was done
            try:
                data = _decode(resp.read())
            except OSError:
                data = {}
            finally:
                resp.close()
            why = data.get("error") if isinstance(data, dict) else None
            raise DaemonUnavailable(
                f"fastverifyd at {self._where()} is busy or shutting down "
                f"(HTTP 503: {why or 'service unavailable'}); nothing was done, retry in a moment"
            )
        return resp

    def request(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        timeout = timeout or self.timeout
        resp = self._send(method, path, body, timeout)
        try:
            raw = resp.read()
        except OSError as exc:
            raise self._no_answer(exc, timeout) from None
        finally:
            resp.close()
        try:
            data = _decode(raw)
        except ValueError:
            raise DaemonUnavailable(
                f"fastverifyd at {self._where()} sent an answer that is not JSON "
                f"(HTTP {resp.status}); is another program listening there?"
            ) from None
        if resp.status >= 400:
            raise ApiError(resp.status, data if isinstance(data, dict) else {"error": str(data)})
        return data

    def stream(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        answer_timeout: float | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield one dict per NDJSON line of a streaming response (operation events).

        `answer_timeout` bounds the wait for the response to start (a stopped daemon is then
        DaemonUnavailable); `timeout` bounds each later read (None: events may be minutes
        apart). A connection that breaks mid-stream raises ConnectionLost.
        """
        resp = self._send(method, path, body, answer_timeout or timeout)
        try:
            self_sock = resp._sock
            self_sock.settimeout(timeout)
            if resp.status >= 400:
                try:
                    data = _decode(resp.read())
                except (OSError, ValueError):
                    data = {}
                raise ApiError(
                    resp.status, data if isinstance(data, dict) else {"error": str(data)}
                )
            try:
                for line in resp:
                    line = line.strip()
                    if line:
                        yield json.loads(line)
            except OSError as exc:
                raise ConnectionLost(
                    f"the connection to fastverifyd broke before the result "
                    f"({getattr(exc, 'strerror', None) or exc or type(exc).__name__})"
                ) from None
            except ValueError:
                raise ConnectionLost("fastverifyd sent a malformed event line") from None
        finally:
            resp.close()


def _target(ep: m.Endpoint[Any, Any], fields: dict[str, Any]) -> tuple[str, Any]:
    """(path with the query, body) of a call to `ep` with `fields`."""
    declared = set(ep.names)
    unknown = sorted(set(fields) - declared)
    if unknown:
        raise TypeError(
            f"{ep.method} {ep.path} takes no field {', '.join(unknown)} "
            f"(it takes: {', '.join(sorted(declared)) or 'none'})"
        )
    given = {k: v for k, v in fields.items() if v is not None}
    if ep.method == "POST":
        return ep.path, given
    if not given:
        return ep.path, None
    query = "&".join(
        f"{k}={_quote(int(v) if isinstance(v, bool) else v)}" for k, v in given.items()
    )
    return f"{ep.path}?{query}", None


_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _quote(value: Any) -> str:
    """A query value percent-encoded (urllib.parse costs the CLI's start-up ~30 ms)."""
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in str(value).encode())


def _decode(raw: bytes) -> Any:
    return json.loads(raw) if raw.strip() else {}


def _finished(rec: a.HistoryRecord) -> float:
    """A history record's place for paging (`before=`): its finish time."""
    at = rec.get("finished_at", rec.get("started_at"))
    return float(at) if isinstance(at, int | float) else 0.0
