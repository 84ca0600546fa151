"""An experiment's lease as the daemon hands it out (`POST /v1/lease`, status's `lease`:
experiment, holder, pid, since, description) and the one line both sides name it with: the
daemon's refusals and log (fastverify.daemon.lease) and the CLI's reasons
(fastverify.cli.spec_cmd). A module of its own so that the CLI needs no daemon module."""

from __future__ import annotations

import time
from typing import Any


def describe(lease: dict[str, Any]) -> str:
    """`sweep (uid 0, pid 4242, since 12:01:02 UTC: 3 profiles x 3 runs -> /tmp/out)`."""
    since = time.strftime("%H:%M:%S UTC", time.gmtime(lease["since"]))
    holder = f"{lease['holder']}, " if lease.get("holder") else ""
    pid = f"pid {lease['pid']}, " if lease.get("pid") else ""
    what = f": {lease['description']}" if lease.get("description") else ""
    return f"{lease['experiment']} ({holder}{pid}since {since}{what})"
