"""Options declared once: a dataclass field that is also a command-line option.

`option(default, help, **flag)` makes the field, with how the command line spells it (`Flag`)
in its metadata; the CLI builds a command's click options from the fields
(`fastverify.cli.options.flag_options`) and `from_flags` turns what the command line gave back
into the dataclass. A field made without `option` is no option. Used by the deployment
renderers' options (`render systemd`, `render compose`, `render kubernetes`).

A leaf (standard library only): the CLI reads it while it builds a command.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Flag:
    """How one option is spelled on the command line. `name`: the flag when it is not
    --FIELD-NAME; `choices`, `low`/`high` (an int range) and `file` (a file path) say what a
    value may be; `multiple`: repeatable (a tuple; given none, the field's default);
    `switch`: a boolean flag that turns the field to the opposite of its default."""

    help: str = ""
    name: str | None = None
    choices: tuple[str, ...] | None = None
    low: int | None = None
    high: int | None = None
    file: bool = False
    multiple: bool = False
    switch: bool = False
    show_default: bool = False


def option(
    default: Any, help: str = "", *, factory: Callable[[], Any] | None = None, **flag: Any
) -> Any:
    """A field that is an option: its default (or, with `factory`, the default made per
    instance; the command line then gives None for it) and how the command line spells it."""
    metadata = {"flag": Flag(help=help, **flag)}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def flag_of(f: dataclasses.Field[Any]) -> Flag:
    return f.metadata["flag"]


def flag_name(f: dataclasses.Field[Any]) -> str:
    return flag_of(f).name or "--" + f.name.replace("_", "-")


def flag_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of `cls` that are options, in their order."""
    return [f for f in dataclasses.fields(cls) if "flag" in f.metadata]


def from_flags(cls: type[T], **given: Any) -> T:
    """`cls` from what the command line gave: a repeatable option given no value, and an
    option of a made-per-instance default given none, keep the field's default; every other
    value is taken as it is."""
    out = {}
    for f in flag_fields(cls):
        if f.name not in given:
            continue
        value = given[f.name]
        if flag_of(f).multiple:
            value = tuple(value) or f.default
        elif value is None and f.default is dataclasses.MISSING:
            continue
        out[f.name] = value
    return cls(**out)
