"""Attacks on the daemon's doors through real sockets, against a real fastverifyd on the sim:
a flood of records and history reads, certificate-less TLS handshakes against a client with a
certificate, slow clients (slowloris) on the control socket, the TCP door and the exporter,
and another identity using a lease's id. Each test runs the attack, then asks what a
legitimate client gets.

Slow clients share the legitimate client's peer here (uid 0, 127.0.0.1): the gate
(fastverify.admission) cuts a peer's oldest pending request, so a quick request gets through
even from the address that floods.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from fastverify import api_models as m
from fastverify.client import ApiError, ControlClient
from fastverify.credentials import client_context
from fastverify.daemon.statestore import StateStore
from tests.support.harness import DaemonHarness, free_port
from tests.support.tlscerts import TOKEN, Pair
from tests.support.tlscerts import door_config as _config

HOLD = 1100  # more connections than any door has slots (control 1024, exporter 256)
SECRET = TOKEN.split(":", 1)[1]


def _decision(i: int) -> dict[str, Any]:
    return {"profile": "ring-ll", "mode": "baseline", "backend": "nccl", "applied": False,
            "why": f"posted-by-the-flood {i} " + "w" * 1500}  # fmt: skip


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=20) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in {url}")


# ------------------------------------------------------------------ records and history
def test_a_decision_flood_is_rate_limited_and_oversized_records_refused(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        codes: list[int] = []
        lock = threading.Lock()

        def post(k: int) -> None:
            c = ControlClient(d.socket, timeout=30)
            for i in range(k * 50, k * 50 + 50):
                try:
                    c.post("/v1/decision", _decision(i))
                    code = 200
                except ApiError as exc:
                    code = exc.status
                    if code == 429:
                        assert exc.body["reason"] == "rate_limited", exc.body
                with lock:
                    codes.append(code)

        threads = [threading.Thread(target=post, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(codes) == 300 and set(codes) <= {200, 429}, sorted(set(codes))
        stored = codes.count(200)
        # the burst and what the rate let through while 300 posts ran; far from all 300
        assert m.RECORD_BURST <= stored < 150, (stored, codes.count(429))
        big = {**_decision(0), "report": "r" * (m.RECORD_DECISION.max_body + 1)}
        with pytest.raises(ApiError) as err:
            ControlClient(d.socket).post("/v1/decision", big)
        assert err.value.status == 413
        # decisions have a journal of their own; the operations' one holds none
        journal = (d.state_dir / "journal.jsonl").read_text()
        assert '"kind": "decision"' not in journal and "posted-by-the-flood" not in journal
        decisions = (d.state_dir / "decisions.jsonl").read_text()
        assert decisions.count("posted-by-the-flood") == stored


def test_history_is_paged_and_reading_it_does_not_grow_the_daemon(tmp_path: Path) -> None:
    """A 31 MiB journal (15.5 MiB + its rotated part), read by 40 clients at once: each gets a
    bounded page, the daemon's memory stays put, and paging back reaches the first record."""
    d = DaemonHarness(tmp_path, metrics=False, start=False)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    pad = "x" * 900
    for name, base in (("journal.1.jsonl", 0), ("journal.jsonl", 15_000)):
        with open(d.state_dir / name, "w") as fh:  # each under the 16 MiB that rotates
            for i in range(15_000):
                t = 1.7e9 + base + i
                rec = {"type": "switch", "kind": "switch", "profile": "ring-ll", "mode": "baseline",
                       "result": "ok", "message": pad, "started_at": t, "finished_at": t,
                       "seq": base + i}  # fmt: skip
                fh.write(json.dumps(rec) + "\n")
    with d.start():
        proc = psutil.Process(d.pid)
        before = proc.memory_info().rss
        peak = [before]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], proc.memory_info().rss)
                done.wait(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        sizes: list[int] = []

        def read() -> None:
            sizes.append(len(ControlClient(d.socket, timeout=120).get("/v1/history")))

        readers = [threading.Thread(target=read) for _ in range(40)]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        done.set()
        sampler.join()
        assert sizes == [m.HISTORY_PAGE] * 40, sizes
        grew = (peak[0] - before) / 2**20
        assert grew < 64, f"40 history reads grew the daemon by {grew:.0f} MiB"
        newest = d.client.history(5)
        assert newest[-1]["kind"] == "start" and len(newest) == 5
        everything = d.client.history()  # page after page back to the first record
        assert len(everything) == 30_001 and everything[0]["seq"] == 0
        assert [r["seq"] for r in everything[:-1]] == sorted(r["seq"] for r in everything[:-1])


def test_decisions_never_rotate_operations_out(tmp_path: Path) -> None:
    """The store itself (no daemon: the rate limit would make this flood take hours): a
    start, then 4 journals' worth of decisions; the start is still the history's first."""
    store = StateStore(tmp_path)
    store.append_journal({"type": "switch", "kind": "start", "result": "ok", "started_at": 1.0,
                          "finished_at": 1.0})  # fmt: skip
    store.append_journal({"type": "crash", "ts": 2.0, "reason": "engine_exited"})
    rec = {"type": "switch", "kind": "decision", "message": "d" * 2000}
    for i in range(8_000):
        store.append_decision({**rec, "started_at": 10.0 + i, "finished_at": 10.0 + i})
    assert store.decisions_old_path.exists()  # it rotated
    first = store.history(1, before=10.0)
    assert [r["kind"] for r in first] == ["start"]
    assert "crash" in store.journal_path.read_text()


def test_a_request_head_is_bounded(tmp_path: Path) -> None:
    """What one request still arriving can make the daemon hold: 60 headers of 3 KB (each
    within http.server's own line and count limits, 180 KB in all) get 431."""
    with DaemonHarness(tmp_path, metrics=False) as d:
        head = b"GET /v1/status HTTP/1.0\r\n"
        head += b"".join(b"X-%d: %s\r\n" % (i, b"a" * 3000) for i in range(60)) + b"\r\n"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(20)
            s.connect(str(d.socket))
            s.sendall(head)
            assert s.recv(64).startswith(b"HTTP/1.0 431 ")


# ------------------------------------------------------------------ the TLS door
def test_certificate_less_handshakes_do_not_lock_out_a_client_with_one(
    tmp_path: Path,
    pki: dict[str, Any],
) -> None:
    port = free_port()
    alice: Pair = pki["alice"]
    with DaemonHarness(tmp_path, config=_config(port, pki)) as d:
        bare = ssl.create_default_context(cafile=pki["ca"])  # no client certificate
        for _ in range(30):
            with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
                try:
                    with bare.wrap_socket(raw, server_hostname="localhost") as tls:
                        tls.sendall(b"GET /v1/status HTTP/1.0\r\n\r\n")
                        tls.recv(100)
                except (ssl.SSLError, OSError):
                    pass
        tls = client_context(ca=pki["ca"], cert=alice.cert, key=alice.key)
        good = ControlClient(tcp=f"127.0.0.1:{port}", token=SECRET, timeout=20, tls=tls)
        assert good.get("/v1/status")["state"] == "READY"
        assert d.metrics_url is not None
        assert _metric(d.metrics_url, 'fastverify_api_auth_failures_total{reason="tls"}') >= 30
        assert _metric(d.metrics_url, "fastverify_api_auth_backoff_sources") == 0


# ------------------------------------------------------------------ slowloris
def _hold(connect: Any, n: int, first: bytes) -> list[socket.socket]:
    """`n` connections that send `first` and then nothing (refused ones are closed)."""
    out = []
    for _ in range(n):
        try:
            s = connect()
            if first:
                s.sendall(first)
            out.append(s)
        except OSError:
            pass
    return out


def _client_hello() -> bytes:
    """A real TLS ClientHello (what a slow TLS client trickles)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def _cut_while_trickling(connect: Any, drip: bytes) -> bool:
    """One connection that sends `drip` a byte a second, never finishing its request in
    the 120 s this waits: True once the server cuts it (a deadline per request: a timeout
    per read never fires while a byte comes every second)."""
    s = connect()
    s.settimeout(1.0)
    try:
        for i in range(120):
            s.sendall(drip[i % len(drip) : i % len(drip) + 1])
            try:
                if s.recv(4096) == b"":
                    return True
            except TimeoutError:
                pass
        return False
    except OSError:
        return True  # reset
    finally:
        s.close()


def _close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def test_slow_clients_do_not_starve_the_control_socket(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:

        def connect() -> socket.socket:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(d.socket))
            return s

        held = _hold(connect, HOLD, b"GET /v1/status HTTP/1.0\r\nX-Slow: ")
        try:
            assert d.client.get("/v1/status")["state"] == "READY"
            assert _cut_while_trickling(
                connect, b"GET /v1/status HTTP/1.0\r\nX-Slow: " + b"a" * 200
            )
        finally:
            _close_all(held)


def test_slow_clients_do_not_starve_the_tls_door(
    tmp_path: Path,
    pki: dict[str, Any],
) -> None:
    port = free_port()
    alice: Pair = pki["alice"]
    with DaemonHarness(tmp_path, metrics=False, config=_config(port, pki)):

        def connect() -> socket.socket:
            return socket.create_connection(("127.0.0.1", port), timeout=20)

        held = _hold(connect, HOLD, b"\x16")  # a handshake record's first byte, then nothing
        try:
            good = ControlClient(tcp=f"127.0.0.1:{port}", token=SECRET, timeout=20,
                                 tls=client_context(ca=pki["ca"], cert=alice.cert,
                                                    key=alice.key))  # fmt: skip
            assert good.get("/v1/status")["state"] == "READY"
            assert _cut_while_trickling(connect, _client_hello())
        finally:
            _close_all(held)


def test_slow_clients_do_not_starve_the_exporter(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path) as d:
        assert d.metrics_port is not None and d.metrics_url is not None
        port = d.metrics_port

        def connect() -> socket.socket:
            return socket.create_connection(("127.0.0.1", port), timeout=20)

        held = _hold(connect, 300, b"GET /metrics HTTP/1.1\r\nX-Slow: ")
        try:
            with urllib.request.urlopen(d.metrics_url, timeout=20) as r:
                assert r.status == 200 and b"fastverify_" in r.read()
            assert _cut_while_trickling(connect, b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 200)
        finally:
            _close_all(held)


def test_idle_kept_alive_connections_do_not_starve_the_exporter(tmp_path: Path) -> None:
    """300 connections that each made one request and keep the connection open, idle: an
    idle one is cut for a newcomer, so a scrape still gets in."""
    with DaemonHarness(tmp_path) as d:
        assert d.metrics_port is not None and d.metrics_url is not None
        held = []
        try:
            for _ in range(300):
                try:
                    s = socket.create_connection(("127.0.0.1", d.metrics_port), timeout=20)
                    s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
                    s.recv(4096)
                    held.append(s)
                except OSError:
                    pass
            with urllib.request.urlopen(d.metrics_url, timeout=20) as r:
                assert r.status == 200 and b"fastverify_" in r.read()
        finally:
            _close_all(held)


# ------------------------------------------------------------------ leases
def test_a_lease_belongs_to_the_identity_that_took_it(tmp_path: Path) -> None:
    port = free_port()
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    tokens.chmod(0o600)
    config = {"daemon": {"tcp_listen": f"127.0.0.1:{port}", "token_file": str(tokens)}}
    with DaemonHarness(tmp_path, metrics=False, config=config) as d:
        lease = d.client.take_lease("sweep", description="alice's sweep")  # uid 0, Unix socket
        other = ControlClient(tcp=f"127.0.0.1:{port}", token=SECRET, timeout=60)
        # its id, sent by another identity, is no lease
        with pytest.raises(ApiError) as err:
            other.post("/v1/profile", {"name": "ring-ll", "lease": lease["id"]})
        assert err.value.status == 409 and "id" not in err.value.body["lease"]
        with pytest.raises(ApiError) as err:
            other.post("/v1/lease/release", {"id": lease["id"]})
        assert err.value.status == 403 and err.value.body["reason"] == "not_holder"
        assert d.status()["lease"] is not None and d.status()["profile"] != "ring-ll"
        # others see who holds it, not its id; its holder sees it
        assert lease["holder"] == "uid 0"
        for seen in (d.status()["lease"], other.status()["lease"], other.get("/v1/lease")["lease"]):
            assert seen["holder"] == "uid 0" and "id" not in seen, seen
        assert d.client.get("/v1/lease")["lease"]["id"] == lease["id"]
        # the holder's own switch passes; another's forced one passes and is recorded
        d.client.post("/v1/profile", {"name": "ring-ll", "lease": lease["id"]})
        other.post("/v1/profile", {"name": "ring-simple", "force": True})
        overrides = [r for r in d.client.history(20) if r["kind"] == "lease_override"]
        assert len(overrides) == 1, overrides
        assert "token ops" in overrides[0]["by"] and "uid 0" in overrides[0]["message"]
        assert "id" not in overrides[0]["lease"]
        assert d.client.release_lease(lease["id"])["released"]["id"] == lease["id"]
