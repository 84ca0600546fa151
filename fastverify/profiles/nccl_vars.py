"""The known NCCL environment variables (nccl_vars.csv): kind, allowed values, first NCCL version.

Names were checked against NVIDIA/nccl sources (`NCCL_PARAM(...)`, `DEFINE_NCCL_PARAM`,
`ncclGetEnv("...")` in src/ and plugins/, release 2.30.7) and the NCCL user guide's
"Environment Variables" page. `since` is the first release whose documentation or
source has the variable (best effort for undocumented internals). Kinds:

- `switch`: exactly 0 or 1 (NCCL reads other text as 0, silently)
- `int`: a plain decimal integer in [lo, hi] (NCCL parses with strtoll base 0, so
  `010` is octal 8 and `16M` is 16; both refused)
- `bytes`: a positive plain decimal integer of bytes
- `nthreads`: a multiple of 32 in 64..512
- `enum`: one of `choices` (case-insensitive when `ci`)
- `algo`, `proto`: NCCL's list grammar (see validate.py)
- `level`: a topology path level word (LOC, NVL, PIX, PXB, PHB, SYS) or a legacy digit
- `subsys`: comma list of debug subsystems, optional leading `^`
- `string`, `path`: free text (the env-file subset still applies)

`status` is "" (current), "deprecated" (still read; a warning with the replacement)
or "removed" (NCCL ignores it; an error with the replacement).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fastverify.profiles.model import Record

if TYPE_CHECKING:
    from collections.abc import Mapping

# Collectives NCCL accepts as per-collective prefixes in NCCL_ALGO/NCCL_PROTO (ncclFuncStr).
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
LEVEL_WORDS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
LEVEL_DIGITS = {"0": "LOC", "1": "PIX", "2": "PXB", "3": "PHB", "4": "SYS", "5": "SYS"}
DEBUG_SUBSYS = (
    "INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL",
    "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "DESTROY", "ALL",
)  # fmt: skip

# NCCL_VERSION is set by NVIDIA's CUDA images as metadata; never a tuning knob.
METADATA_ONLY = {"NCCL_VERSION"}


class NcclVar(Record):
    """One NCCL variable: its value kind and bounds, first version, status."""

    _fields = (
        "name",
        "kind",
        "since",
        "lo",
        "hi",
        "choices",
        "ci",
        "status",
        "replacement",
        "note",
    )
    name: str
    kind: str
    since: str
    lo: int | None
    hi: int | None
    choices: tuple[str, ...]
    ci: bool
    status: str
    replacement: str
    note: str

    def __init__(self, row: Mapping[str, str]):
        """One row of nccl_vars.csv (its columns are the fields)."""

        def bound(text: str) -> int | None:
            return int(text) if text else None

        self._set(
            name=row["name"],
            kind=row["kind"],
            since=row["since"],
            lo=bound(row["lo"]),
            hi=bound(row["hi"]),
            choices=tuple(row["choices"].split()),
            ci=row["ci"] == "1",
            status=row["status"],
            replacement=row["replacement"],
            note=row["note"],
        )

    def describe_values(self) -> str:
        """Human text for what a valid value looks like (used in error messages)."""
        k = self.kind
        if k == "switch":
            return "0 or 1"
        if k == "int":
            if self.lo is not None and self.hi is not None:
                return f"an integer {self.lo}..{self.hi}"
            if self.lo is not None:
                return f"an integer >= {self.lo}"
            return "a plain integer"
        if k == "bytes":
            return "a plain number of bytes, e.g. 4194304"
        if k == "nthreads":
            return "a multiple of 32 in 64..512"
        if k == "enum":
            return "one of " + ", ".join(self.choices)
        if k == "algo":
            return "comma list of " + ", ".join(ALGORITHMS)
        if k == "proto":
            return "comma list of " + ", ".join(PROTOCOLS)
        if k == "level":
            return "one of " + ", ".join(LEVEL_WORDS)
        if k == "subsys":
            return "comma list of " + ", ".join(DEBUG_SUBSYS)
        return "text"


# The table itself is data: nccl_vars.csv beside this module, one row per variable (columns
# as NcclVar's fields; `choices` space-separated, `ci` 1 or empty, `# ---` lines head a
# section). Lines are indexed by name on first look-up and only the rows looked up are split
# into fields and made into NcclVars: `profile list` looks up a few dozen names, not the ~300
# of the table, and plain rows need no csv module (start-up time).
_TABLE_FILE = os.path.join(os.path.dirname(__file__), "nccl_vars.csv")  # no pathlib: start-up
_LINES: dict[str, str] = {}  # name -> its row's line (the header line under "")
_MADE: dict[str, NcclVar] = {}


def _lines() -> dict[str, str]:
    if not _LINES:
        with open(_TABLE_FILE, encoding="utf-8") as f:
            header, *rows = (line for line in f.read().splitlines() if not line.startswith("#"))
        _LINES[""] = header
        _LINES.update((line.partition(",")[0], line) for line in rows)
    return _LINES


def _fields(line: str) -> list[str]:
    """One line's fields as csv reads them (only a line with a quote needs its parser)."""
    if '"' not in line:
        return line.split(",")
    import csv

    return next(csv.reader([line]))


def _row(name: str) -> dict[str, str]:
    return dict(zip(_fields(_lines()[""]), _fields(_LINES[name]), strict=True))


def lookup(name: str) -> NcclVar | None:
    """The table entry for `name`, or None when NCCL does not know it."""
    var = _MADE.get(name)
    if var is None and name and name in _lines():
        var = _MADE[name] = NcclVar(_row(name))
    return var


def __getattr__(name: str) -> dict[str, NcclVar]:
    """`KNOWN`: name -> NcclVar for the whole table, made on first use (PEP 562)."""
    if name == "KNOWN":
        return {n: var for n in _lines() if (var := lookup(n)) is not None}  # every row
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def suggest(name: str) -> list[str]:
    """Known names close to a misspelt one (for `NCCL_ALGOS` -> `NCCL_ALGO`)."""
    import difflib

    return difflib.get_close_matches(name, [n for n in _lines() if n], n=3, cutoff=0.75)
