"""A feature as a part of the daemon: what the supervisor and the control API ask of every
part, so that none of them names a feature.

A part owns its per-engine state (`EngineHandle.parts[NAME]`) and per-operation state
(`Operation.parts[NAME]`), what it adds to each start through the launcher's hooks (the
server's environment, readers of its log lines, flags set aside when argvs are compared),
its exporter source (added to the hub in `attach`, fed from what the part hears on the
bus), its section of `status` (`STATUS`), and what it does when the configuration is
re-read and when the daemon stops. docs/architecture.md ("Parts") says how to add one.
"""

from __future__ import annotations

from typing import Any, Protocol

from fastverify.daemon.events import EventBus


class Part(Protocol):
    NAME: str  # its key in handle.parts and op.parts
    STATUS: str  # its section of status (`GET /v1/status`)

    def attach(self, bus: EventBus, hub: Any) -> None:
        """Subscribe to the bus; with an exporter (`hub` not None), add its source to it."""

    def status(self) -> dict[str, Any] | None:
        """Its status section (may ask the system: called outside the controller's lock)."""

    def reconfigure(self, cfg: Any, engine: Any) -> None:
        """A re-read configuration (SIGHUP); `engine` is the same kind as before."""

    def shutdown(self) -> None:
        """The daemon stops: stop what the part runs."""
