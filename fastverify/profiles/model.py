"""Data types shared by the profile library: `Problem`, `ProfileError`, `Profile`.

A `Problem` is one finding about one line of one file, printed as
`path:line: message`; line 0 means "the file as a whole". A `ProfileError`
carries every problem found, so callers can show them all at once.

The value types here and in envfile/validate/store/nccl_vars are plain classes on `Record`
(equality, hash, repr by field, immutable) rather than dataclasses: creating a dataclass
costs about a millisecond at import, and `fastverifyctl profile list` imports all of them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from fastverify.paths import normalize

if TYPE_CHECKING:
    from pathlib import Path

Severity = Literal["error", "warning"]


class Record:
    """An immutable value: `_fields` names its attributes, set once by `__init__` through
    `_set`; equality, hash and repr go by those fields (as a frozen dataclass's do)."""

    _fields: ClassVar[tuple[str, ...]] = ()

    def _set(self, **values: Any) -> None:
        self.__dict__.update(values)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__qualname__}({inner})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} ({type(self).__name__} is frozen)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} ({type(self).__name__} is frozen)")


class Problem(Record):
    """One finding: `str(p)` is `"path:line: message"` (warnings say so in the message)."""

    _fields = ("path", "line", "message", "severity")
    path: str
    line: int
    message: str
    severity: Severity

    def __init__(self, path: str, line: int, message: str, severity: Severity = "error"):
        self._set(path=path, line=line, message=message, severity=severity)

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.path}:{self.line}: {prefix}{self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "message": self.message,
            "severity": self.severity,
        }


class ProfileError(ValueError):
    """A profile could not be loaded; `.problems` lists every error (and warning) found."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        errors = [p for p in self.problems if p.severity == "error"] or self.problems
        super().__init__("\n".join(str(p) for p in errors))

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


class Profile(Record):
    """A loaded, validated profile.

    `env` is the resolved environment after `# extends:` (base first, this file's
    assignments override, in file order); `own_env` is what this file itself sets;
    `env_sources` names, for each key of `env`, the profile whose file set it;
    `lines` maps each key to its line in this file. `path` and `shadows` are Paths built on
    access from the strings `file` and `shadows_file` (listing never needs pathlib).
    """

    _fields = (
        "name",
        "path",
        "source",
        "description",
        "requires",
        "extends",
        "tags",
        "env",
        "own_env",
        "shadows",
        "warnings",
        "env_sources",
        "lines",
    )
    name: str
    file: str
    source: Literal["shipped", "user", "file"]
    description: str
    requires: dict[str, str]
    extends: str | None
    tags: tuple[str, ...]
    env: dict[str, str]
    own_env: dict[str, str]
    shadows_file: str | None
    warnings: tuple[Problem, ...]
    env_sources: dict[str, str]
    lines: dict[str, int]

    def __init__(
        self,
        name: str,
        path: str | os.PathLike[str],
        source: Literal["shipped", "user", "file"],
        description: str = "",
        requires: dict[str, str] | None = None,
        extends: str | None = None,
        tags: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        own_env: dict[str, str] | None = None,
        shadows: str | os.PathLike[str] | None = None,
        warnings: tuple[Problem, ...] = (),
        env_sources: dict[str, str] | None = None,
        lines: dict[str, int] | None = None,
    ):
        self._set(
            name=name,
            file=None if path is None else normalize(path),
            source=source,
            description=description,
            requires={} if requires is None else requires,
            extends=extends,
            tags=tags,
            env={} if env is None else env,
            own_env={} if own_env is None else own_env,
            shadows_file=None if shadows is None else normalize(shadows),
            warnings=warnings,
            env_sources={} if env_sources is None else env_sources,
            lines={} if lines is None else lines,
        )

    @property
    def path(self) -> Path:
        if self.file is None:
            return None  # type: ignore[return-value]  # a Profile built by hand, no file
        from pathlib import Path

        return Path(self.file)

    @property
    def shadows(self) -> Path | None:
        if self.shadows_file is None:
            return None
        from pathlib import Path

        return Path(self.shadows_file)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.file),
            "source": self.source,
            "description": self.description,
            "requires": dict(self.requires),
            "extends": self.extends,
            "tags": list(self.tags),
            "env": dict(self.env),
            "own_env": dict(self.own_env),
            "shadows": self.shadows_file,
            "warnings": [w.to_dict() for w in self.warnings],
        }
