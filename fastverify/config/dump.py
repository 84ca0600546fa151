"""Writing configuration as TOML in the file's layout: one value (`toml_value`), or a whole
`Config` (`dumps`, every key in its table; what the Kubernetes renderer ships to pods)."""

from __future__ import annotations

import json
from typing import Any

from fastverify.config.keys import FREE_TABLES, KEYS, TABLES, KeyInfo, key_of, nest
from fastverify.config.load import flatten


def toml_value(value: Any) -> str:
    """`value` spelled as TOML: true, 30, 0.5, "text", [1, 60], { A = "1" }."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string (same escapes)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML spelling for {value!r}")


def keys_of(table: str) -> list[KeyInfo]:
    """The keys written inside `[table]` (a free table such as server.env has none)."""
    return [k for k in KEYS if k.table == table and k.key not in FREE_TABLES]


def value_of(cfg: Any, info: KeyInfo) -> Any:
    """The key's value in `cfg` (`cfg.restart.backoff_s` for "restart.backoff_s")."""
    value = cfg
    for part in info.key.split("."):
        value = getattr(value, part)
    return value


def dumps(cfg: Any, header: list[str] | None = None) -> str:
    """`cfg` as a configuration file: `header` comment lines, then every table with every
    key's value (a None value, meaning "the engine's default", left out)."""
    lines = [f"# {line}".rstrip() for line in header or []]
    for table in TABLES:
        lines += ["", f"[{table}]"] if lines else [f"[{table}]"]
        if table in FREE_TABLES:
            free = value_of(cfg, next(k for k in KEYS if k.key == table))
            lines += [f"{k} = {toml_value(v)}" for k, v in sorted(free.items())]
            continue
        for info in keys_of(table):
            value = value_of(cfg, info)
            if value is not None:
                lines.append(f"{info.name} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def relayout(data: dict[str, Any]) -> dict[str, Any]:
    """A nested configuration dict with every key under its table and name (old names
    moved: `{"daemon": {"restart_burst": 5}}` -> `{"restart": {"burst": 5}}`); unknown keys
    stay where they are, for the loader to refuse."""
    return nest({key_of(name): value for name, value in flatten(data).items()})
