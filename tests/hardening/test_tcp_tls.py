"""The control API's TCP door under attack, against a real fastverifyd on the sim: TLS,
mutual TLS, named tokens, backoff, and who asked recorded for every change.

Certificates are made at test time with the openssl CLI (tests/support/tlscerts.py). The daemon
listens on 0.0.0.0 (not loopback) so that every TLS rule applies; clients connect to
127.0.0.1 / localhost, which the server certificate names. Every refused attempt leaves
the engine, the profile and the history exactly as they were.
"""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fastverify.client import ApiError, ControlClient, DaemonUnavailable
from fastverify.credentials import client_context
from tests.support import host_dirs
from tests.support.harness import REPO, DaemonHarness, free_port
from tests.support.tlscerts import TOKEN, Pair
from tests.support.tlscerts import door_config as _config


def _fixed(d: DaemonHarness) -> tuple[Any, ...]:
    """What a refused request must leave alone: engine, profile, mode, history."""
    st = d.status()
    return d.engine_pid(), st["profile"], st["mode"], len(d.client.get("/v1/history"))


def _metrics(d: DaemonHarness) -> dict[str, float]:
    assert d.metrics_url
    with urllib.request.urlopen(d.metrics_url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("fastverify_api_auth"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _client(port: int, token: str | None, **tls: str) -> ControlClient:
    ctx = client_context(**tls) if tls else None
    return ControlClient(tcp=f"127.0.0.1:{port}", token=token, tls=ctx, timeout=20)


def test_plaintext_off_loopback_is_refused_before_anything_starts(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("x" * 32)
    token.chmod(0o600)
    port = free_port()
    d = DaemonHarness(tmp_path, start=False, metrics=False,
                      config={"daemon": {"tcp_listen": f"0.0.0.0:{port}",
                                         "token_file": str(token)}})  # fmt: skip
    with pytest.raises(AssertionError) as err:
        d.start()
    assert d.proc is not None and d.proc.wait(30) == 2
    text = str(err.value)
    assert "not a loopback address" in text and "--tls-cert FILE --tls-key FILE" in text, text
    assert not (d.state_dir / "engine.pid").exists()  # no engine was started
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    d.close(check_leaks=False)


def test_mutual_tls_switch_records_the_subject(tmp_path: Path, pki: dict[str, Any]) -> None:
    port = free_port()
    alice: Pair = pki["alice"]
    with DaemonHarness(tmp_path, metrics=False, config=_config(port, pki)) as d:
        r = d.ctl("--host", f"tcp://localhost:{port}", "--tls-ca", pki["ca"], "profile", "set",
                  "ring-ll", "--tls-cert", alice.cert, "--tls-key", alice.key,
                  "--token-file", pki["client_token"])  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        assert d.status()["profile"] == "ring-ll"
        # the same door from the variables, the options after the command
        env = {"FASTVERIFY_HOST": f"tcp://127.0.0.1:{port}", "FASTVERIFY_TLS_CA": pki["ca"],
               "FASTVERIFY_TLS_CERT": alice.cert, "FASTVERIFY_TLS_KEY": alice.key,
               "FASTVERIFY_TOKEN_FILE": pki["client_token"]}  # fmt: skip
        h = d.ctl("history", env=env)
        assert h.returncode == 0, h.stderr
        head, *rows = h.stdout.splitlines()
        col = head.split("\t").index("by")
        last = rows[-1].split("\t")
        assert last[col] == "CN=alice,O=ops + token ops (tls 127.0.0.1)", last
        rec = d.client.get("/v1/history")[-1]
        assert rec["caller"] == {"door": "tcp", "addr": "127.0.0.1",
                                 "subject": "CN=alice,O=ops", "token": "ops"}  # fmt: skip
        journal = (d.state_dir / "journal.jsonl").read_text()
        assert '"by": "CN=alice,O=ops + token ops (tls 127.0.0.1)"' in journal
        assert "POST /v1/profile by CN=alice,O=ops + token ops (tls 127.0.0.1)" in d.log_text()
        secret = TOKEN.split(":", 1)[1]
        assert secret not in journal and secret not in d.log_text() and secret not in h.stdout


def test_attacks_on_the_tls_door_are_refused_and_change_nothing(
    tmp_path: Path, pki: dict[str, Any]
) -> None:
    port = free_port()
    alice, good = pki["alice"], TOKEN.split(":", 1)[1]
    with DaemonHarness(tmp_path, config=_config(port, pki)) as d:
        before = _fixed(d)
        switch = ("POST", "/v1/profile", {"name": "ring-ll"})
        # 1. plaintext HTTP to the TLS port: a plain answer that says how to connect
        with pytest.raises(ApiError) as err:
            _client(port, good).request(*switch)
        assert err.value.status == 400 and "speaks TLS" in err.value.body["error"]
        # 2. TLS without the client certificate the door requires
        with pytest.raises(DaemonUnavailable, match=r"client's certificate.*--tls-cert"):
            _client(port, good, ca=pki["ca"]).request(*switch)
        # 3. a certificate from another CA
        foreign: Pair = pki["foreign"]
        with pytest.raises(DaemonUnavailable, match="refused this client's certificate"):
            _client(port, good, ca=pki["ca"], cert=foreign.cert, key=foreign.key).request(*switch)
        # 4. an expired certificate from the right CA (the client would refuse to send it:
        #    an ssl context built without fastverify's own check sends it anyway)
        expired: Pair = pki["expired"]
        raw = ssl.create_default_context(cafile=pki["ca"])
        raw.load_cert_chain(expired.cert, expired.key)
        with pytest.raises(DaemonUnavailable, match="refused this client's certificate"):
            ControlClient(tcp=f"127.0.0.1:{port}", token=good, tls=raw, timeout=20).request(*switch)
        # 5. the right certificate, a wrong token
        with pytest.raises(ApiError) as err:
            _client(port, "w" * 40, ca=pki["ca"], cert=alice.cert, key=alice.key).request(*switch)
        assert err.value.status == 401 and good not in json.dumps(err.value.body)
        assert _fixed(d) == before
        m = _metrics(d)
        assert m['fastverify_api_auth_failures_total{reason="plaintext"}'] == 1, m
        assert m['fastverify_api_auth_failures_total{reason="tls"}'] == 3, m
        assert m['fastverify_api_auth_failures_total{reason="token"}'] == 1, m
        log = d.log_text()
        assert "refused a plaintext connection from 127.0.0.1" in log
        assert log.count("refused a TLS connection from 127.0.0.1") == 3, log[-3000:]
        assert re.search(r"certificate has expired", log), log[-3000:]
        assert good not in log


def test_twenty_wrong_tokens_back_off_visibly(tmp_path: Path, pki: dict[str, Any]) -> None:
    port = free_port()
    alice, good = pki["alice"], TOKEN.split(":", 1)[1]
    with DaemonHarness(tmp_path, config=_config(port, pki)) as d:
        before = _fixed(d)
        tls = {"ca": pki["ca"], "cert": alice.cert, "key": alice.key}
        statuses, waits = [], []
        for i in range(20):
            with pytest.raises(ApiError) as err:
                _client(port, f"wrong-{i:02d}-" + "w" * 30, **tls).post(
                    "/v1/profile", {"name": "ring-ll"}
                )
            statuses.append(err.value.status)
            if err.value.status == 429:
                waits.append(err.value.body["retry_after_s"])
        assert statuses[:5] == [401] * 5, statuses
        assert 429 in statuses and all(w >= 1 for w in waits), statuses
        # backing off: even the right token and certificate wait, and nothing changed
        with pytest.raises(ApiError) as err:
            _client(port, good, **tls).post("/v1/profile", {"name": "ring-ll"})
        assert err.value.status == 429 and "retry in" in err.value.body["error"]
        assert _fixed(d) == before
        m = _metrics(d)
        assert m["fastverify_api_auth_backoff_sources"] == 1, m
        failed = m['fastverify_api_auth_failures_total{reason="token"}']
        refused = m['fastverify_api_auth_failures_total{reason="backoff"}']
        assert failed >= 5 and refused >= 2 and failed + refused == 21, m


def test_a_unix_socket_switch_records_uid_pid_and_command(tmp_path: Path) -> None:
    comm = subprocess.run([sys.executable, "-c", "print(open('/proc/self/comm').read())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl("profile", "set", "ring-ll")
        assert r.returncode == 0, r.stderr
        rec = d.client.get("/v1/history")[-1]
        caller = rec["caller"]
        assert caller["door"] == "unix" and caller["uid"] == os.getuid(), caller
        assert caller["comm"] == comm and caller["pid"] > 0, caller
        assert rec["by"].startswith(f"uid {os.getuid()} (") and rec["by"].endswith(comm)
        assert f"POST /v1/profile by {rec['by']}" in d.log_text()
        # the daemon's own start-up
        assert d.client.get("/v1/history")[0]["by"] == "fastverifyd"
        h = d.ctl("history")
        assert rec["by"] in h.stdout and "\tby\t" in h.stdout.splitlines()[0] + "\t"


@pytest.mark.parametrize("case", ["expired", "mismatch", "loose_key", "foreign_symlink", "missing"])
def test_bad_tls_files_stop_start_up_clearly(
    tmp_path: Path, pki: dict[str, Any], case: str
) -> None:
    server: Pair = pki["server"]
    port = free_port()
    daemon: dict[str, Any] = {}
    if case == "expired":
        old: Pair = pki["server_expired"]
        daemon = {"tls_cert": old.cert, "tls_key": old.key}
        want = "expired on 2020-01-02"
    elif case == "mismatch":
        daemon = {"tls_key": pki["alice"].key}
        want = "does not match the certificate"
    elif case == "loose_key":
        loose = tmp_path / "loose.key"
        loose.write_bytes(Path(server.key).read_bytes())
        loose.chmod(0o644)
        daemon = {"tls_key": str(loose)}
        want = "readable by group or others.*chmod 600"
    elif case == "foreign_symlink":
        link = tmp_path / "cert-link.pem"
        link.symlink_to(server.cert)
        if os.geteuid() != 0:
            pytest.skip("making a symlink owned by another user needs root")
        os.lchown(link, 54321, 54321)
        daemon = {"tls_cert": str(link)}
        want = "symlink owned by uid 54321"
    else:
        daemon = {"tls_client_ca": str(tmp_path / "nope.pem")}
        want = "nope.pem does not exist"
    d = DaemonHarness(tmp_path / "d", start=False, metrics=False,
                      config=_config(port, pki, **daemon))  # fmt: skip
    with pytest.raises(AssertionError) as err:
        d.start()
    assert d.proc is not None and d.proc.wait(30) == 2
    assert re.search(want, str(err.value)), str(err.value)
    assert "fastverifyd is not starting" in str(err.value)
    assert not (d.state_dir / "engine.pid").exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    d.close(check_leaks=False)


def test_cli_says_what_is_wrong_with_its_own_tls_options(
    tmp_path: Path, pki: dict[str, Any]
) -> None:
    env = host_dirs.clean_env(("FASTVERIFY_", "NCCL_"))
    env["PYTHONPATH"] = str(REPO)

    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "fastverify.ctl", *args], env=env,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    r = ctl("status", "--tls-ca", pki["ca"])
    assert r.returncode == 2 and "--tls-ca need --host tcp://HOST:PORT" in r.stderr, r.stderr
    r = ctl("--host", "http://x:1", "status")
    assert r.returncode == 2 and "expected tcp://HOST:PORT" in r.stderr, r.stderr
    r = ctl("--host", "tcp://127.0.0.1:1", "status", "--tls-cert", pki["alice"].cert)
    assert r.returncode == 2 and "--tls-cert and --tls-key go together" in r.stderr, r.stderr
    r = ctl("--host", "tcp://127.0.0.1:1", "--token-file", pki["tokens"], "status")
    assert r.returncode == 2 and "holds 2 tokens" in r.stderr, r.stderr


def test_who_cancelled_a_switch_is_recorded(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False, sim_load_seconds=3) as d:
        assert d.ctl("profile", "set", "ring-ll", "--no-wait").returncode == 0
        d.wait_for(lambda: d.status()["state"] == "STARTING", 60, "the switch loading")
        assert d.ctl("cancel").returncode == 0
        d.wait_for(lambda: d.client.get("/v1/history")[-1]["result"] == "cancelled", 60,
                   "the cancelled switch's record")  # fmt: skip
        rec = d.client.get("/v1/history")[-1]
        assert rec["by"].startswith(f"uid {os.getuid()} ") and rec["kind"] == "switch", rec
        assert rec["cancelled_by"].startswith(f"uid {os.getuid()} "), rec
        assert f"cancel requested by {rec['cancelled_by']}" in d.log_text()
