"""The TCP door's pieces on their own: token files, certificate dates, the config's door
rules, constant-time token lookup, per-source backoff, caller identity over a real
socketpair (SO_PEERCRED)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from fastverify import config as configmod
from fastverify import credentials
from fastverify.daemon import auth
from tests.support.tlscerts import Pki


def _file(tmp_path: Path, text: str, mode: int = 0o600) -> str:
    p = tmp_path / "f"
    p.write_text(text)
    p.chmod(mode)
    return str(p)


def test_token_file_named_and_bare(tmp_path: Path) -> None:
    text = "# ops team\nops:" + "a" * 20 + "\n\nci:" + "b" * 16 + "\n"
    assert credentials.read_tokens(_file(tmp_path, text)) == {"ops": "a" * 20, "ci": "b" * 16}
    assert credentials.read_tokens(_file(tmp_path, "c" * 32 + "\n")) == {"default": "c" * 32}
    assert credentials.read_client_token(_file(tmp_path, "ops:" + "d" * 16)) == "d" * 16


@pytest.mark.parametrize(
    ("text", "mode", "want"),
    [
        ("ops:short\n", 0o600, "line 1: the token of 'ops' is shorter than 16"),
        ("a:" + "x" * 16 + "\na:" + "y" * 16, 0o600, "line 2: the name 'a' is used twice"),
        ("a:" + "x" * 16 + "\nb:" + "x" * 16, 0o600, "line 2: 'b' has the same token"),
        ("# nothing\n", 0o600, "holds no token"),
        ("x" * 32, 0o640, r"readable by group or others \(mode 640\); chmod 600"),
        ("x" * 32, 0o622, r"writable by group or others"),
    ],
)
def test_token_file_problems_name_file_line_and_fix(
    tmp_path: Path, text: str, mode: int, want: str
) -> None:
    path = _file(tmp_path, text, mode)
    with pytest.raises(credentials.CredentialError, match=want) as err:
        credentials.read_tokens(path)
    assert path in str(err.value)
    assert "x" * 16 not in str(err.value)  # a token's content never appears


def test_symlinks_and_owners(tmp_path: Path) -> None:
    real = _file(tmp_path, "x" * 32)
    link = tmp_path / "link"
    link.symlink_to(real)
    assert credentials.read_tokens(str(link)) == {"default": "x" * 32}  # ours: followed
    if os.geteuid() == 0:
        os.lchown(link, 4242, 4242)
        with pytest.raises(credentials.CredentialError, match="symlink owned by uid 4242"):
            credentials.read_tokens(str(link))
        os.chown(real, 4242, 4242)
        with pytest.raises(credentials.CredentialError, match="owned by uid 4242"):
            credentials.read_tokens(real)
    with pytest.raises(credentials.CredentialError, match="is not a regular file"):
        credentials.read_tokens(str(tmp_path))


def test_certificate_dates_read_from_the_der(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    old = pki.issue("old", "old", expired=True)
    valid = credentials.cert_validity(Path(old.cert).read_text())
    assert (valid.not_before, valid.not_after) == (1577836800.0, 1577923200.0)  # 2020-01-01/02
    with pytest.raises(credentials.CredentialError, match="expired on 2020-01-02 00:00:00 UTC"):
        credentials.check_cert(old.cert, "TLS certificate")
    fresh = pki.issue("fresh", "fresh")
    credentials.check_cert(fresh.cert, "TLS certificate")
    with pytest.raises(credentials.CredentialError, match="is not valid before"):
        credentials.check_cert(fresh.cert, "TLS certificate", now=1e9)  # 2001
    with pytest.raises(credentials.CredentialError, match="not a PEM certificate"):
        credentials.check_cert(_file(tmp_path, "hello", 0o644), "TLS certificate")


@pytest.mark.parametrize(
    ("daemon", "want"),
    [
        ({"tcp_listen": "127.0.0.1:7070"}, "needs a token or a certificate"),
        ({"tcp_listen": "0.0.0.0:7070", "token_file": "t"}, "not a loopback address"),
        ({"tcp_listen": "[::]:7070", "token_file": "t"}, "not a loopback address"),
        ({"tcp_listen": "db.example:7070", "token_file": "t"}, "not a loopback address"),
        ({"tcp_listen": "127.0.0.1:1", "token_file": "t", "tls_cert": "c"}, "tls_key is empty"),
        ({"tcp_listen": "127.0.0.1:1", "tls_client_ca": "ca"}, "tls_cert is empty"),
        ({"tls_cert": "c", "tls_key": "k"}, "tcp_listen is empty"),
    ],
)
def test_the_config_refuses_an_unsafe_door(daemon: dict, want: str) -> None:
    flat = {f"daemon.{k}": v for k, v in daemon.items()}
    assert any(want in why for _key, why in configmod.tcp_problems(flat)), configmod.tcp_problems(
        flat
    )


@pytest.mark.parametrize(
    "daemon",
    [
        {"tcp_listen": "127.0.0.1:7070", "token_file": "t"},
        {"tcp_listen": "localhost:7070", "token_file": "t"},
        {"tcp_listen": "[::1]:7070", "token_file": "t"},
        {"tcp_listen": "0.0.0.0:7070", "tls_cert": "c", "tls_key": "k", "token_file": "t"},
        {"tcp_listen": "0.0.0.0:7070", "tls_cert": "c", "tls_key": "k", "tls_client_ca": "a"},
        {},
    ],
)
def test_the_config_accepts_a_safe_door(daemon: dict) -> None:
    assert configmod.tcp_problems({f"daemon.{k}": v for k, v in daemon.items()}) == []


def test_tokens_name_of() -> None:
    t = auth.Tokens({"ops": "o" * 20, "ci": "c" * 20})
    assert t.name_of("Bearer " + "o" * 20) == "ops"
    assert t.name_of("Bearer  " + "c" * 20 + " ") == "ci"
    for bad in ("", "Bearer ", "Bearer " + "o" * 19, "Basic " + "o" * 20, "o" * 20):
        assert t.name_of(bad) is None, bad


def test_backoff_doubles_per_failure_and_a_success_clears_it() -> None:
    now = [100.0]
    b = auth.Backoff(clock=lambda: now[0])
    for _ in range(auth.BACKOFF_AFTER - 1):
        b.failed("10.0.0.1")
    assert b.wait_s("10.0.0.1") == 0 and b.sources() == 0
    b.failed("10.0.0.1")
    assert b.wait_s("10.0.0.1") == auth.BACKOFF_FIRST_S and b.sources() == 1
    b.failed("10.0.0.1")
    assert b.wait_s("10.0.0.1") == 2 * auth.BACKOFF_FIRST_S
    for _ in range(20):
        b.failed("10.0.0.1")
    assert b.wait_s("10.0.0.1") == auth.BACKOFF_MAX_S
    assert b.wait_s("10.0.0.2") == 0  # per source
    now[0] += auth.BACKOFF_MAX_S
    assert b.wait_s("10.0.0.1") == 0 and b.sources() == 0
    b.failed("10.0.0.1")  # the count goes on until a success
    assert b.wait_s("10.0.0.1") == auth.BACKOFF_MAX_S
    b.succeeded("10.0.0.1")
    assert b.wait_s("10.0.0.1") == 0
    b.failed("10.0.0.1")
    assert b.wait_s("10.0.0.1") == 0


def test_guard_counts_every_reason_and_backoff_refusals_do_not_lengthen_it() -> None:
    seen: list[str] = []
    now = [0.0]
    g = auth.Guard(None, seen.append, auth.Backoff(clock=lambda: now[0]))
    for _ in range(auth.BACKOFF_AFTER):
        g.failed("h", "token")
    wait = g.backoff.wait_s("h")
    g.failed("h", "backoff")
    assert g.backoff.wait_s("h") == wait
    assert seen == ["token"] * auth.BACKOFF_AFTER + ["backoff"]


def test_unix_caller_from_so_peercred() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        c = auth.unix_caller(a)
    assert (c.uid, c.pid) == (os.getuid(), os.getpid())
    assert c.comm == Path("/proc/self/comm").read_text().strip()
    assert c.by.startswith(f"uid {os.getuid()}") and c.by.endswith(f"pid {os.getpid()} {c.comm}")
    assert c.to_dict() == {"door": "unix", "uid": c.uid, "user": c.user, "pid": c.pid,
                           "comm": c.comm}  # fmt: skip


def test_tcp_caller_text() -> None:
    c = auth.Caller("tcp", addr="10.0.0.7", subject="CN=alice,O=ops")
    assert c.by == "CN=alice,O=ops (tls 10.0.0.7)"
    c.token = "ci"
    assert c.by == "CN=alice,O=ops + token ci (tls 10.0.0.7)"
    assert auth.Caller("tcp", addr="127.0.0.1", token="ci").by == "token ci (tcp 127.0.0.1)"
    assert auth.Caller("tcp", addr="::1").to_dict() == {"door": "tcp", "addr": "::1"}
