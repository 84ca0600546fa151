"""An experiment's lease on the daemon (`POST /v1/lease`, `fastverifyctl sweep` and `tune`).

While a sweep or tune measures, another client's switch would spoil its runs. The
experiment takes a lease first; `status` shows it; an operation (switch, mode, restart)
that does not carry the lease's id is refused with 409 naming the experiment, unless the
caller forces it (`--force`). One lease at a time.

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
        self, experiment: str, description: str, pid: int | None, force: bool = False
    ) -> dict[str, Any]:
        """A new lease for `experiment`; 409 while another one holds (unless `force`)."""
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
                    lease=held,
                    busy=True,
                )
            self._lease = {
                "id": secrets.token_hex(8),
                "experiment": experiment,
                "description": description,
                "pid": pid,
                "since": time.time(),
            }
            return dict(self._lease)

    def release(self, lease_id: str) -> dict[str, Any] | None:
        """End the lease `lease_id`; None when it was not the one in force (nothing done)."""
        with self._lock:
            held = self._current()
            if held is None or held["id"] != lease_id:
                return None
            self._lease = None
            return held

    def check(self, lease_id: str | None, force: bool, what: str) -> None:
        """409 when a lease other than `lease_id` holds and the caller does not force."""
        with self._lock:
            held = self._current()
        if held is None or held["id"] == lease_id or force:
            return
        raise RequestError(
            409,
            f"{describe(held)} holds the daemon: this {what} would cut its measurement short."
            f" Wait for the {held['experiment']} to end, or pass --force to do it anyway "
            f"(the {held['experiment']} then drops the run it was measuring)",
            reason="leased",
            lease=held,
            busy=True,
        )
