"""An experiment's lease on the daemon (`POST /v1/lease`, `fastverifyctl sweep` and `tune`).

While a sweep or tune measures, another client's switch would spoil its runs. The
experiment takes a lease first; `status` shows it; an operation (switch, mode, restart)
that does not carry the lease's id is refused with 409 naming the experiment, unless the
caller forces it (`--force`). One lease at a time.

A lease belongs to the identity that took it (auth.Caller.identity: the uid on the Unix
socket; the certificate subject and token name on TCP): only that identity's operations
pass with its id, only it releases the lease, and a lease taken on one door is no one's on
the other. Others see who holds it, never its id (`public`). An operation or a new lease
forced over another's lease is an override: the daemon records it in the journal and the
history (kind `lease_override`, fastverify.daemon.facade).

A lease ends when its holder releases it, or when its holder process is gone: over the Unix
socket the daemon knows the holder's pid from the connection itself (SO_PEERCRED, read by
fastverify.daemon.auth), and a lease whose process has exited (or is a zombie) lapses at
the next look. Over TCP the peer pid is unknown: such a lease holds until released or
broken with --force.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from fastverify.daemon.resolve import RequestError
from fastverify.lease_record import describe

EXPERIMENTS = ("sweep", "tune", "spec-costs")  # spec-costs: fastverifyctl spec costs
DESCRIPTION_MAX = 500


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Leases:
    """The one lease a daemon may hold (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lease: dict[str, Any] | None = None

    def current(self) -> dict[str, Any] | None:
        """The lease in force (a lease whose holder process is gone lapses here)."""
        with self._lock:
            return self._current()

    def _current(self) -> dict[str, Any] | None:
        lease = self._lease
        if lease is not None and lease.get("pid") and not _alive(int(lease["pid"])):
            self._lease = None
        return dict(self._lease) if self._lease else None

    def take(
        self,
        experiment: str,
        description: str,
        pid: int | None,
        force: bool = False,
        holder: str = "",
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(a new lease of `holder` for `experiment`, the lease it overrode or None); 409
        while another one holds (unless `force`)."""
        if experiment not in EXPERIMENTS:
            raise RequestError(
                422, f"field 'experiment' must be one of {', '.join(EXPERIMENTS)}, "
                f"got {experiment!r}"
            )  # fmt: skip
        if len(description) > DESCRIPTION_MAX:
            raise RequestError(422, f"field 'description': at most {DESCRIPTION_MAX} characters")
        with self._lock:
            held = self._current()
            if held is not None and not force:
                raise RequestError(
                    409,
                    f"{describe(held)} holds the daemon: wait for it to end, or stop it "
                    "(Ctrl-C in its shell; it resumes with --resume)",
                    reason="leased",
                    lease=public(held),
                    busy=True,
                )
            self._lease = {
                "id": secrets.token_hex(8),
                "experiment": experiment,
                "description": description,
                "pid": pid,
                "holder": holder,
                "since": time.time(),
            }
            return dict(self._lease), held

    def release(self, lease_id: str, holder: str) -> dict[str, Any] | None:
        """End the lease `lease_id` of `holder`; None when it is not the one in force
        (nothing done); 403 when another identity holds it."""
        with self._lock:
            held = self._current()
            if held is None or not secrets.compare_digest(held["id"].encode(), lease_id.encode()):
                return None
            if held.get("holder", "") != holder:
                raise RequestError(
                    403,
                    f"the lease is held by {held.get('holder') or 'another caller'}, not by "
                    f"{holder}: only its holder releases it (another takes it over with "
                    "`POST /v1/lease` and force, which is recorded)",
                    reason="not_holder",
                    lease=public(held),
                )
            self._lease = None
            return held

    def check(
        self, lease_id: str | None, force: bool, what: str, holder: str = ""
    ) -> dict[str, Any] | None:
        """None when no lease holds or the caller is its holder with its id; the lease
        when `force` overrides it (the caller records the override); 409 otherwise."""
        with self._lock:
            held = self._current()
        if held is None:
            return None
        if (
            lease_id is not None
            and secrets.compare_digest(held["id"].encode(), lease_id.encode())
            and held.get("holder", "") == holder
        ):
            return None
        if force:
            return held
        raise RequestError(
            409,
            f"{describe(held)} holds the daemon: this {what} would cut its measurement short."
            f" Wait for the {held['experiment']} to end, or pass --force to do it anyway "
            f"(the {held['experiment']} then drops the run it was measuring)",
            reason="leased",
            lease=public(held),
            busy=True,
        )


def public(lease: dict[str, Any] | None) -> dict[str, Any] | None:
    """What anyone may see of a lease: all but its id (who holds it, for what, since when)."""
    return None if lease is None else {k: v for k, v in lease.items() if k != "id"}
