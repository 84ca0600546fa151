"""The daemon's profile listing (`GET /v1/profiles`), validated again only when a file of its
profile directories changed."""

from __future__ import annotations

import os
import threading
from typing import Any

from fastverify.api_answers import ProfileListed
from fastverify.profiles.listing import listing
from fastverify.profiles.store import ProfileStore


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
