"""Reading the configuration: a TOML file (new keys or their old names) plus command-line
overrides -> one frozen `Config`, every problem at once with file, line, key, what is wrong
and what would be right; a bad file yields a `ConfigError` and no `Config`."""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fastverify import paths
from fastverify.config import fields
from fastverify.config.cross import cross_problems
from fastverify.config.keys import (
    BY_KEY,
    BY_NAME,
    FREE_TABLES,
    KEYS,
    TABLES,
    by_key,
    nest,
)
from fastverify.config.validators import show

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_T = TypeVar("_T", bound="DataclassInstance")


class ConfigError(ValueError):
    """Configuration problems, one per line: `file:line: key: what is wrong (expected ...)`."""


@dataclass(frozen=True)
class FieldProblem:
    """One bad configuration value: `str()` is `path:line: key: what is wrong (expected ...)`
    (`path: key: ...` when the line is unknown, e.g. a command-line flag or an API field)."""

    path: str
    line: int
    key: str
    message: str  # "key: what is wrong (expected ...)"

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}" if where else self.message


def _names_in(table: str) -> tuple[list[str], list[str]]:
    """(keys of `table`, old names that lived there), bare."""
    keys = [k.name for k in KEYS if k.table == table]
    old = [k.alias.rpartition(".")[2] for k in KEYS if k.alias and k.alias.startswith(f"{table}.")]
    return keys, old


def _unknown(key: str, value: Any) -> str:
    if key in TABLES:
        return f"{key}: {show(value)} (expected a table [{key}])"
    table, _, name = key.rpartition(".")
    if table not in TABLES:
        tops = sorted({t.partition(".")[0] for t in TABLES})
        hint = "known tables: " + ", ".join(f"[{t}]" for t in TABLES)
        return f"{key}: unknown key {name!r} ({_close(key, tops)}{hint})"
    known, old = _names_in(table)
    meant = _close(name, known + old)
    if not meant:  # the right name in another table?
        elsewhere = [k.key for k in KEYS if k.name == name]
        meant = f"did you mean {' or '.join(elsewhere)}? " if elsewhere else ""
    return f"{key}: unknown key {name!r} ({meant}known: {', '.join(sorted(known))})"


def _close(name: str, known: list[str]) -> str:
    """`did you mean watch_interval_s? ` for a misspelt key, else ''."""
    close = difflib.get_close_matches(name, known, n=2, cutoff=0.75)
    return f"did you mean {' or '.join(close)}? " if close else ""


def validate_fields(
    values: Mapping[str, Any],
    *,
    section: str | None = None,
    path: str = "",
    lines: Mapping[str, int] | None = None,
) -> list[FieldProblem]:
    """Check raw values (TOML or JSON types) of configuration keys; every problem, in order.

    Keys are dotted (`"restart.readiness_timeout_s"`, or its old name
    `"daemon.readiness_timeout_s"`), or bare with `section="restart"`. Unknown keys are
    problems; each message starts with the key as given. `path`/`lines` (key -> line) only
    say where each came from. The daemon API uses it for request fields that mirror a key,
    e.g. `validate_fields({"daemon.readiness_timeout_s": body["timeout_s"]})`, and reports
    `problem.message`.
    """
    out: list[FieldProblem] = []
    for raw_key, value in values.items():
        key = f"{section}.{raw_key}" if section else raw_key
        line = (lines or {}).get(key, 0)
        info = BY_NAME.get(key)
        why = _unknown(key, value) if info is None else None
        if info is not None and (problem := info.validator(value)):
            why = f"{key}: {problem}"
        if why:
            out.append(FieldProblem(path, line, key, why))
    return out


