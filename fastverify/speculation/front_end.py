"""The serial intake in front of SGLang's scheduler, as the serving model prices it: what it
costs (`FrontEnd`, measured by `spec costs` at its batch point) and its queue (`Intake`).

A request reaches SGLang's scheduler through the client's own loop, SGLang's HTTP server and
its tokenizer manager (one process, one event loop) and the socket between them. Alone it
takes the same few ms every time (`Costs.prefill_latency` prices that). Many requests sent
together share that loop: SGLang 0.5.17 on an H100 (8B shape, 128-token prompts, its own
stamps of each request, 2026-12-07) handed the first of 32 prompts sent at once to the
scheduler 58 ms after the first send and the others 0.37 ms apart, where one prompt alone
is handed on after 3.7 ms. So the queue is two stages:
- `share_s`: the work each request brings to the shared loop, served round-robin (processor
  sharing): requests sent together all leave it together, after the sum of their work;
- `serial_s`: then one at a time, this far apart, into the scheduler's waiting queue.
Each forward takes the prompts that reached the scheduler before it began, so a round of
prompts sent at once leaves in a few forwards, not one.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
DONE_EPS_S = 1e-12  # work left under this is done (floating-point remainder)


@dataclass(frozen=True)
class FrontEnd:
    """Seconds each request costs the shared intake loop, and the spacing it then reaches
    the scheduler at (module docstring); `source` says where they were measured."""

    share_s: float
    serial_s: float
    source: str = ""

    def lone_s(self) -> float:
        """What a request alone spends in the two stages."""
        return self.share_s + self.serial_s

    def to_dict(self) -> dict[str, Any]:
        return {"share_ms": round(self.share_s * 1e3, 4),
                "serial_ms": round(self.serial_s * 1e3, 4), "source": self.source}  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FrontEnd:
        return cls(float(d["share_ms"]) * 1e-3, float(d["serial_ms"]) * 1e-3,
                   str(d.get("source") or ""))  # fmt: skip


def from_rounds(
    rounds: Sequence[Mapping[str, Any]], lone_ms: float, source: str = ""
) -> FrontEnd | None:
    """The front end from rounds of n prompts sent at once (`spec costs`' batch point
    `rounds_server`: each round's `dispatched_ms`, when SGLang's tokenizer manager handed
    each prompt to the scheduler, ms from the round's first send) and what one prompt alone
    took to that hand-off (`lone_ms`): per round, the first hand-off less `lone_ms` over
    n - 1 (the others' shares) and the hand-offs' mean spacing; the median over the rounds.
    Not the waiting queue's entries: the scheduler reads its socket between forwards, so
    those come in groups a forward apart. None without a round of two or more."""
    shares, serials = [], []
    for r in rounds:
        arr = sorted(float(a) for a in r.get("dispatched_ms") or [])
        n = len(arr)
        if n < 2:
            continue
        shares.append(max(0.0, arr[0] - lone_ms) / (n - 1))
        serials.append((arr[-1] - arr[0]) / (n - 1))
    if not shares:
        return None
    return FrontEnd(statistics.median(shares) * 1e-3, statistics.median(serials) * 1e-3, source)


class Intake(Generic[T]):
    """The front end's queue in the serving model: `enter` a request at a time, `until(t)`
    hands out what reached the scheduler by t. Enters must come in at or after the time the
    queue was last asked about (the serving loop's clock only moves on)."""

    def __init__(self, front: FrontEnd | None) -> None:
        self.share = front.share_s if front else 0.0
        self.serial = front.serial_s if front else 0.0
        self._pending: list[tuple[float, int, T]] = []  # (enter time, order, item)
        self._active: list[list[Any]] = []  # [work left, order, item], in order of entry
        self._left: list[tuple[float, int, T]] = []  # (scheduler arrival, order, item)
        self._clock = 0.0
        self._serial_free = 0.0
        self._order = 0

    def enter(self, t: float, item: T) -> None:
        heapq.heappush(self._pending, (t, self._order, item))
        self._order += 1

    def __len__(self) -> int:
        return len(self._pending) + len(self._active) + len(self._left)

    def until(self, t: float) -> list[tuple[float, T]]:
        """(arrival, item) of every request at the scheduler by `t`, in arrival order."""
        self._advance(t)
        out = []
        while self._left and self._left[0][0] <= t:
            at, _, item = heapq.heappop(self._left)
            out.append((at, item))
        return out

    def next_arrival(self) -> float | None:
        """The next arrival at the scheduler if nothing else enters first (the server is
        idle, so nothing finishes to send another); None when the queue is empty."""
        while not self._left and (self._pending or self._active):
            nxt = self._pending[0][0] if self._pending else math.inf
            done_at = self._clock + self._min_work() * len(self._active) if self._active else nxt
            self._advance(min(nxt, done_at))
        return self._left[0][0] if self._left else None

    def _min_work(self) -> float:
        return min(j[0] for j in self._active)

    def _advance(self, t: float) -> None:
        while True:
            nxt = self._pending[0][0] if self._pending else math.inf
            horizon = min(t, nxt)
            while self._active and self._clock < horizon:
                k = len(self._active)
                m = self._min_work()
                step = min(m * k, horizon - self._clock)
                for j in self._active:
                    j[0] -= step / k
                self._clock += step
                for j in [j for j in self._active if j[0] <= DONE_EPS_S]:
                    self._active.remove(j)
                    self._hand_off(j[1], j[2])
            if horizon > self._clock and horizon != math.inf:
                self._clock = horizon
            if nxt <= t and self._pending:
                at, order, item = heapq.heappop(self._pending)
                self._clock = max(self._clock, at)
                if self.share <= DONE_EPS_S:  # no shared work: straight to the serial stage
                    self._hand_off(order, item)
                else:
                    self._active.append([self.share, order, item])
                continue
            return

    def _hand_off(self, order: int, item: T) -> None:
        """Out of the shared loop now: to the scheduler at the next free serial step."""
        self._serial_free = max(self._serial_free, self._clock) + self.serial
        heapq.heappush(self._left, (self._serial_free, order, item))
