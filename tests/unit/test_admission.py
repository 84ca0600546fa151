"""fastverify.admission on real socket pairs with a hand-moved clock: who is cut to make room,
who is refused, and the record rate's buckets."""

from __future__ import annotations

import socket

from fastverify.admission import EVICT_GRACE_S, Buckets, Gate


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair()


def _cut(client: socket.socket) -> bool:
    """Whether the server side of `client`'s pair was shut down (EOF seen)."""
    client.settimeout(5)
    return client.recv(1) == b""


def test_a_young_burst_cuts_none_of_its_own_an_old_pending_one_is_cut() -> None:
    clock = Clock()
    gate = Gate(deadline_s=3600, pending_per_peer=2, pending_total=100, per_peer=10, clock=clock)
    pairs = [_pair() for _ in range(4)]
    tickets = [gate.enter(srv, "uid 0") for srv, _ in pairs[:3]]
    assert all(t is not None for t in tickets) and gate.cuts["evicted"] == 0  # all young
    clock.now += EVICT_GRACE_S
    t4 = gate.enter(pairs[3][0], "uid 0")
    assert t4 is not None and gate.cuts["evicted"] == 1 and _cut(pairs[0][1])
    assert not gate.admitted(tickets[0]) and gate.admitted(tickets[1])  # the cut one lost
    for t in (*tickets, t4):
        gate.left(t)  # type: ignore[arg-type]
    assert gate.pending() == 0


def test_a_pending_one_whose_request_already_arrived_is_not_cut_on_a_busy_host() -> None:
    # the peer sent its whole request head at once; this side has not read it yet (its
    # thread not scheduled on a loaded host): not a trickler, so a newcomer does not cut it
    clock = Clock()
    gate = Gate(deadline_s=3600, pending_per_peer=1, pending_total=100, per_peer=10, clock=clock)
    quick, slow, new = _pair(), _pair(), _pair()
    tq = gate.enter(quick[0], "127.0.0.1")
    quick[1].sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    clock.now += EVICT_GRACE_S
    ts = gate.enter(slow[0], "127.0.0.1")
    assert ts is not None and gate.cuts["evicted"] == 0 and gate.admitted(tq)  # type: ignore[arg-type]
    assert quick[0].recv(100).startswith(b"GET /metrics")  # the peek read nothing
    # a trickler (half a request line) past its grace is cut for the next newcomer
    slow[1].sendall(b"GET /met")
    clock.now += EVICT_GRACE_S
    tn = gate.enter(new[0], "127.0.0.1")
    assert tn is not None and gate.cuts["evicted"] == 1 and _cut(slow[1])
    for t in (tq, ts, tn):
        gate.left(t)  # type: ignore[arg-type]
    assert gate.pending() == 0


def test_a_peer_at_its_cap_cuts_its_oldest_pending_or_is_refused() -> None:
    clock = Clock()
    gate = Gate(deadline_s=3600, pending_per_peer=100, pending_total=100, per_peer=2, clock=clock)
    a, b, c = _pair(), _pair(), _pair()
    ta, tb = gate.enter(a[0], "10.0.0.1"), gate.enter(b[0], "10.0.0.1")
    assert ta is not None and tb is not None
    assert gate.enter(c[0], "10.0.0.2") is not None  # another peer has its own count
    tc = gate.enter(c[0], "10.0.0.1")  # at the cap: the oldest pending is cut at once
    assert tc is not None and _cut(a[1])
    assert gate.admitted(tb) and gate.admitted(tc)
    assert gate.enter(_pair()[0], "10.0.0.1") is None  # at the cap, none pending: refused
    gate.left(tb)
    assert gate.enter(_pair()[0], "10.0.0.1") is not None


def test_the_deadline_cuts_a_pending_connection_not_an_admitted_one() -> None:
    gate = Gate(deadline_s=0.2, pending_per_peer=10, pending_total=10, per_peer=10)
    slow, quick = _pair(), _pair()
    gate.enter(slow[0], "uid 0")
    tq = gate.enter(quick[0], "uid 0")
    assert tq is not None and gate.admitted(tq)
    assert _cut(slow[1])  # the reaper shut it down at its deadline
    quick[1].settimeout(0.5)
    quick[0].sendall(b"x")
    assert quick[1].recv(1) == b"x"  # the admitted one is untouched
    assert gate.cuts["deadline"] == 1


def test_buckets_allow_a_burst_then_the_rate_per_key() -> None:
    clock = Clock()
    b = Buckets(rate=2.0, burst=3, clock=clock)
    assert [b.take("uid 0") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("uid 0") == 0.5 and b.take("uid 1001") == 0.0
    clock.now += 0.5
    assert b.take("uid 0") == 0.0
