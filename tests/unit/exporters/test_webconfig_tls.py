"""The web config's TLS context is fastverify.credentials' (the TCP door's): the same file
checks and errors, with the web config's own knobs (client_auth_type, versions, cipher
preference) applied on top. Certificates made at test time (tests/support/tlscerts.py)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from fastverify import credentials
from fastverify.exporters import webconfig
from tests.support.tlscerts import Pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    pki = Pki(tmp_path / "pki")
    pki.issue("server", "localhost", san="IP:127.0.0.1,DNS:localhost")
    pki.issue("old", "old", expired=True)
    return pki


def _load(tmp_path: Path, body: str) -> webconfig.WebConfig:
    cfg = tmp_path / "pki" / "web.yml"
    cfg.write_text("tls_server_config:\n" + body)
    return webconfig.load(str(cfg))


def _error(tmp_path: Path, body: str) -> str:
    with pytest.raises(webconfig.WebConfigError) as err:
        _load(tmp_path, body)
    return str(err.value)


PAIR = "  cert_file: server.pem\n  key_file: server.key\n"


def test_the_knobs_apply_on_the_shared_context(tmp_path: Path, pki: Pki) -> None:
    plain = _load(tmp_path, PAIR).tls
    assert plain.verify_mode == ssl.CERT_NONE
    assert plain.minimum_version == ssl.TLSVersion.TLSv1_2  # the TCP door's floor
    assert plain.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    asked = _load(tmp_path, PAIR + "  client_auth_type: VerifyClientCertIfGiven\n"
                  "  client_ca_file: ca.pem\n  min_version: TLS13\n"
                  "  prefer_server_cipher_suites: false\n").tls  # fmt: skip
    assert asked.verify_mode == ssl.CERT_OPTIONAL
    assert asked.minimum_version == ssl.TLSVersion.TLSv1_3
    assert not asked.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    required = _load(tmp_path, PAIR + "  client_auth_type: RequireAndVerifyClientCert\n"
                     "  client_ca_file: ca.pem\n").tls  # fmt: skip
    assert required.verify_mode == ssl.CERT_REQUIRED


def test_files_get_the_credential_checks(tmp_path: Path, pki: Pki) -> None:
    key = tmp_path / "pki" / "server.key"
    key.chmod(0o644)
    said = _error(tmp_path, PAIR)
    assert said.startswith(f"web config {tmp_path / 'pki' / 'web.yml'}: tls_server_config: ")
    assert f"TLS key {key} is readable by group or others (mode 644); chmod 600" in said
    key.chmod(0o440)  # a Kubernetes secret volume's (defaultMode 0440, our group)
    assert _load(tmp_path, PAIR).tls is not None
    key.chmod(0o600)
    said = _error(tmp_path, "  cert_file: old.pem\n  key_file: old.key\n")
    assert "TLS certificate" in said and "expired on 2020-01-02" in said and "renew it" in said
    said = _error(tmp_path, "  cert_file: missing.pem\n  key_file: server.key\n")
    assert f"TLS certificate {tmp_path / 'pki' / 'missing.pem'} does not exist" in said


def test_a_group_readable_secret_passes_only_where_allowed(tmp_path: Path) -> None:
    key = tmp_path / "k"
    key.write_text("secret")
    key.chmod(0o440)
    with pytest.raises(credentials.CredentialError, match="readable by group or others"):
        credentials.check_file(str(key), "TLS key", secret=True)  # the TCP door's token rule
    assert credentials.check_file(str(key), "TLS key", secret=True, group_ok=True) == str(key)
    key.chmod(0o444)
    with pytest.raises(credentials.CredentialError, match="readable by group or others"):
        credentials.check_file(str(key), "TLS key", secret=True, group_ok=True)
    if os.geteuid() == 0:  # a group that is not ours: refused as before
        key.chmod(0o440)
        os.chown(key, 0, 4242)
        with pytest.raises(credentials.CredentialError, match="readable by group or others"):
            credentials.check_file(str(key), "TLS key", secret=True, group_ok=True)
