"""Who is calling the control API, and whether a TCP caller may: caller identity, token
checks, per-identity backoff after failed tokens, and the counts /metrics shows.

- Unix socket: the kernel's `SO_PEERCRED` (uid, pid; the user name and the process's
  command name from /proc/PID/comm), read when the connection is accepted. The socket's
  mode (0660, group `fastverify`) is its access control.
- TCP: the client certificate's subject (mutual TLS) and/or the name of the bearer token
  (several named tokens in the token file: fastverify.credentials). Tokens are compared
  in constant time, every configured one, whatever the input.
- Backoff: after `BACKOFF_AFTER` failed tokens in a row from one identity, that identity is
  refused (HTTP 429, `Retry-After`) for 1 s, doubling with each further failure up to
  `BACKOFF_MAX_S`; a success clears it. The identity is the one the failure proved: the
  client certificate's subject on a mutual-TLS door (a peer without that certificate
  cannot make its holder wait), else the source address. A failed TLS handshake or
  plaintext sent to the TLS door proves no identity: it is counted and logged, never backed
  off, so it costs the peer that sent it (a handshake, a pending slot: fastverify.admission)
  and no one else. Refusals are counted (`reason="backoff"`) but do not lengthen the wait.
- Counts: `on_failure(reason)` for `FAILURE_REASONS` (the exporter's
  fastverify_api_auth_failures_total) and `backoff_sources()` (its gauge).

A caller is recorded as one short `by` text (history's "by" column, the switch journal,
the daemon's log) and a `caller` dict; neither ever holds a secret.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import pwd
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# token: missing or wrong bearer token; tls: failed handshake (no client certificate,
# another CA's, an expired one); plaintext: HTTP sent to the TLS door; backoff: refused
# while the source backs off.
FAILURE_REASONS = ("token", "tls", "plaintext", "backoff")
BACKOFF_AFTER = 5
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
MAX_SOURCES = 10_000  # remembered failing sources (oldest forgotten first)


@dataclass
class Caller:
    """Who sent a request: `door` "unix" (uid, user, pid, comm) or "tcp" (addr, subject,
    token name)."""

    door: str
    uid: int | None = None
    user: str = ""
    pid: int | None = None
    comm: str = ""
    addr: str = ""
    subject: str = ""
    token: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # the connection's place at the door (fastverify.admission.Ticket): not who, but how long
    ticket: Any = field(default=None, repr=False, compare=False)

    @property
    def peer(self) -> str:
        """What the listener knows before any authentication: `uid 1000`, `127.0.0.1`."""
        return f"uid {self.uid}" if self.door == "unix" else self.addr

    @property
    def identity(self) -> str:
        """Who, as far as the door proved it: `uid 1000` on the Unix socket; the certificate
        subject and token name over TCP (the address when neither is known)."""
        if self.door == "unix":
            return f"uid {self.uid}"
        who = [x for x in (self.subject, f"token {self.token}" if self.token else "") if x]
        return " + ".join(who) or f"anonymous {self.addr}"

    @property
    def backoff_key(self) -> str:
        """Whose failed tokens add up: the verified certificate's subject, else the address."""
        return f"subject {self.subject}" if self.subject else f"addr {self.addr}"

    @property
    def by(self) -> str:
        """`uid 1000 (alice) pid 4242 fastverifyctl`, `CN=alice,O=ops (tls 10.0.0.7)`,
        `token ci (tcp 127.0.0.1)`."""
        if self.door == "unix":
            user = f" ({self.user})" if self.user else ""
            return f"uid {self.uid}{user} pid {self.pid} {self.comm or '?'}".strip()
        who = [self.subject] if self.subject else []
        if self.token:
            who.append(f"token {self.token}")
        door = "tls" if self.subject or self.extra.get("tls") else "tcp"
        return f"{' + '.join(who) or 'anonymous'} ({door} {self.addr})"

    def to_dict(self) -> dict[str, Any]:
        keys = (
            ("uid", "user", "pid", "comm") if self.door == "unix" else ("addr", "subject", "token")
        )
        out: dict[str, Any] = {"door": self.door}
        out.update({k: getattr(self, k) for k in keys if getattr(self, k) not in (None, "")})
        return out


def unix_caller(conn: socket.socket) -> Caller:
    """The peer of an accepted Unix-socket connection, from SO_PEERCRED."""
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", raw)
    except OSError:
        return Caller("unix")
    user = comm = ""
    with contextlib.suppress(KeyError):
        user = pwd.getpwuid(uid).pw_name
    with (
        contextlib.suppress(OSError),
        open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh,
    ):
        comm = fh.read().strip()
    return Caller("unix", uid=uid, user=user, pid=pid, comm=comm)


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


class Tokens:
    """Named bearer tokens; `name_of(header)` compares in constant time against all of
    them (equal-length digests, no early exit)."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self._digests = [(name, _digest(tok)) for name, tok in tokens.items()]
        self.names = [name for name, _ in self._digests]

    def name_of(self, authorization: str) -> str | None:
        """The name of the token in `Authorization: Bearer TOKEN`, None when it is none."""
        got = authorization[7:].strip() if authorization.startswith("Bearer ") else ""
        mine = _digest(got)
        found = None
        for name, digest in self._digests:
            if hmac.compare_digest(mine, digest) and got:
                found = name
        return found


class Backoff:
    """Per-source failure counts and refusal windows (see the module doc)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}
        self._until: dict[str, float] = {}

    def wait_s(self, source: str) -> float:
        """Seconds `source` must still wait (0: it may try)."""
        with self._lock:
            left = self._until.get(source, 0.0) - self._clock()
        return max(0.0, left)

    def failed(self, source: str) -> None:
        with self._lock:
            n = self._failures.pop(source, 0) + 1
            self._failures[source] = n  # re-inserted: the newest at the end
            if len(self._failures) > MAX_SOURCES:
                oldest = next(iter(self._failures))
                self._failures.pop(oldest)
                self._until.pop(oldest, None)
            if n >= BACKOFF_AFTER:
                wait = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (n - BACKOFF_AFTER))
                self._until[source] = self._clock() + wait

    def succeeded(self, source: str) -> None:
        with self._lock:
            self._failures.pop(source, None)
            self._until.pop(source, None)

    def sources(self) -> int:
        """Sources refused right now."""
        now = self._clock()
        with self._lock:
            return sum(1 for until in self._until.values() if until > now)


class Guard:
    """The TCP door's checks: token (when configured), backoff, counts. `on_failure(reason)`
    feeds /metrics; its log line names the source and the reason, never the secret."""

    def __init__(
        self,
        tokens: Tokens | None,
        on_failure: Callable[[str], None] | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.tokens = tokens
        self.backoff = backoff or Backoff()
        self._on_failure = on_failure or (lambda _reason: None)

    def failed(self, key: str, reason: str) -> None:
        """A failed token of `key` (Caller.backoff_key): counted and backed off."""
        if reason == "token":
            self.backoff.failed(key)
        self._on_failure(reason)

    def counted(self, reason: str) -> None:
        """A refusal that proves no identity (a failed handshake, plaintext): counted only."""
        self._on_failure(reason)