def _key_lines(text: str) -> dict[str, int]:
    """`{"daemon.log_level": 12, "daemon": 9, ...}`: where each key of a plain TOML file is.
    (Dotted keys and inline tables are not tracked; their problems carry no line.)"""
    out: dict[str, int] = {}
    table = ""
    for number, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if m := re.fullmatch(r"\[\s*([A-Za-z0-9_.\-]+)\s*\](\s*#.*)?", s):
            table = m.group(1)
            out.setdefault(table, number)
        elif m := re.match(r"([A-Za-z0-9_\-]+)\s*=", s):
            out.setdefault(f"{table}.{m.group(1)}" if table else m.group(1), number)
    return out


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"server": {"eagle3": {...}, "env": {...}}} -> {"server.eagle3.num_steps": ..., ...}
    (`server.env` stays one value: its keys are the operator's variable names)."""
    flat: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if key in TABLES and key not in FREE_TABLES and isinstance(value, dict):
            flat.update(flatten(value, f"{key}."))
        else:
            flat[key] = value
    return flat


def _read(path: Path | None) -> tuple[str, str, dict[str, Any]]:
    """(source, text, data) of the file; a missing default file is ("", "", {})."""
    explicit = path is not None
    path = path or paths.config_file()
    if not path.exists():
        if explicit:
            raise ConfigError(f"{path}: no such config file")
        return "", "", {}
    try:
        text = _read_regular(path).decode("utf-8")
        return str(path), text, tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except RecursionError:
        raise ConfigError(
            f"{path}: nested too deeply (the configuration is tables of plain values)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None


MAX_CONFIG_BYTES = 1 << 20  # a configuration is a few kilobytes


def _read_regular(path: Path) -> bytes:
    """The bytes of the regular file `path`: a FIFO, device or directory is refused without
    blocking on it (opened non-blocking, checked before any read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path}: not a regular file (give the path of a TOML file)")
        chunks, left = [], MAX_CONFIG_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(left, 65536))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes (not a configuration)")
    return data


def _twice(flat: Mapping[str, Any], source: str, lines: Mapping[str, int]) -> list[FieldProblem]:
    """A key given both by its name and by its old name."""
    return [
        FieldProblem(
            source,
            lines.get(k.alias, 0),
            k.alias,
            f"{k.alias}: set twice, here by its old name and as {k.key} (line "
            f"{lines.get(k.key, '?')}) (expected one: [{k.table}] {k.name})",
        )
        for k in KEYS
        if k.alias and k.alias in flat and k.key in flat
    ]


def _build(cls: type[_T], data: Mapping[str, Any]) -> _T:
    """Instantiate a table's dataclass from validated values, nested by table."""
    kwargs: dict[str, Any] = {}
    defaults = cls()
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        default = getattr(defaults, f.name)
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            kwargs[f.name] = _build(type(default), value)
        elif isinstance(default, tuple):
            kwargs[f.name] = tuple(value)
        elif isinstance(default, float) or default is None:
            kwargs[f.name] = float(value)
        elif isinstance(default, dict):
            kwargs[f.name] = dict(value)
        else:
            kwargs[f.name] = value
    return cls(**kwargs)


def load(
    path: Path | None,
    overrides: dict[str, dict[str, Any]] | None = None,
    flags: Mapping[str, str] | None = None,
) -> fields.Config:
    """Load `path` (missing default file = defaults), apply `{"restart": {"burst": 2}, ...}`
    overrides (command-line flags, by table, or by old name: `{"daemon": {"restart_burst":
    2}}`; None values ignored), validate every key
    (all problems at once, each with file:line and key), and return a Config; ConfigError
    otherwise. `flags` (key -> `--flag`): a problem with a value the command line
    gave is blamed on its flag (`fastverifyd --nnodes: ...`), never on a config file that may
    not exist. A key given by its old name loads as the key, with a note in `Config.notes`.
    `flags` and `Config.given` are keyed by key ("exporter.metrics_listen")."""
    source, text, data = _read(path)
    lines = _key_lines(text)
    flat = flatten(data)
    problems = validate_fields(flat, path=source, lines=lines) + _twice(flat, source, lines)
    given = by_key(
        {
            f"{section}.{k}": v
            for section, values in (overrides or {}).items()
            for k, v in values.items()
            if v is not None
        }
    )

    def flag_of(key: str) -> str:
        flag = (flags or {}).get(key)
        return f"fastverifyd {flag}" if flag else "command line"

    for key, value in given.items():
        problems += [
            FieldProblem(
                flag_of(key), 0, key, f"{p.message.removeprefix(f'{key}: ')} (it sets {key})"
            )
            for p in validate_fields({key: value})
        ]
    written = {BY_NAME[n].key: n for n in flat if n in BY_NAME}  # key -> its name in the file
    merged = {**{key: flat[n] for key, n in written.items()}, **given}

    def where(key: str) -> tuple[str, int]:
        """Who gave `key` its value: a flag, the file's line, or the defaults."""
        if key in given:
            return flag_of(key), 0
        if key in written:
            return source, lines.get(written[key], 0)
        return source or "the built-in defaults", 0

    problems += [FieldProblem(*where(k), k, why) for k, why in cross_problems(merged)]
    if problems:
        raise ConfigError("\n".join(str(p) for p in problems))
    notes = tuple(
        f"{source}:{lines.get(name, 0)}: {name} is now [{BY_KEY[key].table}] "
        f"{BY_KEY[key].name} (the old name still works)"
        for key, name in written.items()
        if name == BY_KEY[key].alias
    )
    cfg = _build(fields.Config, nest(merged))
    return dataclasses.replace(cfg, source=source, given=frozenset(merged), notes=notes)


def operator_profile_dirs() -> list[str]:
    """This host's operator profile directories, as `fastverifyctl profile list` reads them:
    $FASTVERIFY_PROFILE_DIRS, else the daemon config's (FASTVERIFY_CONFIG, else the default
    file) profile_dirs, else the default directories."""
    import os

    from fastverify import paths

    if os.environ.get("FASTVERIFY_PROFILE_DIRS") or not os.path.exists(paths.config_file_str()):
        return paths.user_profile_dirs_str()
    try:
        return [paths.normalize(str(d)) for d in load(None).profile_dirs]
    except Exception:  # a broken config must not break an offline command
        return paths.user_profile_dirs_str()
