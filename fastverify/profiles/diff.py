"""Differences between two resolved profiles: variables added, removed, changed; requires."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastverify.profiles.model import Profile


@dataclass(frozen=True)
class DiffRow:
    kind: str  # "env" | "requires"
    name: str
    a: str | None
    b: str | None

    @property
    def change(self) -> str:
        if self.a is None:
            return "added"
        if self.b is None:
            return "removed"
        return "changed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "a": self.a,
            "b": self.b,
            "change": self.change,
        }


def _rows(kind: str, a: dict[str, str], b: dict[str, str]) -> list[DiffRow]:
    names = list(a) + [k for k in b if k not in a]
    return [DiffRow(kind, n, a.get(n), b.get(n)) for n in names if a.get(n) != b.get(n)]


def diff_profiles(a: Profile, b: Profile) -> list[DiffRow]:
    """Rows where `a` and `b` differ (resolved env, then requires); [] when identical."""
    return _rows("env", a.env, b.env) + _rows("requires", a.requires, b.requires)


def unified(a: Profile, b: Profile, rows: list[DiffRow]) -> str:
    """A `diff -u`-like text: `-NAME=a` / `+NAME=b` lines (requires as `# requires:` lines)."""
    out = [f"--- {a.name} ({a.path})", f"+++ {b.name} ({b.path})"]
    for r in rows:
        prefix = "# requires: " if r.kind == "requires" else ""
        if r.a is not None:
            out.append(f"-{prefix}{r.name}={r.a}")
        if r.b is not None:
            out.append(f"+{prefix}{r.name}={r.b}")
    return "\n".join(out)
