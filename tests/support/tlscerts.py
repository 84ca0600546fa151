"""Test certificates made at test time with the `openssl` CLI (Debian's openssl package).

    pki = Pki(tmp_path / "pki")            # a CA: pki.ca
    server = pki.issue("server", "localhost", san="IP:127.0.0.1,DNS:localhost")
    alice = pki.issue("alice", "alice", org="ops")   # a client certificate
    old = pki.issue("old", "old", expired=True)      # valid 2020-01-01 .. 2020-01-02
    other = Pki(tmp_path / "other")        # another CA

`issue` returns a `Pair(cert, key)` of paths (key mode 0600). Expired certificates go
through `openssl ca` (explicit -startdate/-enddate), since `openssl x509 -req` of OpenSSL
3.0 takes only a number of days from now.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


@dataclass(frozen=True)
class Pair:
    cert: str
    key: str


def _run(*argv: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *argv], cwd=cwd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(argv[:2])} failed: {r.stderr[-2000:]}")


class Pki:
    def __init__(self, root: Path, name: str = "fastverify-test-ca") -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.ca = str(self.root / "ca.pem")
        self.ca_key = str(self.root / "ca.key")
        _run("req", "-x509", *EC, "-keyout", self.ca_key, "-out", self.ca, "-days", "2",
             "-subj", f"/CN={name}", cwd=self.root)  # fmt: skip
        os.chmod(self.ca_key, 0o600)
        os.chmod(self.ca, 0o644)
        (self.root / "index.txt").write_text("")
        (self.root / "serial").write_text("1000\n")
        (self.root / "ca.cnf").write_text(
            "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\n"
            "serial = serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n"
            "copy_extensions = copy\n[p]\ncommonName = supplied\norganizationName = optional\n"
        )

    def issue(
        self, stem: str, cn: str, *, org: str = "", san: str = "", expired: bool = False
    ) -> Pair:
        key, csr, cert = (str(self.root / f"{stem}.{ext}") for ext in ("key", "csr", "pem"))
        subj = f"/CN={cn}" + (f"/O={org}" if org else "")
        ext = ["-addext", f"subjectAltName={san}"] if san else []
        _run("req", "-new", *EC, "-keyout", key, "-out", csr, "-subj", subj, *ext, cwd=self.root)
        if expired:
            _run("ca", "-batch", "-config", "ca.cnf", "-cert", self.ca, "-keyfile", self.ca_key,
                 "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-notext",
                 "-in", csr, "-out", cert, cwd=self.root)  # fmt: skip
        else:
            extfile = self.root / f"{stem}.ext"
            extfile.write_text(f"subjectAltName={san}\n" if san else "")
            _run("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key,
                 "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", str(extfile),
                 cwd=self.root)  # fmt: skip
        os.chmod(key, 0o600)
        os.chmod(cert, 0o644)
        return Pair(cert, key)


TOKEN = "ops:" + "k" * 40  # the token file's line: name "ops"


def make_pki(root: Path) -> dict[str, Any]:
    """A CA with the server's, alice's, an expired and a foreign CA's certificates, and the
    daemon's and a client's token files (the TCP door's tests)."""
    ca = Pki(root / "ca")
    other = Pki(root / "other", name="another-ca")
    token = root / "tokens"
    token.write_text("# name:token\n" + TOKEN + "\nci:" + "c" * 32 + "\n")
    token.chmod(0o600)
    mine = root / "mine"  # a client's token file holds one token
    mine.write_text(TOKEN + "\n")
    mine.chmod(0o600)
    return {
        "ca": ca.ca,
        "server": ca.issue("server", "localhost", san="IP:127.0.0.1,DNS:localhost"),
        "alice": ca.issue("alice", "alice", org="ops"),
        "expired": ca.issue("expired", "mallory", expired=True),
        "foreign": other.issue("foreign", "alice", org="ops"),
        "server_expired": ca.issue("server-old", "localhost", san="IP:127.0.0.1", expired=True),
        "tokens": str(token),
        "client_token": str(mine),
    }


def door_config(port: int, pki: dict[str, Any], **daemon: Any) -> dict[str, Any]:
    """A daemon config with the TCP door on `port`, mutual TLS and named tokens."""
    server: Pair = pki["server"]
    return {"daemon": {"tcp_listen": f"0.0.0.0:{port}", "tls_cert": server.cert,
                       "tls_key": server.key, "tls_client_ca": pki["ca"],
                       "token_file": pki["tokens"], **daemon}}  # fmt: skip
