"""The health endpoints' verdicts (fastverify.daemon.health), from status dicts.

The real daemon serves them in tests/integration/test_daemon_declarative.py; here each
rule is pinned: readiness needs READY *and* (declarative) the declared profile or the
canary; start-up latches once the first start settled; liveness follows the main loop."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from fastverify.daemon.health import Health, HealthServer


def status(state: str, profile: str = "ring-ll", mode: str = "baseline", **extra: Any) -> dict:
    return {"state": state, "profile": profile, "mode": mode, "engine": {}, **extra}


DECLARED = {"profile": "ring-ll", "mode": "baseline", "source": "x.toml", "canary": None}


@pytest.mark.parametrize("state", ["STOPPED", "STARTING", "VERIFYING", "STOPPING",
                                   "ROLLING_BACK", "BACKOFF", "FAILED"])  # fmt: skip
def test_not_ready_outside_ready(state: str) -> None:
    ok, body = Health(lambda: status(state)).readyz()
    assert not ok and state in body["why"]


@pytest.mark.parametrize("state", ["STOPPING", "STARTING", "VERIFYING", "ROLLING_BACK",
                                   "BACKOFF"])  # fmt: skip
def test_ready_while_the_front_door_holds_for_a_switch(state: str) -> None:
    door = {"mode": "hold", "state": "holding", "waiting": 3}
    ok, body = Health(lambda: status(state, frontdoor=door)).readyz()
    assert ok and "holds requests (3 waiting)" in body["why"]


@pytest.mark.parametrize(("state", "door"), [
    ("FAILED", "holding"),  # nothing is coming to serve what it holds
    ("STARTING", "no_engine"),  # the first start: no engine has served yet
    ("STARTING", "unreachable"),
])  # fmt: skip
def test_not_ready_when_the_hold_leads_nowhere(state: str, door: str) -> None:
    st = status(state, frontdoor={"mode": "hold", "state": door})
    assert not Health(lambda: st).readyz()[0]


def test_failed_says_why() -> None:
    st = status("FAILED", last_failure={"reason": "tuner_not_loaded", "message": "no plugin"})
    ok, body = Health(lambda: st).readyz()
    assert not ok and "tuner_not_loaded (no plugin)" in body["why"]


def test_ready_without_declarative_mode() -> None:
    assert Health(lambda: status("READY", profile="anything")).readyz()[0]


def test_declarative_ready_only_for_the_declared_profile_or_the_canary() -> None:
    assert Health(lambda: status("READY", declarative=DECLARED)).readyz()[0]
    # e.g. a rollback to a last good profile restored from a persistent state dir
    ok, body = Health(lambda: status("READY", "nccl-default", declarative=DECLARED)).readyz()
    assert not ok and "manifest declares ring-ll/baseline" in body["why"]
    ok, _ = Health(lambda: status("READY", "ring-ll", "eagle3", declarative=DECLARED)).readyz()
    assert not ok  # the mode counts too
    canary = dict(DECLARED, canary={"profile": "nccl-default", "mode": "baseline"})
    assert Health(lambda: status("READY", "nccl-default", declarative=canary)).readyz()[0]
    assert Health(lambda: status("READY", "ring-ll", declarative=canary)).readyz()[0]
    ok, body = Health(lambda: status("READY", "tree-ll", declarative=canary)).readyz()
    assert not ok and "canary nccl-default/baseline" in body["why"]


def test_startup_latches_once_settled() -> None:
    current = {"st": status("STARTING", engine={"progress": {"phase": "weights", "percent": 40}})}
    h = Health(lambda: current["st"])
    ok, body = h.startupz()
    assert not ok and "weights 40%" in body["why"]
    current["st"] = status("FAILED")
    assert h.startupz()[0]
    current["st"] = status("STARTING")  # a later switch: start-up is over for the kubelet
    assert h.startupz()[0]


def test_liveness_follows_the_main_loop() -> None:
    h = Health(lambda: status("FAILED"), stale_after_s=60)
    assert h.livez()[0]  # a FAILED engine is not the daemon's ill health
    h._beat -= 120
    ok, body = h.livez()
    assert not ok and "has not ticked" in body["why"]
    h.beat()
    assert h.livez()[0]


def test_server_answers_json_and_404() -> None:
    server = HealthServer("127.0.0.1:0", Health(lambda: status("STARTING"))).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server.url + "/readyz", timeout=10)
        assert err.value.code == 503
        assert json.loads(err.value.read())["state"] == "STARTING"
        with urllib.request.urlopen(server.url + "/livez", timeout=10) as resp:
            assert resp.status == 200 and json.loads(resp.read())["ok"] is True
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server.url + "/v1/profile", timeout=10)
        assert err.value.code == 404
    finally:
        server.stop()


def test_probe_bytes_on_one_kept_alive_connection() -> None:
    """The bodies and their headers as the ThreadingHTTPServer version sent them (JSON, a
    newline, no-store), now over the exporter's HTTP server: keep-alive, HEAD, a trailing
    slash, and 405 for a method a probe never sends."""
    server = HealthServer("127.0.0.1:0", Health(lambda: status("STARTING"))).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/startupz/")
        r = conn.getresponse()
        assert r.status == 503 and r.read() == (
            b'{"ok": false, "state": "STARTING", "profile": "ring-ll", "mode": "baseline", '
            b'"why": "starting: state STARTING"}\n'
        )
        assert r.getheader("Content-Type") == "application/json"
        assert r.getheader("Cache-Control") == "no-store"
        conn.request("GET", "/")  # the same connection
        r = conn.getresponse()
        assert r.status == 404 and r.read() == (
            b'{"error": "unknown path / (known: /livez, /readyz, /startupz)"}\n'
        )
        conn.request("HEAD", "/livez")
        r = conn.getresponse()
        assert r.status == 200 and r.read() == b"" and int(r.getheader("Content-Length")) > 0
        conn.request("POST", "/livez")
        r = conn.getresponse()
        assert r.status == 405 and r.getheader("Allow") == "GET, HEAD"
        r.read()
        conn.close()
    finally:
        server.stop()


def test_livez_fails_only_when_a_declarative_daemons_recovery_is_spent() -> None:
    failure = {"reason": "tuner_not_loaded", "message": "no plugin"}
    spent = {"retries": 3, "limit": 3, "spent": True}
    st = status("FAILED", declarative=DECLARED, recovery=spent, last_failure=failure)
    ok, body = Health(lambda: st).livez()
    assert not ok and "FAILED after 3 recovery retries" in body["why"]
    assert "tuner_not_loaded (no plugin)" in body["why"]
    # retries left, or not declarative (an operator's host): alive
    left = dict(spent, retries=1, spent=False)
    assert Health(lambda: dict(st, recovery=left)).livez()[0]
    assert Health(lambda: dict(st, declarative=None)).livez()[0]
