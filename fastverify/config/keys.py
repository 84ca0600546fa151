"""The configuration keys, derived from the dataclass declaration (`fields`): one `KeyInfo`
per key with its TOML table and name, its attribute path in `Config`, its old name (the
alias a file may still use), type, default and validator; the lookups the loader uses."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from fastverify.config import fields
from fastverify.config.spec import Key
from fastverify.config.validators import Validator


@dataclass(frozen=True)
class KeyInfo:
    key: str  # "restart.backoff_s": table.name in the TOML file
    table: str  # "restart"
    name: str  # "backoff_s"
    attr: str  # "daemon.restart_backoff_s": where Config holds it (and its old name)
    type: Any  # the field's type (tuple[float, float])
    default: Any
    validator: Validator
    help: str
    flag: str | None  # "--engine": the fastverifyd option that overrides it
    example: Any

    @property
    def alias(self) -> str | None:
        """The key's old name, which a file may still use (None when it did not move)."""
        return self.attr if self.attr != self.key else None


def _declared() -> tuple[list[KeyInfo], set[str]]:
    keys: list[KeyInfo] = []
    per_operation: set[str] = set()
    for section, cls in fields.SECTIONS.items():
        hints = typing.get_type_hints(cls, include_extras=True)
        defaults = cls()
        for f in dataclasses.fields(cls):
            attr = f"{section}.{f.name}"
            hint = hints[f.name]
            meta = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Key)]
            if not meta:
                if attr not in fields.SECTIONS:
                    per_operation.add(attr)  # set by an operation, never by a file
                continue
            (k,) = meta
            table, name = k.table or section, k.name or f.name
            flag = ("--" + f.name.replace("_", "-")) if k.flag is True else (k.flag or None)
            keys.append(
                KeyInfo(f"{table}.{name}", table, name, attr, typing.get_args(hint)[0],
                        getattr(defaults, f.name), k.validator, k.help, flag, k.example)
            )  # fmt: skip
    order = list(fields.TABLES)
    keys.sort(key=lambda k: order.index(k.table))  # stable: declaration order in a table
    return keys, per_operation


_KEYS, _PER_OPERATION = _declared()
KEYS: tuple[KeyInfo, ...] = tuple(_KEYS)
# dataclass fields an operation sets through the API, never a file: a file that names one
# is refused as an unknown key
PER_OPERATION = frozenset(_PER_OPERATION)
TABLES = tuple(fields.TABLES)
# every name a key answers to (its key and its alias) -> the key
BY_NAME: dict[str, KeyInfo] = {
    **{k.alias: k for k in KEYS if k.alias},
    **{k.key: k for k in KEYS},
}
BY_ATTR: dict[str, KeyInfo] = {k.attr: k for k in KEYS}
# key -> validator: the one validation the loader and the daemon API share
FIELDS: dict[str, Validator] = {k.key: k.validator for k in KEYS}
# tables that hold free-form names (server.env): one value, not keys
FREE_TABLES = frozenset(k.key for k in KEYS if k.type is dict or typing.get_origin(k.type) is dict)
# attribute path -> the fastverifyd flag that sets it
FLAGS: dict[str, str] = {k.attr: k.flag for k in KEYS if k.flag}


def attr_space(values: typing.Mapping[str, Any]) -> dict[str, Any]:
    """{key or alias: value} -> {attribute path: value} (unknown names kept as they are)."""
    return {(BY_NAME[n].attr if n in BY_NAME else n): v for n, v in values.items()}


def key_of(name: str) -> str:
    """The key a name (key, alias or attribute path) stands for: "restart.backoff_s"."""
    return BY_NAME[name].key if name in BY_NAME else name


def nest(flat: typing.Mapping[str, Any]) -> dict[str, Any]:
    """{"a.b.c": 1} -> {"a": {"b": {"c": 1}}}."""
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        *tables, name = dotted.split(".")
        table = out
        for part in tables:
            table = table.setdefault(part, {})
        table[name] = value
    return out
