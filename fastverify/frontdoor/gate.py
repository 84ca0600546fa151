"""The front door's hold state: where new requests go (the engine's port, or a bounded
queue while fastverifyd switches the engine), the requests in flight, and the counts.

One `Episode` runs from one cut-over to the next: the requests held, their longest wait,
the requests refused (queue full, or waited longer than `max_wait_s`) and the streams cut
(the engine went away mid-answer). `serve(port)` closes it and returns its figures, which
become the switch's result. A standby switch's old engine stops after the cut-over: its cuts
go to that switch's record with `take_cuts`, which takes them out of the episode, so that
each cut is named in one record only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

# Hold-time histogram buckets (seconds): a held request waits from a few ms (standby
# cut-over) to minutes (a real SGLang start, 50-83 s on the H200).
HOLD_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
NAMES_KEPT = 20  # cut requests named per episode (the count is always whole)


@dataclass
class Refusal:
    """A held request answered 503 + Retry-After instead of being forwarded."""

    why: str
    retry_after_s: int


@dataclass
class Episode:
    """Everything since the last cut-over (see the module docstring)."""

    hold_at: float | None = None  # monotonic; None: no hold asked since the last cut-over
    held: int = 0
    longest_wait_s: float = 0.0
    refused: int = 0
    cut: int = 0
    cut_names: list[str] = field(default_factory=list)

    def figures(self, released_at: float) -> dict[str, Any]:
        downtime = 0.0 if self.hold_at is None else released_at - self.hold_at
        return {
            "downtime_s": round(downtime, 4),
            "held": self.held,
            "longest_wait_s": round(self.longest_wait_s, 4),
            "refused": self.refused,
            "cut": self.cut,
            "cut_requests": list(self.cut_names),
        }


class Gate:
    """See the module docstring. Lives on the front door's event loop (not thread-safe)."""

    def __init__(self, queue_size: int, max_wait_s: float, retry_after_s: int = 5) -> None:
        self.queue_size = queue_size
        self.max_wait_s = max_wait_s
        self.retry_after_s = retry_after_s
        self.port: int | None = None
        self.holding = False
        self._released = asyncio.Event()
        self._waiting: dict[int, float] = {}  # held requests: when each began to wait
        self._ids = itertools.count(1)
        self.in_flight: dict[int, tuple[str, int]] = {}  # request -> (name, engine port)
        self._ended = asyncio.Event()  # set at each end: a drain looks again
        self.episode = Episode()
        self.last_episode: dict[str, Any] | None = None
        self.totals = {"requests": 0, "held": 0, "refused": 0, "cut": 0, "switches": 0}
        self.hold_counts = [0] * (len(HOLD_BUCKETS) + 1)  # the last one is +Inf
        self.hold_sum = 0.0
        self.closing = False  # the front door stops: held requests are answered 503

    # ---------------------------------------------------------------- requests
    async def admit(self, name: str) -> int | Refusal:
        """The port to send a new request to, after waiting out a hold; or a Refusal."""
        self.totals["requests"] += 1
        if self.serving and self.port is not None:
            return self.port
        return await self.wait(name)

    async def wait(self, name: str) -> int | Refusal:
        """Hold one request until the next cut-over (bounded by the queue and max_wait_s)."""
        if self.waiting >= self.queue_size:
            return self._refuse(f"the hold queue is full ({self.queue_size} requests waiting)")
        self.episode.held += 1
        self.totals["held"] += 1
        token = next(self._ids)
        t0 = self._waiting[token] = time.monotonic()
        try:
            while self.holding or self.port is None or self.closing:
                if self.closing:
                    return self._refuse("the front door is stopping")
                left = self.max_wait_s - (time.monotonic() - t0)
                if left <= 0:
                    self.episode.longest_wait_s = max(self.episode.longest_wait_s, self.max_wait_s)
                    return self._refuse(f"held {self.max_wait_s:g} s without an engine")
                released = self._released
                try:
                    await asyncio.wait_for(released.wait(), left)
                except TimeoutError:
                    continue
        finally:
            del self._waiting[token]
            self._observe(time.monotonic() - t0)
        return self.port

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _refuse(self, why: str) -> Refusal:
        self.episode.refused += 1
        self.totals["refused"] += 1
        return Refusal(why, self.retry_after_s)

    def _observe(self, seconds: float) -> None:
        self.hold_sum += seconds
        for i, le in enumerate(HOLD_BUCKETS):
            if seconds <= le:
                self.hold_counts[i] += 1
                return
        self.hold_counts[-1] += 1

    def begin(self, name: str, port: int) -> int:
        """A request forwarded to the engine on `port`: in flight until `end`."""
        fid = next(self._ids)
        self.in_flight[fid] = (name, port)
        return fid

    def end(self, fid: int) -> None:
        self.in_flight.pop(fid, None)
        self._ended.set()

    def cut(self, name: str) -> None:
        """The engine went away in the middle of `name`'s answer."""
        self.episode.cut += 1
        self.totals["cut"] += 1
        if len(self.episode.cut_names) < NAMES_KEPT:
            self.episode.cut_names.append(name)

    def take_cuts(self) -> dict[str, Any]:
        """The streams cut so far this episode, for the record of the switch that cut them
        (see the module docstring); the episode goes on without them."""
        taken = {"cut": self.episode.cut, "cut_requests": list(self.episode.cut_names)}
        self.episode.cut, self.episode.cut_names = 0, []
        return taken

    def engine_gone(self) -> None:
        """The engine's port refused a connection: hold until fastverifyd says where to go."""
        if self.episode.hold_at is None:
            self.episode.hold_at = time.monotonic()
        self.holding = True
        if self._released.is_set():
            self._released = asyncio.Event()

    # ---------------------------------------------------------------- control
    def hold(self) -> None:
        """New requests wait from now on; requests in flight go on."""
        if self.episode.hold_at is None:
            self.episode.hold_at = time.monotonic()
        if not self.holding:
            self.holding = True
            self._released = asyncio.Event()

    def _names(self, port: int | None) -> list[str]:
        return [name for name, p in self.in_flight.values() if port is None or p == port]

    async def drain(self, timeout_s: float, port: int | None = None) -> dict[str, Any]:
        """Wait until nothing is in flight (on `port`: a standby cut-over drains the old
        engine while the new one serves), or `timeout_s`; what is still in flight then."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while self._names(port) and (left := deadline - time.monotonic()) > 0:
            self._ended.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ended.wait(), left)
        names = self._names(port)
        return {"drained": not names, "in_flight": len(names), "requests": names[:NAMES_KEPT]}

    def serve(self, port: int) -> dict[str, Any]:
        """Send requests (the held ones first) to `port`; the closed episode's figures."""
        now = time.monotonic()
        self.port = port
        if self._waiting:  # the held requests' waits end now
            oldest = now - min(self._waiting.values())
            self.episode.longest_wait_s = max(self.episode.longest_wait_s, oldest)
        figures = self.episode.figures(now)
        self.episode = Episode()
        self.last_episode = figures
        self.totals["switches"] += 1
        self.holding = False
        self._released.set()
        return figures

    def close(self) -> None:
        """The front door stops: every held request (and any new one) gets its 503 now."""
        self.closing = True
        self._released.set()

    @property
    def serving(self) -> bool:
        """A new request goes to an engine now (no hold, an engine, not closing)."""
        return not self.holding and self.port is not None and not self.closing

    def state(self) -> str:
        if self.port is None:
            return "no_engine"
        return "holding" if self.holding else "serving"

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state(),
            "port": self.port,
            "in_flight": len(self.in_flight),
            "waiting": self.waiting,
            "queue_size": self.queue_size,
            "max_wait_s": self.max_wait_s,
            "totals": dict(self.totals),
            "hold_seconds": {
                "buckets": list(HOLD_BUCKETS),
                "counts": list(self.hold_counts),
                "sum": round(self.hold_sum, 6),
            },
            "episode": self.episode.figures(time.monotonic()),
            "last_episode": self.last_episode,
        }
