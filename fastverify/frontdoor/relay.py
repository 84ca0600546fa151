"""The front door's HTTP/1.1 relay: one client connection at a time per task, keep-alive on
both sides, request bodies buffered (so a request can be held), response bodies relayed as
they come (Content-Length, chunked SSE, or until close).

Any path passes through unchanged (OpenAI-compatible, SGLang's native routes, /health,
/metrics). While no engine serves, a `GET /metrics` (a scraper's) is answered 503 at once:
there is no engine to read, and a scrape is no client request to hold or count. A request
that outwaits the hold gets 503 with Retry-After; one whose answer the
engine breaks off is counted as cut (gate.py), once, and never retried: the engine may have
acted on it. An answer is whole once the client has every byte of its content: an engine that
dies after an event stream's last event (`data: [DONE]`, SGLang's and OpenAI's end) but before
the chunked body's last chunk cut nothing; the front door ends the message for the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from typing import Any

from fastverify.frontdoor.gate import Gate, Refusal

log = logging.getLogger("fastverify.frontdoor")

HEAD_LIMIT = 64 * 1024
READ = 64 * 1024
IDLE_KEEP = 32  # idle upstream connections kept per engine port
STREAM_END = b"data: [DONE]\n\n"  # an event stream's last event (SGLang's streams end so)


class BadRequest(Exception):
    pass


class UpstreamBroke(Exception):
    """The engine closed in the middle of an answer."""


async def _up(coro: Any) -> Any:
    """An upstream read; its connection errors become UpstreamBroke (a client's stay theirs)."""
    try:
        return await coro
    except (asyncio.IncompleteReadError, ConnectionError):
        raise UpstreamBroke from None


class UpstreamGone(Exception):
    """The engine closed before the response began (no byte reached the client)."""


def _headers(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    out: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(f"malformed header line {line!r}")
        out[name.strip().lower()] = value.strip()
    return lines[0], out


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A whole chunked body, raw (sizes, data and trailers), as it will be forwarded."""
    parts = []
    while True:
        line = await reader.readuntil(b"\r\n")
        parts.append(line)
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while True:
                trailer = await reader.readuntil(b"\r\n")
                parts.append(trailer)
                if trailer == b"\r\n":
                    return b"".join(parts)
        parts.append(await reader.readexactly(size + 2))


def _simple(status: int, reason: str, body: dict, extra: str = "") -> bytes:
    data = json.dumps(body).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n{extra}\r\n"
    ).encode() + data


def _quickack(writer: asyncio.StreamWriter) -> None:
    """ACK the engine's answer at once: a server that writes its head and body in two sends
    with Nagle on (Python's http.server, the sim) waits for that ACK before the body, and a
    delayed ACK costs up to 40 ms per answer (measured: the sim's GET /get_model_info 44 ms
    direct, 0.3 ms through the front door with this)."""
    sock = writer.get_extra_info("socket")
    if sock is not None and hasattr(socket, "TCP_QUICKACK"):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)


class Upstreams:
    """Idle keep-alive connections to the engine, per port."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.idle: dict[int, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self.last_port: int | None = None

    async def get(
        self, port: int, fresh: bool = False
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        """A connection to `port`: an idle one (unless `fresh`), else a new one; and
        whether it was idle."""
        if port != self.last_port:  # cut over: the old engine's idle connections go
            self.drop_others(port)
            self.last_port = port
        pool = None if fresh else self.idle.get(port)
        while pool:
            reader, writer = pool.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer, True
            writer.close()
        reader, writer = await asyncio.open_connection(self.host, port, limit=HEAD_LIMIT)
        return reader, writer, False

    def put(self, port: int, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        pool = self.idle.setdefault(port, [])
        if len(pool) < IDLE_KEEP:
            pool.append(conn)
        else:
            conn[1].close()

    def drop_others(self, port: int) -> None:
        """Close the idle connections to any other port (an engine that no longer serves)."""
        for p in [p for p in self.idle if p != port]:
            for _, writer in self.idle.pop(p):
                writer.close()


class Relay:
    """See the module docstring: `handle` serves one client connection."""

    def __init__(self, gate: Gate, upstream_host: str) -> None:
        self.gate = gate
        self.upstreams = Upstreams(upstream_host)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except BadRequest as exc:
            with contextlib.suppress(ConnectionError):
                close = "Connection: close\r\n"
                writer.write(_simple(400, "Bad Request", {"error": str(exc)}, close))
                await writer.drain()
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Relay one request; True when the client connection stays open for the next."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        line, headers = _headers(head)
        parts = line.split(" ")
        if len(parts) != 3:
            raise BadRequest(f"malformed request line {line!r}")
        method, target, _ = parts
        if headers.get("expect", "").lower() == "100-continue":
            # answer it here (the body is read before any engine is chosen) and do not pass
            # it on: the engine's own 100 would arrive after the body was sent
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            head = b"\r\n".join(
                h for h in head.split(b"\r\n") if not h.lower().startswith(b"expect:")
            )
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        else:
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                raise BadRequest("invalid Content-Length") from None
            body = await reader.readexactly(length) if length else b""
        client_close = headers.get("connection", "").lower() == "close"
        name = f"{method} {target}"
        request = head + body
        if method == "GET" and target.split("?", 1)[0] == "/metrics" and not self.gate.serving:
            writer.write(_simple(503, "Service Unavailable",
                                 {"error": "no engine serves now (the engine is being replaced)"},
                                 f"Retry-After: {self.gate.retry_after_s}\r\n"))  # fmt: skip
            await writer.drain()
            return not client_close
        port = await self.gate.admit(name)
        while True:
            if isinstance(port, Refusal):
                writer.write(
                    _simple(
                        503,
                        "Service Unavailable",
                        {"error": f"the server is switching engines: {port.why}; retry later"},
                        f"Retry-After: {port.retry_after_s}\r\n",
                    )
                )
                await writer.drain()
                return not client_close
            try:
                return await self._forward(port, request, method, name, writer) and not client_close
            except ConnectionRefusedError:
                # the engine's port is closed: nothing reached it, so the request may wait
                # for the next engine (fastverifyd says where, or max_wait_s refuses it)
                if self.gate.port == port:
                    self.gate.engine_gone()
                port = await self.gate.wait(name)
            except UpstreamGone:
                self.gate.cut(name)
                writer.write(
                    _simple(
                        502,
                        "Bad Gateway",
                        {"error": "the engine closed the connection before answering"},
                        "Connection: close\r\n",
                    )
                )
                await writer.drain()
                return False

    async def _forward(
        self, port: int, request: bytes, method: str, name: str, writer: asyncio.StreamWriter
    ) -> bool:
        """Send `request` to `port` and relay the answer; True when both sides stay open."""
        fid = self.gate.begin(name, port)
        try:
            for attempt in (0, 1):
                # the second try opens a new connection: a dead engine's port refuses it (the
                # request waits for the next engine) where another idle one would break too
                up_reader, up_writer, reused = await self.upstreams.get(port, fresh=attempt > 0)
                try:
                    up_writer.write(request)
                    await up_writer.drain()
                    _quickack(up_writer)
                    head = await up_reader.readuntil(b"\r\n\r\n")
                    break
                except (ConnectionError, asyncio.IncompleteReadError) as exc:
                    up_writer.close()
                    if reused and attempt == 0:
                        continue  # an idle keep-alive connection the engine had closed
                    raise UpstreamGone(str(exc)) from None
            return await self._relay_body(port, head, method, name, up_reader, up_writer, writer)
        finally:
            self.gate.end(fid)

    async def _relay_body(
        self,
        port: int,
        head: bytes,
        method: str,
        name: str,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        writer: asyncio.StreamWriter,
    ) -> bool:
        status_line, headers = _headers(head)
        status = int(status_line.split(" ", 2)[1])
        writer.write(head)
        keep = headers.get("connection", "").lower() != "close"
        events = headers.get("content-type", "").lower().startswith("text/event-stream")
        done = False
        intact = True  # the engine ended the message itself (its connection may serve again)
        try:
            if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                pass
            elif "chunked" in headers.get("transfer-encoding", "").lower():
                intact = await self._relay_chunked(up_reader, writer, events)
            elif "content-length" in headers:
                left = int(headers["content-length"])
                while left:
                    data = await _up(up_reader.read(min(left, READ)))
                    if not data:
                        raise UpstreamBroke
                    writer.write(data)
                    await writer.drain()
                    left -= len(data)
            else:  # the body ends when the engine closes
                keep = False
                tail = b""
                try:
                    while data := await _up(up_reader.read(READ)):
                        writer.write(data)
                        await writer.drain()
                        tail = (tail + data[-len(STREAM_END) :])[-len(STREAM_END) :]
                except UpstreamBroke:
                    if not (events and tail == STREAM_END):
                        raise
            done = True
            await writer.drain()
        except UpstreamBroke:
            self.gate.cut(name)
            raise ConnectionError("the engine broke off the answer") from None
        finally:
            if done and keep and intact:
                self.upstreams.put(port, (up_reader, up_writer))
            else:
                up_writer.close()
        return keep

    @staticmethod
    async def _relay_chunked(
        up: asyncio.StreamReader, writer: asyncio.StreamWriter, events: bool
    ) -> bool:
        """Relay a chunked body as it comes. True when the engine ended it; False when the
        engine broke off after the answer was whole (an event stream's last event relayed,
        or the last chunk) and the front door wrote the message's end itself. UpstreamBroke
        when it broke off before."""
        tail = b""  # the body's last bytes relayed (an event stream's end spans chunks)
        owed: bytes | None = None  # what ends the message if the engine breaks off now
        try:
            while True:
                line = await _up(up.readuntil(b"\r\n"))
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    writer.write(line)
                    owed = b"\r\n"  # the body is whole; only the trailers' end is missing
                    while True:
                        trailer = await _up(up.readuntil(b"\r\n"))
                        writer.write(trailer)
                        if trailer == b"\r\n":
                            return True
                data = await _up(up.readexactly(size + 2))
                writer.write(line + data)
                await writer.drain()
                # (only the chunk's last bytes: no copy of a whole chunk per chunk)
                tail = (tail + data[-len(STREAM_END) - 2 : -2])[-len(STREAM_END) :]
                owed = b"0\r\n\r\n" if events and tail == STREAM_END else None
        except UpstreamBroke:
            if owed is None:
                raise
            log.info("the engine closed after its answer was whole; the front door ended it")
            writer.write(owed)
            return False
