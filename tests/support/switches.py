"""The newest history record of a switch, as the output tests wait for it."""

from __future__ import annotations

from tests.support.harness import DaemonHarness


def last_switch(d: DaemonHarness, profile: str) -> dict:
    """The newest history record of a switch to `profile` (waits for it: READY is published
    before the record is appended)."""

    def find() -> dict | None:
        recs = [r for r in d.client.get("/v1/history") if r.get("profile") == profile]
        return recs[-1] if recs and recs[-1].get("kind") == "switch" else None

    return d.wait_for(find, 15, f"the history record of the switch to {profile}")
