"""fastverifyd's options that override configuration keys, derived from the keys that
declare a flag: the argparse arguments (type, choices, help) and the overrides they give."""

from __future__ import annotations

import argparse
from typing import Any

from fastverify.config.keys import KEYS, KeyInfo


def _default(info: KeyInfo) -> str:
    if info.default in ("", None) or isinstance(info.default, bool):
        return ""
    value = f"{info.default:g}" if isinstance(info.default, float) else info.default
    return f"; default {value}"


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One option per key with a flag; its help is the key's, naming the key it sets."""
    for info in KEYS:
        if not info.flag:
            continue
        help_ = f"{info.help} ([{info.table}] {info.name}{_default(info)})"
        kwargs: dict[str, Any] = {"default": None, "help": help_.replace("%", "%%")}
        if info.type is bool:
            kwargs.update(action="store_const", const=True)
        else:
            kwargs["type"] = info.type if info.type in (int, float) else str
            if info.validator.choices:
                kwargs["choices"] = info.validator.choices
        parser.add_argument(info.flag, **kwargs)


def overrides(ns: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """`{"server": {"port": ...}, "api": {...}, ...}` by table: what the options set (None =
    not given), for `config.load`."""
    out: dict[str, dict[str, Any]] = {}
    for info in KEYS:
        if info.flag:
            out.setdefault(info.table, {})[info.name] = getattr(ns, info.flag[2:].replace("-", "_"))
    return out
