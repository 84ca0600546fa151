"""/metrics behind exporter-toolkit's web config: a real Prometheus (Debian's) scrapes the
daemon's exporter over mutual TLS with bcrypt basic auth, from the same YAML node_exporter
reads; the wrong password, no client certificate and plain HTTP are refused. Certificates
are made at test time (tests/support/tlscerts.py), the bcrypt hash with the `bcrypt` package."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from fastverify.exporters import webconfig
from tests.support import prom
from tests.support.harness import DaemonHarness
from tests.support.tlscerts import Pki

PASSWORD = "scrape-" + "p" * 20


@pytest.fixture
def web(tmp_path: Path) -> dict[str, Any]:
    d = tmp_path / "web"
    pki = Pki(d)
    pki.issue("server", "localhost", san="IP:127.0.0.1,DNS:localhost")
    pki.issue("prom", "prometheus")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    cfg = d / "web-config.yml"
    cfg.write_text(  # relative paths: from the file's directory, as exporter-toolkit reads them
        "tls_server_config:\n"
        "  cert_file: server.pem\n  key_file: server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n"
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
        f"basic_auth_users:\n  prometheus: {json.dumps(hashed)}\n"
    )
    return {"dir": d, "config": str(cfg), "ca": pki.ca}


def _job(name: str, port: int, d: Path, *, password: str, cert: bool = True) -> str:
    client = (
        f"      cert_file: {d / 'prom.pem'}\n      key_file: {d / 'prom.key'}\n" if cert else ""
    )
    return (
        f"  - job_name: {name}\n    scheme: https\n    scrape_interval: 1s\n"
        f"    scrape_timeout: 1s\n    tls_config:\n      ca_file: {d / 'ca.pem'}\n{client}"
        f"    basic_auth:\n      username: prometheus\n      password: {json.dumps(password)}\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )


@pytest.mark.skipif(
    not prom.available(), reason="no prometheus binary (apt-get install prometheus)"
)
def test_prometheus_scrapes_over_tls_with_basic_auth(tmp_path: Path, web: dict[str, Any]) -> None:
    with DaemonHarness(tmp_path, config={"daemon": {"web_config_file": web["config"]}}) as d:
        assert d.metrics_url is not None
        port = int(d.metrics_url.rsplit(":", 1)[1].split("/")[0])
        jobs = [
            _job("tls", port, web["dir"], password=PASSWORD),
            _job("wrong-password", port, web["dir"], password="nope-" + "x" * 20),
            _job("no-client-cert", port, web["dir"], password=PASSWORD, cert=False),
        ]
        with prom.Prometheus(tmp_path, targets=[], extra_scrape_configs=jobs) as p:
            p.wait_for('fastverify_up{job="tls"} == 1', timeout=60)
            p.wait_for('up{job=~"wrong-password|no-client-cert"} == 0',
                       lambda rows: len(rows) == 2, timeout=60)  # fmt: skip
            targets = p.targets_health()
            assert all(t["url"].startswith("https://") for t in targets), targets
            assert [t["health"] for t in targets].count("up") == 1, targets
            errors = " ".join(t["error"] or "" for t in targets)
            assert "401" in errors, errors  # the wrong password
        assert PASSWORD not in d.log_text()
        assert "/metrics: refused a TLS connection" in d.log_text()  # the one without a cert


def test_what_a_scraper_without_credentials_gets(tmp_path: Path, web: dict[str, Any]) -> None:
    with DaemonHarness(tmp_path, config={"daemon": {"web_config_file": web["config"]}}) as d:
        assert d.metrics_url is not None
        port = int(d.metrics_url.rsplit(":", 1)[1].split("/")[0])
        url = f"https://127.0.0.1:{port}/metrics"
        ctx = ssl.create_default_context(cafile=web["ca"])
        ctx.load_cert_chain(str(web["dir"] / "prom.pem"), str(web["dir"] / "prom.key"))
        with pytest.raises(urllib.error.HTTPError) as err:  # TLS is fine, no password
            urllib.request.urlopen(url, context=ctx, timeout=10)
        assert err.value.code == 401 and err.value.headers["WWW-Authenticate"] == "Basic"
        assert err.value.headers["X-Content-Type-Options"] == "nosniff"
        req = urllib.request.Request(url)
        import base64

        req.add_header("Authorization", "Basic " + base64.b64encode(
            f"prometheus:{PASSWORD}".encode()).decode())  # fmt: skip
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            assert r.status == 200 and b"fastverify_up" in r.read()
        # plain HTTP on the TLS port: a 400 that says https (as Go's exporters answer it),
        # not a connection closed without a word
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert err.value.code == 400
        said = err.value.read().decode()
        assert "Client sent an HTTP request to an HTTPS server" in said, said
        assert f"scrape https://127.0.0.1:{port}/metrics" in said, said


def _bad(tmp_path: Path, text: str) -> str:
    cfg = tmp_path / "bad.yml"
    cfg.write_text(text)
    with pytest.raises(webconfig.WebConfigError) as err:
        webconfig.load(str(cfg))
    return str(err.value)


def test_bad_web_configs_say_what_is_wrong(tmp_path: Path, web: dict[str, Any]) -> None:
    assert "unknown key(s) tls_config" in _bad(tmp_path, "tls_config:\n  cert_file: x\n")
    assert "is not a bcrypt hash" in _bad(tmp_path, "basic_auth_users:\n  u: plain\n")
    d = web["dir"]
    tls = f"tls_server_config:\n  cert_file: {d}/server.pem\n  key_file: {d}/server.key\n"
    assert "without a client auth policy" in _bad(tmp_path, tls + f"  client_ca_file: {d}/ca.pem\n")
    assert "insecure" in _bad(tmp_path, tls + "  client_auth_type: RequireAnyClientCert\n")
    assert "does not match" in _bad(
        tmp_path, f"tls_server_config:\n  cert_file: {d}/server.pem\n  key_file: {d}/prom.key\n"
    )
    assert "X-Frame-Options" in _bad(
        tmp_path, "http_server_config:\n  headers:\n    X-Frame-Options: allow\n"
    )
    assert "missing one of key or key_file" in _bad(
        tmp_path, f"tls_server_config:\n  cert_file: {d}/server.pem\n"
    )
    good = webconfig.load(web["config"])
    assert good.tls is not None and set(good.users) == {"prometheus"}


def test_the_standalone_exporter_refuses_a_bad_web_config(tmp_path: Path) -> None:
    cfg = tmp_path / "w.yml"
    cfg.write_text("basic_auth_users:\n  u: not-a-hash\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run(
        [sys.executable, "-m", "fastverify.exporters.standalone", "--sglang-url",
         "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--web-config-file", str(cfg)],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert r.returncode == 2 and "is not a bcrypt hash" in r.stderr, r.stderr
