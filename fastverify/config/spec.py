"""How a configuration key is declared: `Key`, the metadata a field of a table's dataclass
carries in its `Annotated` type (its validator, help, example, fastverifyd flag, old name)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastverify.config.validators import Validator


@dataclass(frozen=True)
class Key:
    """One configuration key, declared on the dataclass field it fills: the key is
    `<the dataclass's table>.<the field's name>`.

    `flag`: the fastverifyd option that overrides it (True: `--<field-name>`).
    `example`: a value worth showing where the default is empty.
    `alias`: the key's old name (`"daemon.restart_backoff_s"`), which a file may still use."""

    validator: Validator
    help: str
    flag: str | bool = False
    example: Any = None
    alias: str | None = None
