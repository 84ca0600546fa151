"""fastverifyd as a Kubernetes pod runs it: declarative mode and the HTTP health endpoints.

The real daemon on the sim engine, with `daemon.declarative = true` and `daemon.health_listen`
(what the rendered manifests configure): /readyz is 200 only in READY after verification
and only for the declared profile (or an explicit --canary), a profile that fails
verification never becomes Ready (no fallback to another profile either), and
`fastverifyctl profile set` is refused with the reason unless --canary, which status shows.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.harness import DaemonHarness, free_port

# A profile whose engine starts and answers /health but fails verification: NCCL (the sim
# dlopens as NCCL 2.28.9 does) cannot find the tuner plugin it names (tuner_not_loaded).
TUNER_TABLE = "collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes\n"
UNVERIFIABLE = (
    "# description: names a tuner plugin NCCL cannot find\n"
    "# extends: nccl-default\n"
    "FASTVERIFY_TUNER_TABLE=t.tuner.csv\n"
    "NCCL_TUNER_PLUGIN=fastverify-missing\n"
)


def probe(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def declarative(profile: str, health: int) -> dict[str, Any]:
    return {
        "daemon": {
            "declarative": True,
            "default_profile": profile,
            "health_listen": f"127.0.0.1:{health}",
        }
    }


def test_profile_failing_verification_never_becomes_ready(tmp_path: Path) -> None:
    port = free_port()
    d = DaemonHarness(tmp_path, config=declarative("unverifiable", port), start=False)
    (d.profile_dir / "t.tuner.csv").write_text(TUNER_TABLE + "AllReduce,0,1024,Ring,LL,-1,2,1\n")
    (d.profile_dir / "unverifiable.env").write_text(UNVERIFIABLE)
    seen: list[int] = []
    done = threading.Event()
    base = f"http://127.0.0.1:{port}"

    def watch() -> None:  # every /readyz answer from start-up to FAILED
        while not done.is_set():
            with contextlib.suppress(OSError, ValueError):  # not listening yet
                seen.append(probe(base + "/readyz")[0])

    with d:
        d.start(wait_ready=False)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        st = d.wait_state("FAILED", timeout=60)
        done.set()
        watcher.join(timeout=30)
        assert (st["profile"], st["last_failure"]["reason"]) == ("unverifiable", "tuner_not_loaded")
        assert st["declarative"] == {
            "profile": "unverifiable",
            "mode": "baseline",
            "source": str(d.config_path),
            "canary": None,
        }
        assert seen and set(seen) == {503}, seen  # never Ready, not even for a moment
        code, body = probe(base + "/readyz")
        assert code == 503 and not body["ok"] and "tuner_not_loaded" in body["why"], body
        # start-up is over (the probe may hand over to liveness), the daemon itself is fine
        assert probe(base + "/startupz")[0] == 200
        assert probe(base + "/livez")[0] == 200
        history = d.client.get("/v1/history")
        assert [r["profile"] for r in history] == ["unverifiable"], history  # no fallback
        assert all(r["result"] != "ok" for r in history)
        assert d.status()["state"] == "FAILED"


def test_declared_profile_is_ready_and_profile_set_needs_canary(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with DaemonHarness(tmp_path, config=declarative("ring-ll", port)) as d:
        code, body = probe(base + "/readyz")
        assert (code, body["state"], body["profile"]) == (200, "READY", "ring-ll"), body
        assert probe(base + "/startupz")[0] == 200 and probe(base + "/livez")[0] == 200
        assert probe(base + "/v1/status")[0] == 404  # nothing but the probes on this port
        pid = d.engine_pid()
        # a status line that says so, and --json with the declared state
        assert "declared:   ring-ll (baseline)" in d.ctl("status").stdout

        r = d.ctl("profile", "set", "nccl-default")
        assert r.returncode == 1, r.stdout + r.stderr  # README: 1 = an operation refused
        assert "declarative" in r.stderr and "--canary" in r.stderr, r.stderr
        assert "ring-ll/baseline" in r.stderr and str(d.config_path) in r.stderr, r.stderr
        r = d.ctl("profile", "set", "nccl-default", "--json")
        out = json.loads(r.stdout)
        assert (r.returncode, out["http_status"], out["reason"]) == (1, 403, "declarative")
        assert out["declared"] == {"profile": "ring-ll", "mode": "baseline"}
        st = d.status()
        assert (st["profile"], st["engine"]["pid"], st["declarative"]["canary"]) == (
            "ring-ll",
            pid,
            None,
        )

        r = d.ctl("mode", "set", "eagle3")  # the mode is the manifest's too
        assert r.returncode == 1 and "declarative" in r.stderr, r.stdout + r.stderr
        r = d.ctl("restart")  # restarting what is declared is fine
        assert r.returncode == 0, r.stdout + r.stderr
        assert d.status()["profile"] == "ring-ll"

        r = d.ctl("profile", "set", "nccl-default", "--canary")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        assert st["profile"] == "nccl-default"
        canary = st["declarative"]["canary"]
        assert (canary["profile"], canary["mode"]) == ("nccl-default", "baseline")
        text = d.ctl("status").stdout
        assert "declared:   ring-ll (baseline)" in text and "canary:     nccl-default" in text
        assert probe(base + "/readyz")[0] == 200  # asked for explicitly, and verified

        # back to what the manifest declares: no flag needed, the canary ends
        r = d.ctl("profile", "set", "ring-ll")
        assert r.returncode == 0, r.stdout + r.stderr
        assert d.status()["declarative"]["canary"] is None

        # a canary left behind by a killed daemon is not adopted: the manifest wins
        assert d.ctl("profile", "set", "nccl-default", "--canary").returncode == 0
        d.kill9()
        d.restart_daemon(wait_ready=True, timeout=60)
        st = d.status()
        assert (st["state"], st["profile"]) == ("READY", "ring-ll"), st
        assert st["declarative"]["canary"] is None
        assert "not the declared ring-ll/baseline" in d.log_text()


def test_health_listen_without_declarative_mode(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    config = {"daemon": {"health_listen": f"127.0.0.1:{port}"}}
    with DaemonHarness(tmp_path, config=config) as d:
        assert d.status()["declarative"] is None
        assert probe(base + "/readyz")[0] == 200
        r = d.ctl("profile", "set", "nccl-default")  # not declarative: allowed as always
        assert r.returncode == 0, r.stdout + r.stderr
        assert probe(base + "/readyz")[1]["profile"] == "nccl-default"
