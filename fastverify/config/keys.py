"""The configuration keys, derived from the dataclass declaration (`fields`): the tables (a
dataclass each, or a free table such as server.env), one `KeyInfo` per key with its table and
name (which is also where `Config` holds it: `cfg.restart.backoff_s`), its old name (the alias
a file may still use), type, default and validator; the lookups the loader uses."""

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
    key: str  # "restart.backoff_s": table.name in the TOML file, and in `Config`
    table: str  # "restart"
    name: str  # "backoff_s"
    type: Any  # the field's type (tuple[float, float])
    default: Any
    validator: Validator
    help: str
    flag: str | None  # "--engine": the fastverifyd option that overrides it
    example: Any
    alias: str | None  # "daemon.restart_backoff_s": its old name, which a file may still use


def _is_table(hint: Any) -> typing.TypeGuard[type]:
    """A field holding a table's dataclass (`Config.server`, `ServerConfig.eagle3`)."""
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _is_free(type_: Any) -> bool:
    """A free table: one value whose keys are the operator's names (server.env)."""
    return type_ is dict or typing.get_origin(type_) is dict


class _Declared:
    """One walk over `Config`: its tables (with their help), keys and per-operation fields."""

    def __init__(self) -> None:
        self.tables: dict[str, str] = {}
        self.keys: list[KeyInfo] = []
        self.per_operation: set[str] = set()
        hints = typing.get_type_hints(fields.Config)
        for f in dataclasses.fields(fields.Config):
            if _is_table(hints[f.name]):
                self._table(hints[f.name], f.name)
        order = list(self.tables)
        self.keys.sort(key=lambda k: order.index(k.table))  # stable: declaration order

    def _table(self, cls: type, table: str) -> None:
        self.tables[table] = " ".join((cls.__doc__ or "").split())
        hints = typing.get_type_hints(cls, include_extras=True)
        defaults = cls()
        for f in dataclasses.fields(cls):
            key, hint = f"{table}.{f.name}", hints[f.name]
            if _is_table(hint):  # a table inside the table: [server.eagle3]
                self._table(hint, key)
                continue
            meta = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Key)]
            if not meta:
                self.per_operation.add(key)  # set by an operation, never by a file
                continue
            (k,) = meta
            type_ = typing.get_args(hint)[0]
            if _is_free(type_):
                self.tables[key] = k.help
            flag = ("--" + f.name.replace("_", "-")) if k.flag is True else (k.flag or None)
            self.keys.append(
                KeyInfo(key, table, f.name, type_, getattr(defaults, f.name), k.validator,
                        k.help, flag, k.example, k.alias)
            )  # fmt: skip


_DECLARED = _Declared()
KEYS: tuple[KeyInfo, ...] = tuple(_DECLARED.keys)
# dataclass fields an operation sets through the API, never a file: a file that names one
# is refused as an unknown key
PER_OPERATION = frozenset(_DECLARED.per_operation)
# the file's tables, in the order the example and the reference show them -> what each is for
TABLE_HELP: dict[str, str] = _DECLARED.tables
TABLES = tuple(TABLE_HELP)
# every name a key answers to (its key and its alias) -> the key
BY_NAME: dict[str, KeyInfo] = {
    **{k.alias: k for k in KEYS if k.alias},
    **{k.key: k for k in KEYS},
}
BY_KEY: dict[str, KeyInfo] = {k.key: k for k in KEYS}
# key -> validator: the one validation the loader and the daemon API share
FIELDS: dict[str, Validator] = {k.key: k.validator for k in KEYS}
# tables that hold free-form names (server.env): one value, not keys
FREE_TABLES = frozenset(k.key for k in KEYS if _is_free(k.type))
# key -> the fastverifyd flag that sets it
FLAGS: dict[str, str] = {k.key: k.flag for k in KEYS if k.flag}


def by_key(values: typing.Mapping[str, Any]) -> dict[str, Any]:
    """{key or old name: value} -> {key: value} (unknown names kept as they are)."""
    return {key_of(n): v for n, v in values.items()}


def key_of(name: str) -> str:
    """The key a name (key or old name) stands for: "restart.backoff_s"."""
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
