"""Data types shared by the profile library: `Problem`, `ProfileError`, `Profile`.

A `Problem` is one finding about one line of one file, printed as
`path:line: message`; line 0 means "the file as a whole". A `ProfileError`
carries every problem found, so callers can show them all at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    """One finding: `str(p)` is `"path:line: message"` (warnings say so in the message)."""

    path: str
    line: int
    message: str
    severity: Severity = "error"

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


@dataclass(frozen=True)
class Profile:
    """A loaded, validated profile.

    `env` is the resolved environment after `# extends:` (base first, this file's
    assignments override, in file order); `own_env` is what this file itself sets;
    `env_sources` names, for each key of `env`, the profile whose file set it.
    """

    name: str
    path: Path
    source: Literal["shipped", "user", "file"]
    description: str = ""
    requires: dict[str, str] = field(default_factory=dict)
    extends: str | None = None
    tags: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    own_env: dict[str, str] = field(default_factory=dict)
    shadows: Path | None = None
    warnings: tuple[Problem, ...] = ()
    env_sources: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # key -> line in this file

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "source": self.source,
            "description": self.description,
            "requires": dict(self.requires),
            "extends": self.extends,
            "tags": list(self.tags),
            "env": dict(self.env),
            "own_env": dict(self.own_env),
            "shadows": str(self.shadows) if self.shadows else None,
            "warnings": [w.to_dict() for w in self.warnings],
        }
