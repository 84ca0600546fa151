"""Prometheus exporter-toolkit's web configuration file (`--web-config-file`), as node_exporter
and every other Go exporter read it, for fastverify's /metrics server (exporters/http.py).

The keys and their meaning follow exporter-toolkit (docs/web-configuration.md and
web/tls_config.go of github.com/prometheus/exporter-toolkit):

    tls_server_config:
      cert_file / key_file (or inline cert / key)     the server's certificate and key
      client_auth_type: NoClientCert | VerifyClientCertIfGiven | RequireAndVerifyClientCert
      client_ca_file (or inline client_ca)             CA of client certificates
      client_allowed_sans: [...]                       a client SAN must be one of these
      min_version / max_version: TLS10..TLS13          default TLS12 / TLS13
      prefer_server_cipher_suites: bool                default true
    http_server_config:
      http2: bool                                      accepted; this server speaks HTTP/1.1
      headers: {Strict-Transport-Security, X-Content-Type-Options: nosniff,
                X-Frame-Options: deny|sameorigin, X-XSS-Protection, Content-Security-Policy}
    basic_auth_users: {USER: BCRYPT_HASH}              every path then needs one of them
    rate_limit: {interval: 1s, burst: N}               token bucket over all requests

As there: unknown keys are errors (the toolkit reads YAML strictly), relative paths are
taken from the file's directory, every password must be a bcrypt hash, a client CA without
a client auth type is an error, TLS only when a TLS key is set (basic auth alone is plain
HTTP), an unknown user is checked against a fixed hash (no user enumeration by timing), a
bcrypt check runs one at a time and its answer is cached, and a refusal is 401 with
`WWW-Authenticate: Basic`. Not carried over, each refused with the reason: the two
client-auth types that take a certificate without verifying it (RequestClientCert,
RequireAnyClientCert; the toolkit's own docs call them insecure) and Go's cipher-suite and
curve names (`cipher_suites`, `curve_preferences`: OpenSSL chooses). The file is read once
at start (the toolkit re-reads it per request): restart to change it. The certificate, key
and client CA pass fastverify.credentials' checks and make its `server_context`, as the
control API's TCP door's do (owned by root or us, not writable by others, the key not
readable by others, the certificate in date; the key may be readable by one of our groups,
as a Kubernetes secret volume mounts it), then this file's versions and cipher preference
apply. `ssl` is Python's (OpenSSL); `bcrypt` is the `bcrypt` package, loaded only for a
file with users.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

TOP = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
TLS_KEYS = ("cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
            "client_ca_file", "client_allowed_sans", "min_version", "max_version",
            "cipher_suites", "curve_preferences", "prefer_server_cipher_suites")  # fmt: skip
HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
AUTH_TYPES = ("NoClientCert", "RequestClientCert", "RequireAnyClientCert", "RequireClientCert",
              "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")  # fmt: skip
_BCRYPT = re.compile(r"\$2[abxy]?\$(\d\d)\$[./A-Za-z0-9]{53}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


class WebConfigError(ValueError):
    """The web config cannot be used: the file, the key and what would be right."""


@dataclass
class WebConfig:
    path: str
    tls: Any = None  # ssl.SSLContext, None for plain HTTP
    allowed_sans: list[str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)  # user -> bcrypt hash
    rate: tuple[float, int] | None = None  # (seconds per token, burst)
    _checker: _BasicAuth | None = None
    _bucket: _Bucket | None = None

    def check_user(self, authorization: str) -> bool:
        """Whether an `Authorization` header's basic credentials are one of the users."""
        if not self.users:
            return True
        if self._checker is None:
            self._checker = _BasicAuth(self.users)
        return self._checker.ok(authorization)

    def allow_request(self) -> bool:
        """The rate limit's verdict for one more request (always True without one)."""
        if self.rate is None:
            return True
        if self._bucket is None:
            self._bucket = _Bucket(*self.rate)
        return self._bucket.take()

    def sans_ok(self, peer: dict[str, Any] | None) -> bool:
        """A verified client's certificate holds one of `client_allowed_sans`."""
        if self.allowed_sans is None:
            return True
        names = [v for _kind, v in (peer or {}).get("subjectAltName", ())]
        return any(n in self.allowed_sans for n in names)


