"""The control API declared once (fastverify.api_models): what is derived from it stays in
step with it: docs/reference/api.md's reference block regenerates byte-identically, every route has
its handler, every endpoint its typed client method, the client refuses a field its
endpoint does not declare before anything is sent, and no module but the declaration and
the daemon that serves it writes a control-API path out (the CLI and the experiments call
the typed methods)."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import get_args, get_type_hints

import pytest

import fastverify
from fastverify import api_answers, api_bodies, api_reference
from fastverify import api_models as m
from fastverify.api_schema import KINDS
from fastverify.client import ControlClient
from fastverify.daemon.api_handler import Handler


def test_the_committed_reference_is_what_the_models_write() -> None:
    committed = api_reference.DOC.read_text(encoding="utf-8")
    regenerated = api_reference.splice(committed, api_reference.render())
    assert regenerated == committed, (
        "docs/reference/api.md's reference block is stale: regenerate it with "
        f"`{api_reference.COMMAND}`"
    )


def test_the_check_sees_a_stale_reference() -> None:
    committed = api_reference.DOC.read_text(encoding="utf-8")
    stale = committed.replace("| `name` | str | yes |", "| `name` | str | no |", 1)
    assert stale != committed
    assert api_reference.splice(stale, api_reference.render()) == committed
    with pytest.raises(ValueError):
        api_reference.splice("no markers here", api_reference.render())


def test_every_route_has_a_handler_and_every_endpoint_a_client_method() -> None:
    for path in m.ROUTES:
        assert callable(getattr(Handler, "h_" + path[len("/v1/") :].replace("/", "_"))), path
    for ep in m.ENDPOINTS:
        assert callable(getattr(ControlClient, ep.client, None)), (ep, ep.client)
        for f in (*ep.fields, *ep.query):
            assert f.kind in KINDS, (ep, f.name, f.kind)
    assert len({(e.method, e.path) for e in m.ENDPOINTS}) == len(m.ENDPOINTS)


def test_the_client_methods_take_the_fields_their_models_declare() -> None:
    """A typed method's keyword fields are its endpoint's model (`**fields: Unpack[Model]`,
    the model's own fields or all but the ones it takes by name): the type checker holds the
    CLI's calls to the declaration, as the daemon's validation is held to it."""
    typed = 0
    for ep in m.ENDPOINTS:
        method = getattr(ControlClient, ep.client)
        params = inspect.signature(method).parameters.values()
        var = next((p for p in params if p.kind is p.VAR_KEYWORD), None)
        named = {p.name for p in params} & set(ep.names)
        if var is None:  # a method that takes its fields by name, if any
            assert named == set(ep.names) or ep.client in ("history", "release_lease"), ep
            continue
        models = {"a": api_answers, "b": api_bodies}  # the client's TYPE_CHECKING imports
        hints = get_type_hints(method, localns=models, include_extras=True)
        (model,) = get_args(hints[var.name])
        assert named | set(model.__annotations__) == set(ep.names), ep
        assert not named & set(model.__annotations__), ep
        for name, hint in model.__annotations__.items():  # the same declaration, not a copy
            assert hint is ep.model.__annotations__[name], (ep, name)
        typed += 1
    assert typed == 10  # every request with fields but the three that take them by name


class _Recording(ControlClient):
    def __init__(self) -> None:
        super().__init__("/nonexistent.sock")
        self.sent: list[tuple[str, str, object]] = []

    def request(self, method: str, path: str, body: object = None, timeout: object = None):  # type: ignore[override]
        self.sent.append((method, path, body))
        return {}


def test_typed_methods_send_what_the_models_declare() -> None:
    c = _Recording()
    c.set_profile("ring-ll", mode="eagle3", wait=False, timeout_s=None)
    c.history(n=5)
    c.server_argv(profile="a b", mode="eagle3", check=True)
    c.status()
    assert c.sent == [
        ("POST", "/v1/profile", {"name": "ring-ll", "mode": "eagle3", "wait": False}),
        ("GET", "/v1/history?n=5", None),
        ("GET", "/v1/server/argv?profile=a%20b&mode=eagle3&check=1", None),
        ("GET", "/v1/status", None),
    ]
    with pytest.raises(TypeError, match="takes no field nam"):
        c.set_profile("ring-ll", nam="typo")
    assert len(c.sent) == 4  # nothing was sent for the typo


def test_a_leased_clients_typed_calls_carry_the_lease() -> None:
    """An experiment's client (experiments.common.lease.Leased) adds its lease id to the
    operations the lease guards, the ones whose body declares `lease`; typed calls too."""
    from fastverify.experiments.common.lease import GUARDED, Leased

    assert GUARDED == ("/v1/profile", "/v1/mode", "/v1/restart")
    inner = _Recording()
    leased = Leased(inner, {"id": "L1"})
    leased.set_profile("ring-ll", mode="eagle3")
    leased.restart(queue=True)
    leased.status()
    leased.record_baseline(profile="ring-ll", tokens_per_second=1.0)
    assert inner.sent == [
        ("POST", "/v1/profile", {"name": "ring-ll", "mode": "eagle3", "lease": "L1"}),
        ("POST", "/v1/restart", {"queue": True, "lease": "L1"}),
        ("GET", "/v1/status", None),
        ("POST", "/v1/baselines", {"profile": "ring-ll", "tokens_per_second": 1.0}),
    ]


# Where a control-API path may be written out: its declaration and the daemon that serves
# it. The sim's server may name its own SGLang routes (/v1/completions, /v1/models: SGLang's
# API, not ours), never one of the daemon's.
PATHS_DECLARED = ("fastverify/api_models.py", "fastverify/daemon/")
SGLANG_FACING = ("fastverify/sim/server.py",)


def _paths_written(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every string constant that is a `/v1/` path, a query after it or
    not (an f-string's start too); prose that names one (a docstring) is not a path."""
    for node in ast.walk(ast.parse(source)):
        text = node.value if isinstance(node, ast.Constant) else None
        route = text.partition("?")[0] if isinstance(text, str) else ""
        if route.startswith("/v1/") and not any(c.isspace() for c in route):
            yield node.lineno, text


def test_no_module_but_the_declaration_and_the_daemon_writes_a_control_api_path() -> None:
    sample = 'c.get(f"/v1/server/argv?{q}")\n"""/v1/status, as a docstring names it."""'
    assert [t for _, t in _paths_written(sample)] == ["/v1/server/argv?"]
    root = Path(fastverify.__file__).parent
    found = []
    for py in sorted(root.rglob("*.py")):
        rel = py.relative_to(root.parent).as_posix()
        if rel.startswith(PATHS_DECLARED):
            continue
        for line, text in _paths_written(py.read_text(encoding="utf-8")):
            if rel in SGLANG_FACING and text.partition("?")[0] not in m.ROUTES:
                continue
            found.append(f"{rel}:{line}: {text!r}")
    assert not found, (
        "a control-API path written out: call the typed methods of fastverify.client (or "
        "call/follow with the fastverify.api_models endpoint) instead:\n" + "\n".join(found)
    )
