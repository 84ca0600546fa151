"""The control API's requests, read and validated as fastverify.api_models declares them: a
JSON body against its endpoint's model (`validate_body`: 400/422 saying what is wrong and
what to send instead; what passes is that model), a query string against its parameters
(`parse_query`), and the options of an operation with the defaults the models declare
(`options`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

from fastverify import api_models as m
from fastverify import config as configmod
from fastverify.api_schema import KINDS, Field
from fastverify.daemon.resolve import RequestError

# Request fields that are per-request values of a configuration key: checked by the same
# function as the configuration file (fastverify.config.validate_fields).
MIRRORS: dict[str, str] = {
    f.name: f.mirrors for e in m.ENDPOINTS for f in e.fields if f.mirrors is not None
}

_WANT = {"number": "a number"}  # (int, float) is one word: "a number", not "int or float"

B = TypeVar("B")  # the endpoint's request model


def validate_body(ep: m.Endpoint[B, Any], body: Any) -> B:
    """Check a POST body against its endpoint's model; RequestError(400/422) says what is
    wrong. The body comes back as sent (no defaults filled in)."""
    fields = ep.fields
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise RequestError(400, f"request body must be a JSON object, got {type(body).__name__}")
    names = [f.name for f in fields]
    unknown = sorted(set(body) - set(names))
    if unknown:
        raise RequestError(
            422, f"unknown field(s) {', '.join(unknown)} (accepted: {', '.join(names) or 'none'})"
        )
    for f in fields:
        if f.name not in body or body[f.name] is None:
            if f.required:
                raise RequestError(422, f"missing field {f.name!r}")
            continue
        _check_value(f, body[f.name])
    for f in fields:
        value = body.get(f.name)
        if f.mirrors is None or value is None:
            continue
        if f.name == "eagle3_steps" and value == 0 and body.get("mode") == "adaptive":
            continue  # SGLang's steps-0 pass, spec costs' trial (resolve.check_trial_steps)
        problems = configmod.validate_fields({f.mirrors: value})
        if problems:  # "daemon.readiness_timeout_s: -1 is out of range (expected ...)"
            why = problems[0].message.partition(": ")[2]
            raise RequestError(422, f"field {f.name!r} (like {f.mirrors} in the config): {why}")
    if body.get("load_format") is not None and configmod.load_format_problem(body["load_format"]):
        raise RequestError(422, f"field {configmod.load_format_problem(body['load_format'])}")
    return cast(B, body)


def _check_value(f: Field, value: Any) -> None:
    types = KINDS[f.kind]
    if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
        want = _WANT.get(f.kind, f.kind)
        raise RequestError(422, f"field {f.name!r} must be {want}, got {json.dumps(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise RequestError(422, f"field {f.name!r} must be a finite number, got {value}")
    if f.required and isinstance(value, str) and not value.strip():
        raise RequestError(422, f"field {f.name!r} is empty")
    if f.minimum is not None and isinstance(value, int | float) and value < f.minimum:
        why = f" ({f.why})" if f.why else ""
        raise RequestError(422, f"field {f.name!r} must be >= {f.minimum:g}{why}")


# a query parameter's kind: its conversion and what it must be
_QUERY_NUMBERS: dict[str, tuple[Callable[[str], float], str]] = {
    "int": (int, "an integer"),
    "number": (float, "a number"),
}


def parse_query(ep: m.Endpoint[B, Any], query: dict[str, str]) -> B:
    """A GET's query parameters as its endpoint declares them, defaults filled in (others are
    ignored); RequestError(400) for a number that is not one."""
    out = ep.defaults()
    for f in ep.query:
        raw = query.get(f.name)
        if raw is None:
            continue
        if f.kind == "bool":
            out[f.name] = raw in ("1", "true", "yes")
        elif f.kind in _QUERY_NUMBERS:
            convert, want = _QUERY_NUMBERS[f.kind]
            try:
                out[f.name] = convert(raw)
            except ValueError:
                raise RequestError(
                    400, f"query parameter {f.name}={raw!r} must be {want}"
                ) from None
            if not math.isfinite(out[f.name]):
                raise RequestError(400, f"query parameter {f.name}={raw!r} must be finite")
        else:
            out[f.name] = raw
    return cast(B, out)


def options(ep: m.Endpoint[B, Any], body: B) -> B:
    """A checked body with the declared defaults for what it leaves out."""
    given = cast(dict[str, Any], body).items()
    return cast(B, {**ep.defaults(), **{k: v for k, v in given if v is not None}})
