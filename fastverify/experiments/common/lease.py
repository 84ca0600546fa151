"""An experiment's lease on the daemon, client side: `hold(client, "sweep", what)` takes
the lease (`POST /v1/lease`) and yields a client whose operations carry it, so the
experiment's own switches pass while anyone else's get 409 naming it; the lease is released
when the block ends, however it ends. A tune holds one lease for every sweep inside it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from fastverify import api_models
from fastverify.client import Calls

# the operations a lease guards: those whose body takes its id
GUARDED = tuple(e.path for e in api_models.ENDPOINTS if any(f.name == "lease" for f in e.fields))
RELEASE_TIMEOUT_S = 10.0


class LeaseRefused(RuntimeError):
    """Another experiment holds the daemon (its description is the message)."""


class Leased(Calls):
    """A ControlClient whose operation requests carry the lease `lease["id"]` (its typed
    calls, `call`/`follow`, `get`/`post` alike: all go through `request` and `stream`)."""

    def __init__(self, client: Any, lease: dict[str, Any]) -> None:
        self._client = client
        self.held = lease  # (not `lease`: the method that asks the daemon)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _body(self, path: str, body: Any) -> Any:
        if path.split("?")[0] in GUARDED and isinstance(body, dict | type(None)):
            return {**(body or {}), "lease": self.held["id"]}
        return body

    def request(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        return self._client.request(method, path, self._body(path, body), timeout=timeout)

    def stream(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return self._client.stream(method, path, self._body(path, body), **kw)


@contextlib.contextmanager
def hold(client: Any, experiment: str, description: str) -> Iterator[Any]:
    """Hold the daemon for `experiment` while the block runs (a client that already holds a
    lease is used as it is). LeaseRefused when another experiment holds it."""
    from fastverify.client import ApiError

    if isinstance(client, Leased):
        yield client
        return
    try:
        lease = client.take_lease(experiment, description=description[:500])
    except ApiError as exc:
        if exc.status == 409:
            raise LeaseRefused(exc.body.get("error") or str(exc)) from None
        raise
    try:
        yield Leased(client, lease)
    finally:
        # a daemon gone meanwhile holds no lease; one that does not answer (stopped) lets
        # it lapse when this process exits
        with contextlib.suppress(Exception):
            client.release_lease(lease["id"], timeout=RELEASE_TIMEOUT_S)
