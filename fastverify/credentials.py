"""Credential files, read the same way by fastverifyd and fastverifyctl: the control API's
TCP door's bearer-token files (one or several named tokens), and the TLS certificates, keys
and CA bundles of every TLS listener (the TCP door, the exporter's /metrics through its web
config: exporters/webconfig.py), with the `ssl` contexts built from them.

Every file passes `check_file` first: a regular file (a symlink only when the link itself
belongs to root or to us, as Kubernetes' secret mounts do), owned by root or by us, not
writable by group or others, and, for a secret (a token or a private key), not readable by
them either (`group_ok`: readable by its group when that group is one of ours, as a
Kubernetes secret volume with an fsGroup mounts a key: mode 0440). A problem is a
`CredentialError` naming the file, what is wrong and the fix; a secret's content never
appears in one.

Token file: one token per line, `NAME:TOKEN` (NAME: letters, digits, `._@-`, at most 64)
or a bare `TOKEN` (named `default`); `#` comments and blank lines are skipped; 16+
characters each, names and tokens unique. The name is who the daemon records as the
caller. TLS: the standard library's `ssl` (OpenSSL) does all of it, TLS 1.2 at least; the
certificate's validity dates are read from its DER (`cert_validity`) so that an expired or
not-yet-valid certificate stops start-up before anyone connects.
"""

from __future__ import annotations

import base64
import os
import re
import stat
import time
from dataclasses import dataclass
from typing import Any

MIN_TOKEN = 16
_NAMED = re.compile(r"([A-Za-z0-9_.@-]{1,64}):(.*)")


class CredentialError(ValueError):
    """A credential file that cannot be used; the message says which file, why, and the fix."""


