"""The relay over real sockets: a chunked stream passes through chunk by chunk, an
`Expect: 100-continue` is answered by the front door, a stream the engine breaks off is
counted as cut (once, and only when the client lacks part of its answer: an engine that dies
after the last event cuts nothing), a refused engine port holds the request until the next
cut-over (as does a dead engine's idle connection), and a scrape of /metrics during a hold
is answered at once, neither held nor counted."""

from __future__ import annotations

import asyncio

from fastverify.frontdoor.gate import Gate
from fastverify.frontdoor.relay import Relay
from tests.support.streams import one_stream

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


class Engine:
    """An engine the test steps: it answers one SSE stream up to a point the test names,
    then waits until the test lets it go on, and breaks off (RST) or ends the answer."""

    def __init__(self, stop_at: bytes) -> None:
        self.stop_at = stop_at  # the bytes after which it waits (a prefix of ANSWER)
        self.go_on = asyncio.Event()
        self.break_off = True

    ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n"
              + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in CHUNKS) + b"0\r\n\r\n")  # fmt: skip

    async def start(self) -> int:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(len(b'{"stream": true}'))
            assert self.ANSWER.startswith(self.stop_at)
            writer.write(self.stop_at)
            await writer.drain()
            await self.go_on.wait()
            if self.break_off:
                writer.transport.abort()
            else:
                writer.write(self.ANSWER[len(self.stop_at) :])
                await writer.drain()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return server.sockets[0].getsockname()[1]


async def until(reader: asyncio.StreamReader, marker: bytes, out: bytes = b"") -> bytes:
    """What the client has read (`out` and on) when it ends with `marker` (or closed)."""
    while not out.endswith(marker) and (data := await reader.read(65536)):
        out += data
    return out


def _stream_broken_after(stop_at: bytes) -> tuple[bytes, dict]:
    """A client streams through the front door; the engine stops after `stop_at` and, once
    the client has read all of it, is killed. What the client read in all, and the counts."""

    async def go() -> tuple[bytes, dict]:
        eng = Engine(stop_at)
        gate = Gate(8, 30)
        gate.serve(await eng.start())
        reader, writer = await asyncio.open_connection("127.0.0.1", await door(gate))
        body = b'{"stream": true}'
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        seen = await until(reader, stop_at)
        eng.go_on.set()  # the client has its bytes: now the engine dies
        seen = await until(reader, b"0\r\n\r\n", seen)
        assert (await gate.drain(30))["drained"]  # the relay is done with the request
        writer.close()
        return seen, gate.status()["totals"]

    return asyncio.run(go())


def test_an_engine_killed_after_the_last_event_cuts_nothing() -> None:
    # the client has the whole answer (`data: [DONE]`); the engine dies before it writes the
    # chunked body's last chunk: the front door ends the message, and counts no cut
    done = Engine.ANSWER.index(b"0\r\n\r\n")
    seen, totals = _stream_broken_after(Engine.ANSWER[:done])
    assert seen.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), seen
    assert totals["cut"] == 0
    # the same after the last chunk's size line (the body is whole, the message's end is not)
    seen, totals = _stream_broken_after(Engine.ANSWER[: done + 3])
    assert seen.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), seen
    assert totals["cut"] == 0


def test_an_engine_killed_before_the_last_event_is_one_cut() -> None:
    # the client lacks `data: [DONE]`: cut, once, and the message is left unended (a client
    # that reads it to the end sees it broken off)
    before = Engine.ANSWER.index(b"e\r\ndata: [DONE]")
    seen, totals = _stream_broken_after(Engine.ANSWER[:before])
    assert b"data: 2" in seen and b"[DONE]" not in seen and not seen.endswith(b"0\r\n\r\n")
    assert totals["cut"] == 1


def test_a_dead_engines_idle_connections_hold_the_request() -> None:
    # the engine dies with two idle keep-alive connections whose close the relay has not
    # seen: the request breaks on one, and its second try opens a new connection (refused:
    # the request waits for the next engine), never a second idle one (a 502, a cut)
    async def go() -> None:
        both_asked, dead = asyncio.Event(), asyncio.Event()
        asked = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal asked
            while True:
                try:
                    await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                await reader.readexactly(len(b'{"stream": true}'))
                if dead.is_set():
                    writer.transport.abort()
                    return
                asked += 1
                if asked == 2:
                    both_asked.set()
                await both_asked.wait()  # two requests at once: two upstream connections
                writer.write(Engine.ANSWER)
                await writer.drain()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        eport = server.sockets[0].getsockname()[1]
        gate = Gate(8, 30)
        gate.serve(eport)
        relay = Relay(gate, "127.0.0.1")
        front = await asyncio.start_server(relay.handle, "127.0.0.1", 0)
        port = front.sockets[0].getsockname()[1]
        assert all(b"data: [DONE]" in out for out in await asyncio.gather(post(port), post(port)))
        assert len(relay.upstreams.idle[eport]) == 2
        dead.set()  # the engine dies: its port refuses, its connections break on the next use
        server.close()
        held = asyncio.create_task(post(port))
        while gate.waiting == 0 and not held.done():
            await asyncio.sleep(0)
        assert not held.done(), await held
        _, good = await engine()
        gate.serve(good)
        assert b"data: [DONE]" in await held
        assert gate.status()["totals"]["cut"] == 0

    asyncio.run(go())


def test_the_switch_tests_client_calls_ok_only_an_ended_message() -> None:
    # tests/support/streams.py, the client whose tally the switch tests set beside the front
    # door's counts: `data: [DONE]` and then the message's end is ok; a close after
    # `data: [DONE]` without the last chunk is cut (a strict HTTP client reads it broken)
    async def go(ended: bool) -> tuple[str, str]:
        answer = Engine.ANSWER if ended else Engine.ANSWER[: Engine.ANSWER.index(b"0\r\n\r\n")]

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n")
                          if h.lower().startswith(b"content-length"))  # fmt: skip
            await reader.readexactly(length)
            writer.write(answer)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        kind, detail, _ = await asyncio.to_thread(one_stream, url, 30)
        server.close()
        return kind, detail

    assert asyncio.run(go(ended=True)) == ("ok", "")
    kind, detail = asyncio.run(go(ended=False))
    assert kind == "cut" and "IncompleteRead after [DONE]" in detail, detail
