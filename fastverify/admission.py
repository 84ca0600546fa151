"""Who gets a connection slot, and for how long, on a listener that serves other people's
sockets (the control socket, the TCP door, the exporter's /metrics): the one home of the
defences against a slow or flooding peer.

- `Gate`: every accepted connection is *pending* until its request has arrived whole (the
  TLS handshake, the request line, the headers, the body, and on the TCP door the token).
  A pending connection has one deadline for all of that (not a timeout per `recv`, which
  one byte every few seconds renews); at the deadline the gate shuts the socket down, so
  the thread blocked on it returns and the slot is free. Past `pending_per_peer`
  connections of one peer or `pending_total` of all peers pending at once, one more cuts
  the oldest pending one (of that peer, else of all) that had EVICT_GRACE_S to send its
  request, so a peer that trickles bytes never holds a slot that a quick client needs
  (a quick client is past the gate in milliseconds; a burst of them cuts none of its own).
  One whose request head already waits whole in the kernel's buffer is not cut: that peer
  was quick, this side is slow to read it (a busy host), and it is never a trickler.
  A peer holds at most `per_peer` connections (streams and waiters included): one more
  cuts its oldest pending one at once, or is refused when none is pending.
- `Buckets`: a token bucket per key (a caller), for requests that write records.

A peer is what the listener can tell before authentication: the Unix socket's uid, the TCP
source address. Standard library only (the exporter and the daemon both use it).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

REQUEST_DEADLINE_S = 10.0
EVICT_GRACE_S = 0.5  # a pending request younger than this is not cut to make room
_PEEK_BYTES = 65536  # what `Ticket.request_waiting` looks at: a request head fits


class Ticket:
    """One connection at the gate: pending until `Gate.admitted`, counted until `Gate.left`."""

    __slots__ = ("_cut", "counted", "cut_why", "deadline", "peer", "pending", "seq", "since")

    def __init__(
        self, peer: str, since: float, deadline: float, sock: socket.socket, seq: int
    ) -> None:
        self.peer = peer
        self.since = since  # pending since
        self.deadline = deadline
        self.seq = seq
        self.pending = True
        self.counted = True  # in the peer's open connections
        self.cut_why = ""
        # a second descriptor of the same socket: the gate can shut it down whatever the
        # serving thread did to its own (wrapped it in TLS, closed it)
        self._cut: socket.socket | None = sock.dup()

    def request_waiting(self) -> bool:
        """Its request head (up to the blank line) already waits whole in the socket's
        buffer, unread by the serving thread (a peek, never a read)."""
        sock = self._cut
        if sock is None:
            return False
        try:
            data = sock.recv(_PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:  # nothing buffered (EAGAIN), or the socket is gone
            return False
        return b"\r\n\r\n" in data

    def cut(self, why: str) -> None:
        sock = self._cut
        if sock is not None:
            self.cut_why = why
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            self._drop()

    def _drop(self) -> None:
        sock, self._cut = self._cut, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()


class Gate:
    """Pending connections' deadlines and caps, per peer and in all (see the module doc).
    `on_cut(peer, why)` is told each cut ("deadline", "evicted")."""

    def __init__(
        self,
        *,
        deadline_s: float = REQUEST_DEADLINE_S,
        pending_per_peer: int = 16,
        pending_total: int = 128,
        per_peer: int = 256,
        on_cut: Callable[[str, str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.deadline_s = deadline_s
        self.pending_per_peer = pending_per_peer
        self.pending_total = pending_total
        self.per_peer = per_peer
        self._on_cut = on_cut or (lambda _peer, _why: None)
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._seq = itertools.count()
        self._pending: OrderedDict[int, Ticket] = OrderedDict()  # oldest first
        self._by_peer: dict[str, OrderedDict[int, Ticket]] = {}
        self._open: dict[str, int] = {}  # peer -> connections counted (pending or admitted)
        self._heap: list[tuple[float, int]] = []
        self.cuts = {"deadline": 0, "evicted": 0}
        threading.Thread(target=self._reaper, name="admission-deadlines", daemon=True).start()

    def enter(self, sock: socket.socket, peer: str) -> Ticket | None:
        """A ticket for a new connection of `peer`, or None to refuse it (the peer holds
        `per_peer` connections and none is pending). Over a pending cap, the oldest pending
        one (of the peer, else of all) is cut once it had EVICT_GRACE_S to send its request:
        a burst of quick clients never cuts its own; at `per_peer`, it is cut at once."""
        with self._lock:
            now = self._clock()
            mine = self._by_peer.get(peer)
            at_cap = self._open.get(peer, 0) >= self.per_peer
            if at_cap and not mine:
                return None
            victim = self._victim(peer, now, at_cap)
            seq = next(self._seq)
            t = Ticket(peer, now, now + self.deadline_s, sock, seq)
            self._pending[seq] = t
            self._by_peer.setdefault(peer, OrderedDict())[seq] = t
            self._open[peer] = self._open.get(peer, 0) + 1
            heapq.heappush(self._heap, (t.deadline, seq))
            self._wake.notify()
        if victim is not None:
            self._cut(victim, "evicted")
        return t

    def _victim(self, peer: str, now: float, at_cap: bool) -> Ticket | None:
        """The pending connection to cut for one more of `peer` (unpended and uncounted),
        or None (under the caps, or none had its grace)."""
        mine = self._by_peer.get(peer)
        oldest = next(iter(mine.values())) if mine else None
        victim = None
        if at_cap:
            victim = oldest
        elif mine is not None and len(mine) >= self.pending_per_peer:
            victim = oldest if oldest is not None and self._ripe(oldest, now) else None
        elif len(self._pending) >= self.pending_total:
            first = next(iter(self._pending.values()))
            victim = first if self._ripe(first, now) else None
        if victim is not None:
            self._unpend(victim)
            self._uncount(victim)
        return victim

    def _ripe(self, t: Ticket, now: float) -> bool:
        return now - t.since >= EVICT_GRACE_S and not t.request_waiting()

    def _uncount(self, t: Ticket) -> None:
        if t.counted:
            t.counted = False
            n = self._open.get(t.peer, 0) - 1
            if n > 0:
                self._open[t.peer] = n
            else:
                self._open.pop(t.peer, None)

    def admitted(self, t: Ticket) -> bool:
        """The request of `t` arrived whole: no deadline from now on. False when the gate
        had already cut it."""
        with self._lock:
            if not t.pending:
                return False
            self._unpend(t)
        t._drop()
        return True

    def again(self, t: Ticket, sock: socket.socket, deadline_s: float | None = None) -> None:
        """`t`'s kept-alive connection pending again, `deadline_s` (default the gate's) from
        now: while it idles between requests (then cut for a newcomer like a slow request:
        an idle connection holds no slot a newcomer needs), and from the first byte of its
        next request. It cuts no one itself (only a newcomer does: `enter`)."""
        with self._lock:
            now = self._clock()
            if not t.pending:
                t.seq, t.pending, t.cut_why, t.since = next(self._seq), True, "", now
                t._cut = sock.dup()
                self._pending[t.seq] = t
                self._by_peer.setdefault(t.peer, OrderedDict())[t.seq] = t
            t.deadline = now + (self.deadline_s if deadline_s is None else deadline_s)
            heapq.heappush(self._heap, (t.deadline, t.seq))
            self._wake.notify()

    def left(self, t: Ticket) -> None:
        """The connection of `t` is over (served, refused or cut)."""
        with self._lock:
            if t.pending:
                self._unpend(t)
            self._uncount(t)
        t._drop()

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _unpend(self, t: Ticket) -> Ticket:
        t.pending = False
        self._pending.pop(t.seq, None)
        mine = self._by_peer.get(t.peer)
        if mine is not None:
            mine.pop(t.seq, None)
            if not mine:
                del self._by_peer[t.peer]
        return t

    def _cut(self, t: Ticket, why: str) -> None:
        # counted before the socket is shut: whoever sees the cut finds it counted
        self.cuts[why] += 1
        t.cut(why)
        self._on_cut(t.peer, why)

    def _reaper(self) -> None:
        while True:
            due: list[Ticket] = []
            with self._lock:
                now = self._clock()
                while self._heap and self._heap[0][0] <= now:
                    _, seq = heapq.heappop(self._heap)
                    t = self._pending.get(seq)
                    if t is not None and t.deadline <= now:  # else: given a later one
                        due.append(self._unpend(t))
                if not due:
                    wait = self._heap[0][0] - now if self._heap else None
                    self._wake.wait(wait)
                    continue
            for t in due:
                self._cut(t, "deadline")


class Buckets:
    """A token bucket per key: `rate` per second, bursts of `burst`; `take(key)` is the
    seconds to wait before the next one (0: go ahead, and it is counted)."""

    def __init__(
        self, rate: float, burst: int, *, keys: int = 10_000, clock: Any = time.monotonic
    ) -> None:
        self.rate, self.burst, self._keys, self._clock = rate, burst, keys, clock
        self._lock = threading.Lock()
        self._state: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: str) -> float:
        with self._lock:
            now = self._clock()
            tokens, at = self._state.pop(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.rate
            self._state[key] = (tokens, now)
            if len(self._state) > self._keys:
                self._state.popitem(last=False)
            return wait