def load(path: str) -> WebConfig:
    """Read and check the file (see the module doc); WebConfigError says what is wrong."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise WebConfigError(f"web config {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise WebConfigError(f"web config {path} is not YAML: {exc}") from None
    where = f"web config {path}"
    _only(doc, TOP, where)
    cfg = WebConfig(path=path)
    base = os.path.dirname(os.path.abspath(path))
    users = doc.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise WebConfigError(f"{where}: basic_auth_users must be a map of user: bcrypt hash")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise WebConfigError(
                f"{where}: basic_auth_users.{user} is not a bcrypt hash (make one with "
                "`htpasswd -nBC 10 \"\" | tr -d ':\\n'`)"
            )
        cfg.users[str(user)] = hashed
    http = doc.get("http_server_config") or {}
    _only(http, ("http2", "headers"), f"{where}: http_server_config")
    for name, value in (http.get("headers") or {}).items():
        if name not in HEADERS:
            raise WebConfigError(f"{where}: HTTP header {name!r} can not be configured "
                                 f"(one of {', '.join(HEADERS)})")  # fmt: skip
        if HEADERS[name] and value not in HEADERS[name]:
            raise WebConfigError(f"{where}: {name}: {value!r} (expected one of "
                                 f"{', '.join(HEADERS[name])})")  # fmt: skip
        cfg.headers[name] = str(value)
    cfg.rate = _rate(doc.get("rate_limit"), where)
    tls = doc.get("tls_server_config") or {}
    _only(tls, TLS_KEYS, f"{where}: tls_server_config")
    if tls:
        cfg.tls, cfg.allowed_sans = _tls(tls, base, where)
    return cfg


def _only(section: Any, keys: tuple[str, ...], where: str) -> None:
    if not isinstance(section, dict):
        raise WebConfigError(f"{where} must be a map")
    unknown = sorted(set(section) - set(keys))
    if unknown:
        raise WebConfigError(f"{where}: unknown key(s) {', '.join(map(str, unknown))} "
                             f"(known: {', '.join(keys)})")  # fmt: skip


def _rate(section: Any, where: str) -> tuple[float, int] | None:
    if not section:
        return None
    _only(section, ("interval", "burst"), f"{where}: rate_limit")
    m = _DURATION.fullmatch(str(section.get("interval", "0s")))
    if not m:
        raise WebConfigError(f"{where}: rate_limit.interval {section.get('interval')!r} "
                             "(expected a duration like 100ms, 1s, 1m)")  # fmt: skip
    seconds = float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    burst = section.get("burst", 0)
    if not isinstance(burst, int) or burst < 0:
        raise WebConfigError(f"{where}: rate_limit.burst must be a whole number >= 0")
    return (seconds, burst) if seconds > 0 else None


def _tls(t: dict[str, Any], base: str, where: str) -> tuple[Any, list[str] | None]:
    where = f"{where}: tls_server_config"
    for bad in ("cipher_suites", "curve_preferences"):
        if t.get(bad):
            raise WebConfigError(f"{where}.{bad}: Go's names are not supported here (OpenSSL "
                                 "chooses); remove the key")  # fmt: skip
    auth = t.get("client_auth_type") or "NoClientCert"
    if auth not in AUTH_TYPES:
        raise WebConfigError(f"{where}.client_auth_type {auth!r} (expected one of "
                             f"{', '.join(AUTH_TYPES)})")  # fmt: skip
    if auth in ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert"):
        raise WebConfigError(f"{where}.client_auth_type {auth} takes a certificate without "
                             "verifying it (insecure, as exporter-toolkit's docs say); use "
                             "RequireAndVerifyClientCert with client_ca_file")  # fmt: skip
    made: list[str] = []  # temp files of inline PEM, removed once loaded
    try:
        return _context(t, auth, base, where, made)
    finally:
        for tmp in made:
            os.unlink(tmp)


def _context(
    t: dict[str, Any], auth: str, base: str, where: str, made: list[str]
) -> tuple[Any, list[str] | None]:
    import ssl

    from fastverify.credentials import CredentialError, server_context

    cert = _file_or_inline(t, "cert", base, where, made)
    key = _file_or_inline(t, "key", base, where, made)
    ca = _file_or_inline(t, "client_ca", base, where, made, required=False)
    if ca and auth == "NoClientCert":
        raise WebConfigError(
            f"{where}: client CA's have been configured without a client auth policy "
            "(set client_auth_type: RequireAndVerifyClientCert)"
        )
    if auth != "NoClientCert" and not ca:
        raise WebConfigError(f"{where}: client_auth_type {auth} needs client_ca_file")
    sans = t.get("client_allowed_sans")
    if sans is not None and auth != "RequireAndVerifyClientCert":
        raise WebConfigError(f"{where}: client_allowed_sans requires client_auth_type "
                             "RequireAndVerifyClientCert")  # fmt: skip
    versions = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}  # fmt: skip
    low, high = t.get("min_version") or "TLS12", t.get("max_version") or "TLS13"
    for k, v in (("min_version", low), ("max_version", high)):
        if v not in versions:
            raise WebConfigError(f"{where}.{k} {v!r} (expected one of {', '.join(versions)})")
    try:  # the files' checks and the context: the TCP door's (a key 0440 for Kubernetes)
        ctx = server_context(cert, key, ca, client_cert_optional=auth == "VerifyClientCertIfGiven",
                             key_group_ok=True)  # fmt: skip
    except CredentialError as exc:
        raise WebConfigError(f"{where}: {exc}") from None
    ctx.minimum_version, ctx.maximum_version = versions[low], versions[high]
    if not t.get("prefer_server_cipher_suites", True):
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    return ctx, (list(map(str, sans)) if sans is not None else None)


def _file_or_inline(
    t: dict[str, Any], name: str, base: str, where: str, made: list[str], *,
    required: bool = True,
) -> str:  # fmt: skip
    """The path of `NAME_file` (relative to the config's directory) or of a private temp
    file holding the inline `NAME` (listed in `made`, for the caller to remove)."""
    path, text = t.get(f"{name}_file"), t.get(name)
    if path and text:
        raise WebConfigError(f"{where}: {name} and {name}_file are both set (keep one)")
    if path:  # checked with the others (credentials.check_file)
        return str(path) if os.path.isabs(path) else os.path.join(base, path)
    if text:
        fd, tmp = tempfile.mkstemp(prefix="fastverify-webcfg-", suffix=".pem")
        made.append(tmp)
        with os.fdopen(fd, "w") as fh:
            fh.write(str(text))
        return tmp
    if required:
        raise WebConfigError(f"{where}: missing one of {name} or {name}_file")
    return ""


class _BasicAuth:
    """bcrypt checks as exporter-toolkit does them: one at a time, answers cached."""

    FAKE_PASSWORD = b"fastverify-not-a-user"

    def __init__(self, users: dict[str, str]) -> None:
        import bcrypt

        self._bcrypt = bcrypt
        self.users = users
        # the loader let through only bcrypt hashes: each matches, with its cost
        cost = min(int(m.group(1)) for m in map(_BCRYPT.fullmatch, users.values()) if m)
        self._fake = bcrypt.hashpw(self.FAKE_PASSWORD, bcrypt.gensalt(max(4, cost))).decode()
        self._lock = threading.Lock()
        self._cache: dict[bytes, bool] = {}

    def ok(self, authorization: str) -> bool:
        import base64
        import binascii

        scheme, _, raw = authorization.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(raw.strip()).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep:
            return False
        hashed = self.users.get(user)
        known = hashed is not None
        hashed = hashed or self._fake
        key = hashlib.sha256(b"\0".join(x.encode() for x in (user, hashed, password))).digest()
        if key not in self._cache:
            with self._lock:
                good = self._bcrypt.checkpw(password.encode(), hashed.encode())
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = good
        return known and self._cache[key]


class _Bucket:
    """A token bucket: one token per `every` seconds, at most `burst` saved."""

    def __init__(self, every: float, burst: int) -> None:
        self.every, self.burst = every, max(1, burst)
        self.tokens, self.t = float(self.burst), time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.t) / self.every)
            self.t = now
            if self.tokens >= 1:
                self.tokens -= 1
                return True
            return False
