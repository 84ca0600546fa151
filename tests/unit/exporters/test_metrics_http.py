"""The /metrics HTTP server: real sockets on 127.0.0.1, keep-alive, gzip, HEAD, errors,
concurrency, caching per hub version, and a clean stop."""

from __future__ import annotations

import gzip
import http.client
import socket
import threading
import time

import pytest

from fastverify.exporters.http import MetricsServer, Renderer, parse_listen
from fastverify.exporters.hub import MetricsHub


@pytest.fixture
def served():
    # a fixed timer: each source's scrape duration is part of the body, and two renders of
    # the same hub must be byte for byte the same (gzip and HEAD compare with the plain one)
    hub = MetricsHub(timer=lambda: 0.0)
    hub.set_engine(True, "ring-ll", "eagle3", {"NCCL_ALGO": "Ring"}, "sim", None)
    server = MetricsServer(hub, "127.0.0.1:0").start()
    yield hub, server
    server.stop()


def test_parse_listen() -> None:
    assert parse_listen("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_listen(":9464") == ("127.0.0.1", 9464)
    assert parse_listen("9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    for bad in ("", "host:port", "1.2.3.4:70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_scrape_keepalive_gzip_head_and_errors(served) -> None:
    _, server = served
    assert server.port != 0 and server.url.endswith("/metrics")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    body = r.read()
    assert r.status == 200
    assert r.getheader("Content-Type").startswith("text/plain; version=0.0.4")
    assert b'fastverify_profile_info{engine="sim",mode="eagle3",nccl_algo="Ring"' in body
    assert b"fastverify_up 1.0" in body
    # same connection, gzip on request
    conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
    r = conn.getresponse()
    assert r.getheader("Content-Encoding") == "gzip"
    assert gzip.decompress(r.read()) == body
    conn.request("HEAD", "/metrics")
    r = conn.getresponse()
    assert r.status == 200 and r.read() == b"" and int(r.getheader("Content-Length")) == len(body)
    conn.request("GET", "/nope")
    r = conn.getresponse()
    assert r.status == 404 and b"/metrics" in r.read()
    conn.request("POST", "/metrics")
    r = conn.getresponse()
    assert r.status == 405
    r.read()
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b"ok\n"
    conn.close()


def test_new_state_shows_on_next_scrape(served) -> None:
    hub, server = served
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/metrics")
    assert b'fastverify_profile_switches_total{result="ok"} 0.0' in conn.getresponse().read()
    hub.daemon.on_switch("ok")
    conn.request("GET", "/metrics")
    assert b'fastverify_profile_switches_total{result="ok"} 1.0' in conn.getresponse().read()
    conn.close()


def test_renderer_caches_per_version() -> None:
    hub = MetricsHub(clock=lambda: 1000.0)
    r = Renderer(hub)
    first = r.render()
    assert r.render() is first  # unchanged hub, same second: the same bytes object
    hub.daemon.on_restart("crash")
    assert r.render() is not first and b'reason="crash"' in r.render()


def test_concurrent_scrapers(served) -> None:
    _, server = served
    errors: list[str] = []

    def scraper() -> None:
        try:
            c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            for _ in range(20):
                c.request("GET", "/metrics")
                resp = c.getresponse()
                if resp.status != 200 or b"fastverify_up" not in resp.read():
                    errors.append("bad response")
            c.close()
        except OSError as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=scraper) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []


def test_bad_request_and_stop_releases_port() -> None:
    hub = MetricsHub()
    server = MetricsServer(hub, "127.0.0.1:0").start()
    port = server.port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"garbage\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400")
    idle = http.client.HTTPConnection("127.0.0.1", port, timeout=5)  # a keep-alive client
    idle.request("GET", "/healthz")
    assert idle.getresponse().read() == b"ok\n"
    server.stop()
    assert idle.sock.recv(10) == b""  # the server closed the idle connection
    idle.close()
    again = MetricsServer(hub, f"127.0.0.1:{port}").start()  # the port is free again
    again.stop()


def test_listen_conflict_is_actionable() -> None:
    hub = MetricsHub()
    first = MetricsServer(hub, "127.0.0.1:0").start()
    try:
        with pytest.raises(OSError, match=r"cannot listen on 127\.0\.0\.1"):
            MetricsServer(hub, f"127.0.0.1:{first.port}").start()
    finally:
        first.stop()


def test_connection_cap_answers_503() -> None:
    hub = MetricsHub()
    server = MetricsServer(hub, "127.0.0.1:0", max_connections=2).start()
    try:
        held = []
        for _ in range(2):
            c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            c.request("GET", "/healthz")
            assert c.getresponse().read() == b"ok\n"
            held.append(c)
        extra = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        extra.request("GET", "/metrics")
        r = extra.getresponse()
        assert r.status == 503 and b"too many connections" in r.read()
        held[0].close()
        deadline = time.monotonic() + 5
        while True:  # the freed slot is reused
            c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            c.request("GET", "/metrics")
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200 or time.monotonic() > deadline:
                break
        assert r.status == 200
        held[1].close()
    finally:
        server.stop()
