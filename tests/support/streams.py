"""Streaming clients for switch tests: closed-loop SSE chat completions against a daemon's
public URL, each answer sorted into ok (every event through `data: [DONE]`, and the HTTP
message ended: the body is read to its end, as a strict HTTP client reads it) / cut (the
stream ended before `data: [DONE]` or broke off after it, or the front door's 502 for a
request the engine died with) / failed (no answer: refused connection, an error status) / 503
(refused with Retry-After)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

BODY = json.dumps(
    {
        "model": "sim",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 24,
        "stream": True,
    }
).encode()


DONE = b"data: [DONE]\n"  # the stream's last event


@dataclass
class Tally:
    ok: int = 0
    cut: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    refused_503: list[dict] = field(default_factory=list)  # status, Retry-After
    ttft_s: list[float] = field(default_factory=list)


def one_stream(url: str, timeout: float = 120.0, body: bytes = BODY) -> tuple[str, str, dict]:
    """("ok" | "cut" | "failed" | "503", detail, headers) for one streaming request."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        try:
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
        except OSError as exc:
            return "failed", f"{type(exc).__name__}: {exc}", {}
        if resp.status == 503:
            resp.read()
            return "503", "", dict(resp.getheaders())
        if resp.status != 200:
            body = resp.read()
            if resp.status == 502 and b"closed the connection before answering" in body:
                # the engine died with the request sent: cut, as the front door counts it
                return "cut", "the engine closed before its answer began (front door 502)", {}
            return "failed", f"HTTP {resp.status}: {body[:200]!r}", {}
        done, tail = False, b""
        try:
            # read1, not readline: http.client's readline takes a chunked body that broke off
            # for its end, where read1 raises IncompleteRead
            while data := resp.read1(65536):
                tail = tail[-len(DONE) :] + data  # `data: [DONE]` may span two reads
                done = done or DONE in tail
        except (OSError, http.client.HTTPException) as exc:
            after = " after [DONE]" if done else ""
            return "cut", f"{type(exc).__name__}{after}: {exc}", {}
        return ("ok", "", {}) if done else ("cut", "the stream ended before [DONE]", {})
    finally:
        conn.close()


class Clients:
    """`n` closed-loop streaming clients; `answers` counts finished answers (any outcome).
    A client stops after its first failed answer (an engine that is down refuses at once:
    looping on it would only burn the machine)."""

    def __init__(self, url: str, n: int) -> None:
        self.url = url
        self.n = n
        self.tally = Tally()
        self.answers = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(n)]
        self.failed_clients = 0

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            kind, detail, headers = one_stream(self.url)
            with self._cond:
                self.answers += 1
                if kind == "ok":
                    self.tally.ok += 1
                    self.tally.ttft_s.append(time.monotonic() - t0)
                elif kind == "cut":
                    self.tally.cut.append(detail)
                elif kind == "503":
                    self.tally.refused_503.append(headers)
                else:
                    self.tally.failed.append(detail)
                    self.failed_clients += 1
                self._cond.notify_all()
            if kind in ("failed", "503"):
                return

    def __enter__(self) -> Clients:
        for t in self._threads:
            t.start()
        return self

    def wait_answers(self, count: int, timeout: float = 120.0) -> None:
        """Until `count` answers in all have finished (or every client has stopped)."""
        with self._cond:
            done = self._cond.wait_for(
                lambda: self.answers >= count or self.failed_clients >= self.n, timeout
            )
        assert done, f"only {self.answers} of {count} answers in {timeout} s"

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(150)


def under_clients(url: str, n: int, act: Callable[[], Any]) -> tuple[Any, Tally]:
    """`act()` while n clients stream: each has streamed once before it and streams on once
    after it; what it returned and the clients' tally."""
    with Clients(url, n) as clients:
        clients.wait_answers(n)
        out = act()
        clients.wait_answers(clients.answers + n)
    return out, clients.tally
