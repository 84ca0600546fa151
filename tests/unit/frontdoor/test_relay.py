"""The relay over real sockets: a chunked stream passes through chunk by chunk, an
`Expect: 100-continue` is answered by the front door, a stream the engine breaks off is
counted as cut, a refused engine port holds the request until the next cut-over, and a
scrape of /metrics during a hold is answered at once, neither held nor counted."""

from __future__ import annotations

import asyncio

from fastverify.frontdoor.gate import Gate
from fastverify.frontdoor.relay import Relay

CHUNKS = [b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"]


async def engine(break_after: int | None = None) -> tuple[asyncio.AbstractServer, int]:
    """An HTTP/1.1 server that answers every request with a chunked stream."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n")
                           if h.lower().startswith(b"content-length")), 0)  # fmt: skip
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i, c in enumerate(CHUNKS):
                if break_after is not None and i == break_after:
                    writer.transport.abort()
                    return
                writer.write(b"%x\r\n%s\r\n" % (len(c), c))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def door(gate: Gate) -> int:
    server = await asyncio.start_server(Relay(gate, "127.0.0.1").handle, "127.0.0.1", 0)
    return server.sockets[0].getsockname()[1]


async def post(port: int, expect: bool = False) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b'{"stream": true}'
    extra = b"Expect: 100-continue\r\n" if expect else b""
    writer.write(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n"
                 % (len(body), extra))  # fmt: skip
    if expect:
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(body)
    out = b""
    while not out.endswith(b"0\r\n\r\n"):
        data = await reader.read(65536)
        if not data:
            break
        out += data
    writer.close()
    return out


def test_stream_passes_and_expect_is_answered() -> None:
    async def go() -> None:
        _, eport = await engine()
        gate = Gate(8, 30)
        gate.serve(eport)
        port = await door(gate)
        for expect in (False, True):
            out = await post(port, expect)
            assert out.startswith(b"HTTP/1.1 200 OK") and b"data: [DONE]" in out
        assert gate.status()["totals"]["cut"] == 0

    asyncio.run(go())


def test_a_broken_stream_is_cut_and_a_refused_port_holds() -> None:
    async def go() -> None:
        broken, bport = await engine(break_after=1)
        gate = Gate(8, 30)
        gate.serve(bport)
        port = await door(gate)
        out = await post(port)
        assert b"data: 1" in out and b"[DONE]" not in out
        assert gate.status()["totals"]["cut"] == 1
        broken.close()
        await broken.wait_closed()
        held = asyncio.create_task(post(port))  # the engine's port refuses: held
        while gate.waiting == 0:
            await asyncio.sleep(0)
        assert gate.state() == "holding"
        _, good = await engine()
        gate.serve(good)
        assert b"data: [DONE]" in await held

    asyncio.run(go())


async def get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
    head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    return head


def test_a_scrape_during_a_hold_is_answered_at_once() -> None:
    async def go() -> None:
        _, eport = await engine()
        gate = Gate(8, 30, retry_after_s=7)
        gate.serve(eport)
        port = await door(gate)
        gate.hold()
        head = await get(port, "/metrics")
        assert head.startswith(b"HTTP/1.1 503") and b"Retry-After: 7" in head
        assert gate.status()["totals"]["held"] == gate.waiting == 0
        held = asyncio.create_task(get(port, "/health"))  # any other path waits
        while gate.waiting == 0:
            await asyncio.sleep(0)
        gate.serve(eport)
        assert (await held).startswith(b"HTTP/1.1 200")

    asyncio.run(go())
