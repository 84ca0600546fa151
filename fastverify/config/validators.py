"""The validators of configuration keys' values: each says what is wrong with a raw TOML/JSON
value and what would be right (`... (expected ...)`), and what it accepts, for the reference."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastverify.profiles import env_policy


def show(value: Any) -> str:
    """A value as the operator wrote it (TOML/JSON-ish), kept short."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = '"' + value + '"'
    elif isinstance(value, list | tuple):
        text = "[" + ", ".join(show(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "a table"
    else:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Validator:
    """`validator(value)`: what is wrong (with `expected ...`), or None. `accepts` is what the
    reference prints; `choices` the closed set of values, where there is one."""

    accepts: str
    problem: Callable[[Any], str | None]
    choices: tuple[str, ...] | None = None

    def __call__(self, value: Any) -> str | None:
        return self.problem(value)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def number(lo: float, *, lo_open: bool = False, what: str = "seconds") -> Validator:
    bound = f"> {lo:g}" if lo_open else f">= {lo:g}"
    expected = f"a number of {what} {bound}"

    def problem(value: Any) -> str | None:
        if not is_number(value) or not math.isfinite(value):
            return f"{show(value)} is not a finite number (expected {expected})"
        if value < lo or (lo_open and value == lo):
            return f"{show(value)} is out of range (expected {expected})"
        return None

    return Validator(f"number {bound}", problem)


def fraction() -> Validator:
    """A share: a number in (0, 1]."""
    expected = "a number in (0, 1]"

    def problem(value: Any) -> str | None:
        if not is_number(value) or not math.isfinite(value):
            return f"{show(value)} is not a finite number (expected {expected})"
        if not 0 < value <= 1:
            return f"{show(value)} is out of range (expected {expected})"
        return None

    return Validator("number in (0, 1]", problem)


def integer(lo: int, hi: int | None = None) -> Validator:
    expected = f"an integer in {lo}..{hi}" if hi is not None else f"an integer >= {lo}"

    def problem(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{show(value)} is not an integer (expected {expected})"
        if value < lo or (hi is not None and value > hi):
            return f"{value} is out of range (expected {expected})"
        return None

    return Validator(expected.removeprefix("an "), problem)


def choice(choices: tuple[str, ...]) -> Validator:
    def problem(value: Any) -> str | None:
        if not isinstance(value, str) or value not in choices:
            return f"{show(value)} is not allowed (expected one of {', '.join(choices)})"
        return None

    return Validator("one of " + ", ".join(f'"{c}"' for c in choices), problem, choices)


def string(*, nonempty: bool = False, what: str = "a string") -> Validator:
    def problem(value: Any) -> str | None:
        if not isinstance(value, str):
            return f"{show(value)} is not a string (expected {what})"
        if nonempty and not value.strip():
            return f"empty (expected {what})"
        return None

    return Validator(what.removeprefix("a ").removeprefix("an "), problem)


def argv_string(*, what: str = "a string") -> Validator:
    """A value that goes into SGLang's argv: no credentials inside a URL
    (`https://user:password@host/...`), since every user reads a process's argv in /proc and
    SGLang logs its arguments at start: credentials go through the environment instead."""
    base = string(what=what)

    def problem(value: Any) -> str | None:
        from fastverify.redact import mask_urls, url_credentials

        if (bad := base.problem(value)) is not None:
            return bad
        if url_credentials(value):
            return (
                f"{mask_urls(value)!r} carries credentials in its URL, which would reach the "
                "engine's argv (readable by every user in /proc) and its log: pass them "
                'through the environment instead (env_passthrough = ["HF_TOKEN"])'
            )
        return None

    return Validator(base.accepts, problem)


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"{show(value)} (expected true or false)"


boolean = Validator("true or false", _boolean)


def listen(*, lowest_port: int) -> Validator:
    expected = f'"HOST:PORT" with PORT in {lowest_port}..65535, or "" for off'

    def problem(value: Any) -> str | None:
        if not isinstance(value, str):
            return f"{show(value)} is not a string (expected {expected})"
        if value == "":
            return None
        _, sep, port = value.strip().rpartition(":")
        port = port if sep else value.strip()
        if not port.isdigit() or not lowest_port <= int(port) <= 65535:
            return f"{show(value)} is not a listen address (expected {expected})"
        return None

    return Validator(expected, problem)


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def str_list(item: Validator | None = None, what: str = "a list of strings") -> Validator:
    def problem(value: Any) -> str | None:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            return f"{show(value)} (expected {what})"
        for v in value:
            if item is not None and (why := item(v)):
                return why
        return None

    return Validator(what.removeprefix("a "), problem)


def _passthrough_name(name: str) -> str | None:
    if not ENV_NAME.fullmatch(name):
        return f"{show(name)} is not a variable name (expected names like HF_TOKEN)"
    if name.startswith("NCCL_"):
        return (
            f"{name}: NCCL settings are not passed through (expected non-NCCL names; "
            "NCCL settings belong in profiles)"
        )
    return env_policy.loader_problem(name, "env_passthrough")


passthrough_names = str_list(
    Validator("a variable name, not NCCL_* or a loader/interpreter name", _passthrough_name),
    "a list of variable names",
)


def _env_table(value: Any) -> str | None:
    expected = 'a table of string values, e.g. SGLANG_X = "1"'
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return f"{show(value)} (expected {expected})"
    for k in value:
        if not ENV_NAME.fullmatch(k):
            return f"{show(k)} is not a variable name (expected {expected})"
    nccl = sorted(k for k in value if k.startswith("NCCL_"))
    if nccl:
        return (
            f"sets {', '.join(nccl)}: NCCL settings belong in profiles "
            "(the profile is the whole truth about NCCL; expected non-NCCL names)"
        )
    for k, v in value.items():
        if why := env_policy.loader_problem(k, "[server] env"):
            return why
        if why := env_policy.value_problem(v):
            return f"{k}: {why}"
    return None


env_table = Validator(
    "NAME = string, no NCCL_* or loader/interpreter names (LD_*, PATH, PYTHONPATH, ...)", _env_table
)


def _backoff(value: Any) -> str | None:
    expected = "[initial, max] seconds with 0 < initial <= max, e.g. [1, 60]"
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(is_number(v) and math.isfinite(v) for v in value)
    ):
        return f"{show(value)} (expected {expected})"
    if not 0 < value[0] <= value[1]:
        return f"{show(value)} is out of order or not positive (expected {expected})"
    return None


backoff = Validator("[initial, max] seconds, 0 < initial <= max", _backoff)


def _profile_name(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"{show(value)} is not a string (expected a profile name such as nccl-default)"
    from fastverify.profiles.store import name_problem  # only when the key is set

    why = name_problem(value)
    return f"{why} (expected a profile name such as nccl-default)" if why else None


profile_name = Validator("profile name", _profile_name)
