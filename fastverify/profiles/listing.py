"""The profile listing: one row per profile file of a store, with its source, description,
validity and problems, and whether it is the active one.

The daemon answers it (`GET /v1/profiles`: the profiles `profile set` can switch to, from its
own directories, validated against its host; fastverify.daemon.profile_listing keeps it) and
`fastverifyctl profile list` prints it; the CLI builds it itself only when no daemon answers
or the operator names the directories.
"""

from __future__ import annotations

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