def check_file(path: str, what: str, *, secret: bool, group_ok: bool = False) -> str:
    """The path to read after the ownership, mode and symlink checks (see the module doc)."""
    me = os.geteuid()
    try:
        link = os.lstat(path)
        st = os.stat(path)
    except FileNotFoundError:
        raise CredentialError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise CredentialError(f"{what} {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (0, me):
        raise CredentialError(
            f"{what} {path} is a symlink owned by uid {link.st_uid}: anyone who owns it "
            "chooses what is read; point the setting at the file itself"
        )
    if not stat.S_ISREG(st.st_mode):
        raise CredentialError(f"{what} {path} is not a regular file")
    if st.st_uid not in (0, me):
        raise CredentialError(
            f"{what} {path} is owned by uid {st.st_uid}; it must belong to root or to uid "
            f"{me} (chown it)"
        )
    if st.st_mode & 0o022:
        raise CredentialError(
            f"{what} {path} is writable by group or others (mode {st.st_mode & 0o777:o}); "
            "chmod go-w it"
        )
    shared = group_ok and st.st_gid in (os.getegid(), *os.getgroups())
    if secret and st.st_mode & (0o004 if shared else 0o044):
        raise CredentialError(
            f"{what} {path} is readable by group or others (mode {st.st_mode & 0o777:o}); "
            "chmod 600 it"
        )
    return path


def read_tokens(path: str) -> dict[str, str]:
    """Name -> token from a token file (see the module doc); at least one."""
    text = _read(check_file(path, "token file", secret=True), "token file")
    tokens: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _NAMED.fullmatch(line)
        name, token = (m.group(1), m.group(2).strip()) if m else ("default", line)
        where = f"token file {path}, line {number}"
        if len(token) < MIN_TOKEN:
            raise CredentialError(
                f"{where}: the token of {name!r} is shorter than {MIN_TOKEN} characters "
                "(make one with `openssl rand -hex 32`)"
            )
        if name in tokens:
            raise CredentialError(f"{where}: the name {name!r} is used twice")
        if token in tokens.values():
            raise CredentialError(f"{where}: {name!r} has the same token as another name")
        tokens[name] = token
    if not tokens:
        raise CredentialError(
            f"token file {path} holds no token (expected NAME:TOKEN or TOKEN lines)"
        )
    return tokens


def read_client_token(path: str) -> str:
    """The one token of a client's token file (`NAME:TOKEN` or `TOKEN`)."""
    tokens = read_tokens(path)
    if len(tokens) != 1:
        raise CredentialError(f"token file {path} holds {len(tokens)} tokens; a client's holds one")
    return next(iter(tokens.values()))


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialError(f"{what} {path}: {getattr(exc, 'strerror', None) or exc}") from None


# --------------------------------------------------------------------- certificates
@dataclass(frozen=True)
class Validity:
    not_before: float  # unix seconds
    not_after: float


def _tlv(der: bytes, i: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at `i`."""
    tag, n = der[i], der[i + 1]
    i += 2
    if n & 0x80:
        size = n & 0x7F
        n = int.from_bytes(der[i : i + size], "big")
        i += size
    return tag, i, i + n


def _der_time(tag: int, raw: bytes) -> float:
    """Unix seconds of a DER UTCTime (YYMMDDHHMMSSZ; 50-99 are 19xx, RFC 5280) or
    GeneralizedTime (YYYYMMDDHHMMSSZ)."""
    import calendar

    s = raw.decode("ascii").rstrip("Z")
    if tag == 0x17:
        year = int(s[:2])
        s = f"{1900 + year if year >= 50 else 2000 + year}{s[2:]}"
    parts = (int(s[:4]), *(int(s[k : k + 2]) for k in (4, 6, 8, 10, 12)))
    return float(calendar.timegm((*parts, 0, 0, 0)))


def cert_validity(pem: str) -> Validity:
    """notBefore/notAfter of the first certificate of a PEM text (RFC 5280's TBSCertificate:
    [0] version, serial, signature, issuer, validity)."""
    m = re.search(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", pem, re.S)
    if not m:
        raise ValueError("no PEM certificate in it")
    der = base64.b64decode("".join(m.group(1).split()))
    _, cert, _ = _tlv(der, 0)
    _, i, _ = _tlv(der, cert)  # TBSCertificate: its first element
    fields: list[tuple[int, int, int]] = []
    while len(fields) < 5:
        tag, start, end = _tlv(der, i)
        fields.append((tag, start, end))
        i = end
    if fields[0][0] == 0xA0:  # an explicit version: validity is the fifth element
        fields.append(_tlv(der, i))
        fields = fields[1:]
    tag, start, end = fields[3]
    if tag != 0x30:
        raise ValueError("not an X.509 certificate")
    t1, s1, e1 = _tlv(der, start)
    t2, s2, e2 = _tlv(der, e1)
    return Validity(_der_time(t1, der[s1:e1]), _der_time(t2, der[s2:e2]))


def check_cert(path: str, what: str, now: float | None = None) -> None:
    """A certificate file that is in date (after the file checks)."""
    pem = _read(check_file(path, what, secret=False), what)
    try:
        valid = cert_validity(pem)
    except (ValueError, IndexError) as exc:
        raise CredentialError(f"{what} {path} is not a PEM certificate ({exc})") from None
    now = time.time() if now is None else now
    day = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(valid.not_after))
    if now >= valid.not_after:
        raise CredentialError(f"{what} {path} expired on {day}; renew it")
    if now < valid.not_before:
        start = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(valid.not_before))
        raise CredentialError(f"{what} {path} is not valid before {start} (check the clock)")


def server_context(
    cert: str, key: str, client_ca: str = "", *, client_cert_optional: bool = False,
    key_group_ok: bool = False,
) -> Any:  # fmt: skip
    """A listener's TLS context: its certificate and key, TLS 1.2 at least; with `client_ca`,
    client certificates verified against it, required (mutual TLS) unless
    `client_cert_optional` (then checked when one is sent). `key_group_ok`: see check_file."""
    import ssl

    check_cert(cert, "TLS certificate")
    check_file(key, "TLS key", secret=True, group_ok=key_group_ok)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_pair(ctx, cert, key)
    if client_ca:
        check_file(client_ca, "TLS client CA", secret=False)
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, OSError) as exc:
            raise CredentialError(f"TLS client CA {client_ca} cannot be loaded: {exc}") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL if client_cert_optional else ssl.CERT_REQUIRED
    return ctx


def client_context(ca: str = "", cert: str = "", key: str = "") -> Any:
    """fastverifyctl's TLS context: the daemon verified against `ca` (else the system's CAs)
    and its host name checked; `cert`/`key` sent when the daemon asks for a client certificate."""
    import ssl

    if ca:
        check_file(ca, "TLS CA", secret=False)
    try:
        ctx = ssl.create_default_context(cafile=ca or None)
    except (ssl.SSLError, OSError) as exc:
        raise CredentialError(f"TLS CA {ca} cannot be loaded: {exc}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert or key:
        if not (cert and key):
            raise CredentialError("--tls-cert and --tls-key go together: give both")
        check_cert(cert, "TLS client certificate")
        check_file(key, "TLS client key", secret=True)
        _load_pair(ctx, cert, key)
    return ctx


def _load_pair(ctx: Any, cert: str, key: str) -> None:
    import ssl

    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        why = "does not match" if "KEY_VALUES_MISMATCH" in str(exc) else f"cannot be used ({exc})"
        raise CredentialError(f"TLS key {key} {why} the certificate {cert}") from None
    except OSError as exc:
        raise CredentialError(f"TLS certificate {cert} / key {key}: {exc}") from None


def subject_text(peer: dict[str, Any] | None) -> str:
    """`CN=alice,O=ops` from `SSLSocket.getpeercert()`'s subject."""
    if not peer:
        return ""
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST"}  # fmt: skip
    parts = [f"{short.get(k, k)}={v}" for rdn in peer.get("subject", ()) for k, v in rdn]
    return ",".join(parts)
