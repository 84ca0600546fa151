"""A finding about one line of one file, and the immutable value base it is built on.

`Problem(path, line, message, severity)` prints as `path:line: message` (`path:line:
warning: message` for a warning); line 0 means "the file as a whole" (or a name that
names no file) and prints as `path: message`, without a line number. Every file format
fastverify checks line by line reports through it: profiles (`fastverify.profiles`, which
re-exports it as `fastverify.profiles.model.Problem`) and tuner tables (`fastverify.tuner`).
A module of its own so that neither of those packages needs the other for it.

`Record` is the plain-class value base (equality, hash, repr by field, immutable) used
instead of dataclasses: creating a dataclass costs about a millisecond at import, and
`fastverifyctl profile list` imports every value type of the profile library.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

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
        return self._values() == other._values()

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
    """One finding: `str(p)` is `"path:line: message"`, `"path: message"` for line 0
    (warnings say so in the message)."""

    _fields = ("path", "line", "message", "severity")
    path: str
    line: int
    message: str
    severity: Severity

    def __init__(self, path: str, line: int, message: str, severity: Severity = "error"):
        self._set(path=path, line=line, message=message, severity=severity)

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        where = f"{self.path}:{self.line}" if self.line else self.path  # 0: the whole file
        return f"{where}: {prefix}{self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "message": self.message,
            "severity": self.severity,
        }
