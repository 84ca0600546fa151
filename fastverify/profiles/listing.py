"""The profile listing: one row per profile file of a store, with its source, description,
validity and problems, and whether it is the active one.

The daemon answers it (`GET /v1/profiles`: the profiles `profile set` can switch to, from its
own directories, validated against its host) and `fastverifyctl profile list` prints it; the
CLI builds it here itself only when no daemon answers or the operator names the directories.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastverify.api_answers import ProfileListed
    from fastverify.profiles.store import Entry, ProfileStore


def listing(store: ProfileStore, active: str | None, *, known: bool = True) -> list[ProfileListed]:
    """Every profile of `store`; `active`: the serving profile's name (None: none serves).
    `known` False: nobody said which serves (no daemon answered), each row's `active` is
    None."""
    rows: list[ProfileListed] = []
    for entry, prof, problems in store.list_entries():
        rows.append(
            {
                "name": entry.name,
                "description": prof.description if prof else _raw_description(entry),
                "source": entry.source,
                "path": entry.file,
                "overrides_shipped": entry.shadows_file is not None,
                "shadows": entry.shadows_file,
                "valid": not any(p.severity == "error" for p in problems),
                "problems": [p.to_dict() for p in problems],
                "tags": list(prof.tags) if prof else [],
                "requires": dict(prof.requires) if prof else {},
                "extends": prof.extends if prof else None,
                "active": entry.name == active if known else None,
            }
        )
    return rows


class CachedListing:
    """The listing of a long-lived store (the daemon's), validated again only when a file of
    its directories changed: a file added, removed, renamed, or written (its size, mtime or
    inode, a link's target's), the store replaced. A listing is asked for far more often than
    a profile changes, and validating every profile is most of its cost."""

    def __init__(self) -> None:
        self._of: tuple[ProfileStore, tuple[Any, ...]] | None = None
        self._rows: list[ProfileListed] = []
        self._lock = threading.Lock()  # one listing at a time (the store's memo is per listing)

    def rows(self, store: ProfileStore, active: str | None) -> list[ProfileListed]:
        with self._lock:
            snap = _snapshot(store)
            if self._of is None or self._of[0] is not store or self._of[1] != snap:
                self._rows, self._of = listing(store, None), (store, snap)
            return [{**row, "active": row["name"] == active} for row in self._rows]


def _snapshot(store: ProfileStore) -> tuple[Any, ...]:
    """What a change to any file of the store's directories changes."""
    out: list[Any] = []
    for d, _source in store.search_path():
        try:
            with os.scandir(d) as it:
                for f in it:
                    try:
                        st = f.stat()  # a link's target
                    except OSError as exc:
                        out.append((str(d), f.name, exc.errno))
                        continue
                    out.append((str(d), f.name, st.st_ino, st.st_size, st.st_mtime_ns,
                                st.st_ctime_ns))  # fmt: skip
        except OSError as exc:
            out.append((str(d), exc.errno))
    return tuple(sorted(out, key=repr))


def first_error(row: ProfileListed) -> str:
    """The first error of an invalid row, with its line when it has one."""
    for p in row["problems"]:
        if p["severity"] == "error":
            return f"{p['message']} (line {p['line']})" if p.get("line") else str(p["message"])
    return ""


def _raw_description(entry: Entry) -> Any:
    """An invalid profile's `# description:` as written (it has no loaded Profile)."""
    from fastverify.profiles import envfile

    return envfile.parse_file(entry.file, entry.root_dir).meta.get("description", (0, ""))[1]
