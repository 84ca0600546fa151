"""Data types shared by the profile library: `Problem`, `ProfileError`, `Profile`.

A `Problem` is one finding about one line of one file, printed as
`path:line: message`; line 0 means "the file as a whole". A `ProfileError`
carries every problem found, so callers can show them all at once.

`Problem` and `Record` live in `fastverify.problems` (shared with the tuner table) and are
re-exported here. The value types here and in envfile/validate/store/nccl_vars are plain
classes on `Record` (equality, hash, repr by field, immutable) rather than dataclasses:
creating a dataclass costs about a millisecond at import, and `fastverifyctl profile list`
imports all of them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from fastverify.paths import normalize
from fastverify.problems import Problem, Record, Severity

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["Problem", "Profile", "ProfileError", "Record", "Severity", "Source"]

# where a profile was found: the shipped set, an operator directory, a path given by hand
Source = Literal["shipped", "user", "file"]


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
    source: Source
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
        source: Source,
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
            return None  # a Profile built by hand, no file
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
