"""How a configuration key is declared: `Key`, the metadata a `Config` dataclass field
carries in its `Annotated` type (its TOML table, validator, help, example, fastverifyd flag)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastverify.config.validators import Validator


@dataclass(frozen=True)
class Key:
    """One configuration key, declared on the dataclass field it fills.

    `table`/`name`: where it lives in the TOML file (default: the dataclass's own table and
    the field's name). A key declared in another table than its dataclass's, or under another
    name, still reads its old spelling, `<dataclass table>.<field name>`, as an alias.
    `flag`: the fastverifyd option that overrides it (True: `--<field-name>`).
    `example`: a value worth showing where the default is empty."""

    validator: Validator
    help: str
    table: str | None = None
    name: str | None = None
    flag: str | bool = False
    example: Any = None
