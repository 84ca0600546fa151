"""The daemon's health endpoints over plain HTTP, for an orchestrator's probes (Kubernetes).

    GET /livez     200 while the daemon itself is healthy: its main loop ticked recently
                   and the supervisor answers (the engine's state does not matter: a
                   FAILED profile is retried by the daemon itself, recovery.py), until,
                   in declarative mode, those retries are spent: then 503, so that the
                   kubelet restarts the pod
    GET /readyz    200 only in READY (reached only through verification) while the
                   engine passes its health checks (503 from the first failed check of
                   SGLang's /health_generate, daemon/watch.py), and in
                   declarative mode only while serving the configured profile and mode (or
                   the --canary an operator asked for); else 503 with the reason. A
                   fallback to another profile is never Ready; SGLang's /health alone
                   never makes a pod Ready. One exception: while the front door holds
                   for a switch, restart or crash restart of an engine that served (its
                   requests wait there, then go to the new engine or the rolled-back one),
                   the pod stays Ready: taking it out of the Service would turn a wait
                   into failed requests (a single replica: no endpoint at all) and bring
                   it back only a probe period after the switch ended.
    GET /startupz  200 once the first start has settled (READY or FAILED, or BACKOFF after
                   a crash), however long the model took to load; 503 while it loads

Bodies are small JSON objects (`{"ok", "state", "profile", "mode", "why"}`, `Cache-Control:
no-store`); nothing else is served (no control operations: those stay on the control socket;
no metrics: those are on `exporter.metrics_listen`). Off unless `exporter.health_listen`
(fastverifyd --health-listen) names an address. The listener is the exporter's HTTP server
(fastverify.httpserver: GET and HEAD, keep-alive, the same caps and request deadline), plain
HTTP, on its own address.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from fastverify.api_answers import StatusBody
from fastverify.api_models import part_section
from fastverify.httpserver import HttpServer, Reply

log = logging.getLogger("fastverifyd.health")

PATHS = ("/livez", "/readyz", "/startupz")
NO_STORE = b"Cache-Control: no-store\r\n"
# States in which the first start has settled (the load is over, one way or the other).
SETTLED = ("READY", "FAILED", "BACKOFF")
# States of a switch, restart or crash restart in which a front door that holds keeps the pod
# Ready (FAILED is not one: nothing is coming to serve the held requests).
HELD = ("STOPPING", "STARTING", "VERIFYING", "ROLLING_BACK", "BACKOFF")


class Health:
    """The verdicts, from the facade's status and the main loop's heartbeat."""

    def __init__(self, status: Callable[[], StatusBody], stale_after_s: float = 30.0):
        self._status = status
        self.stale_after_s = stale_after_s
        self._beat = time.monotonic()
        self._settled = False

    def beat(self) -> None:
        """The main loop calls this every tick."""
        self._beat = time.monotonic()

    def livez(self) -> tuple[bool, dict[str, Any]]:
        age = time.monotonic() - self._beat
        if age > self.stale_after_s:
            return False, {"why": f"main loop has not ticked for {age:.0f} s"}
        st = self._status()
        recovery = st.get("recovery") or {}
        if st.get("declarative") and recovery.get("spent"):
            failure = st.get("last_failure") or {}
            return False, _brief(
                st,
                f"FAILED after {recovery.get('retries')} recovery retries (daemon."
                f"recover_retries): {failure.get('reason')} ({failure.get('message', '')})",
            )
        return True, _brief(st, "daemon answers")

    def readyz(self) -> tuple[bool, dict[str, Any]]:
        st = self._status()
        door = part_section(st, "frontdoor")
        if st.get("state") in HELD and door.get("state") == "holding":
            waiting = door.get("waiting", 0)
            why = f"the front door holds requests ({waiting} waiting) for the next engine"
            return True, _brief(st, f"state {st.get('state')}: {why}")
        if st.get("state") != "READY":
            why = f"state {st.get('state')}"
            failure = st.get("last_failure") or {}
            if st.get("state") == "FAILED" and failure.get("reason"):
                why += f": {failure.get('reason')} ({failure.get('message', '')})"
            return False, _brief(st, why)
        checks = (st.get("engine") or {}).get("health") or {}
        if checks.get("failed_checks"):
            return False, _brief(st, f"engine failing its health check: {checks['summary']}")
        declared = st.get("declarative")
        if declared:
            serving = (st.get("profile"), st.get("mode"))
            allowed = [(declared.get("profile"), declared.get("mode"))]
            canary = declared.get("canary")
            if canary:
                allowed.append((canary.get("profile"), canary.get("mode")))
            if serving not in allowed:
                return False, _brief(
                    st,
                    f"serving {serving[0]}/{serving[1]}, but the manifest declares "
                    f"{allowed[0][0]}/{allowed[0][1]}"
                    + (f" (canary {allowed[1][0]}/{allowed[1][1]})" if canary else ""),
                )
        return True, _brief(st, "READY and verified")

    def startupz(self) -> tuple[bool, dict[str, Any]]:
        st = self._status()
        if st.get("state") in SETTLED:
            self._settled = True  # latched: later switches do not re-enter start-up
        if self._settled:
            return True, _brief(st, "first start settled")
        progress = (st.get("engine") or {}).get("progress") or {}
        pct = progress.get("percent")
        loading = f" ({progress.get('phase')} {pct:.0f}%)" if isinstance(pct, int | float) else ""
        return False, _brief(st, f"starting: state {st.get('state')}{loading}")


def _brief(st: StatusBody, why: str) -> dict[str, Any]:
    return {"state": st.get("state"), "profile": st.get("profile"), "mode": st.get("mode"),
            "why": why}  # fmt: skip


class HealthServer(HttpServer):
    """The probes' listener: the exporter's HTTP server (fastverify.httpserver) on its own
    address, with the three paths as its routes and nothing else."""

    def __init__(self, listen: str, health: Health) -> None:
        self.health = health
        routes = {p.encode(): self._probe for p in PATHS}
        super().__init__(listen, routes, not_found=self._probe, name="health checks",
                         flag="--health-listen")  # fmt: skip

    @property
    def url(self) -> str:
        return self.base_url

    def _probe(self, raw: bytes, _headers: Mapping[bytes, bytes]) -> Reply:
        path = raw.decode("latin-1").rstrip("/")
        if path not in PATHS:
            return _json(404, {"error": f"unknown path {path or '/'} (known: {', '.join(PATHS)})"})
        try:
            ok, body = getattr(self.health, path[1:])()
        except Exception as exc:  # a probe must answer, never hang or crash the thread
            log.exception("health check %s failed", path)
            ok, body = False, {"why": f"internal error: {exc}"}
        return _json(200 if ok else 503, {"ok": ok, **body})


def _json(status: int, data: dict[str, Any]) -> Reply:
    return status, b"application/json", (json.dumps(data) + "\n").encode(), NO_STORE
