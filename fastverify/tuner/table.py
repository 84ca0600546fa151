"""The tuner table: a CSV of per-size NCCL choices, read by the C plugin and checked here.

Format (one row per line; `#` comment lines and blank lines ignored; an optional
header line starting with `collective`):

    collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes
    AllReduce,0,327679,Ring,LL,-1,2,1
    AllReduce,327680,134217728,Ring,Simple,-1,2,1

- collective: AllReduce, AllGather, ReduceScatter, Broadcast, Reduce (case-insensitive);
- min_bytes..max_bytes: inclusive byte range of the message (NCCL's nBytes);
- algorithm: Tree, Ring, CollnetDirect, CollnetChain, NVLS, NVLSTree, PAT (NCCL_ALGO's
  tokens) or `default`; protocol: LL, LL128, Simple or `default`: both named, or both
  `default` (NCCL accepts neither one alone);
- channels: 1..64, or `-1`/`default` for NCCL's own count;
- nranks, nnodes: the communicator shape the row was measured for (`-1`/`any`: every).

Rows of one collective and shape must be sorted by min_bytes and must not overlap. A
size outside every row, another collective, or a communicator of another shape keeps
NCCL's own choice. The C plugin (native/tuner/fastverify_tuner.c) applies the same
grammar and refuses the whole table on any error; `check_table` reports every problem
as `path:line: message` beforehand and adds the checks that need the host (LL128
without NVLink).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastverify.problems import Problem, Severity

HEADER = "collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes"
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
ALGORITHMS = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
MAX_ROWS = 256  # FV_MAX_ROWS in the C plugin
MAX_LINE = 512  # FV_MAX_LINE
MAX_CHANNELS = 64
MAX_FILE_BYTES = 1 << 20
_UINT = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class TableRow:
    """One table row; `algorithm`/`protocol` None means NCCL's choice, `channels` None too."""

    collective: str
    min_bytes: int
    max_bytes: int
    algorithm: str | None
    protocol: str | None
    channels: int | None
    nranks: int | None  # None: any
    nnodes: int | None
    line: int = 0

    @property
    def choice(self) -> str:
        """`RING/LL` style (NCCL's TUNING-line spelling), `default` for NCCL's."""
        if self.algorithm is None:
            base = "default"
        else:
            base = f"{self.algorithm.upper()}/{(self.protocol or '').upper()}"  # both named
        return base if self.channels is None else f"{base}/{self.channels}ch"

    def covers(self, nbytes: int) -> bool:
        return self.min_bytes <= nbytes <= self.max_bytes

    def csv(self) -> str:
        def opt(v: int | None) -> str:
            return "-1" if v is None else str(v)

        return ",".join(
            [
                self.collective,
                str(self.min_bytes),
                str(self.max_bytes),
                self.algorithm or "default",
                self.protocol or "default",
                opt(self.channels),
                opt(self.nranks),
                opt(self.nnodes),
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            "algorithm": self.algorithm,
            "protocol": self.protocol,
            "channels": self.channels,
            "nranks": self.nranks,
            "nnodes": self.nnodes,
            "line": self.line,
            "choice": self.choice,
        }


def _canon(token: str, names: tuple[str, ...]) -> str | None:
    low = token.lower()
    return next((n for n in names if n.lower() == low), None)


def _opt_int(token: str, hi: int, word: str) -> int | str | None:
    """None for -1/word, the integer when 1..hi, else an error string."""
    if token == "-1" or token.lower() == word:
        return None
    if not _UINT.fullmatch(token) or not 1 <= int(token) <= hi:
        return "bad"
    return int(token)


def _same_scope(a: TableRow, b: TableRow) -> bool:
    return (
        a.collective == b.collective
        and (a.nranks == b.nranks or a.nranks is None or b.nranks is None)
        and (a.nnodes == b.nnodes or a.nnodes is None or b.nnodes is None)
    )


def parse_row(text: str, line: int) -> TableRow | str:
    """One data line -> TableRow, or the error message (same rules as the C plugin)."""
    fields = [f.strip() for f in text.split(",")]
    if len(fields) != 8:
        return f"{len(fields)} fields (expected 8: {HEADER})"
    coll = _canon(fields[0], COLLECTIVES)
    if coll is None:
        return f"unknown collective {fields[0]!r} (expected one of {', '.join(COLLECTIVES)})"
    for name, tok in (("min_bytes", fields[1]), ("max_bytes", fields[2])):
        if not _UINT.fullmatch(tok) or int(tok) >= 1 << 64:
            return f"{name} {tok!r} is not a byte count (a non-negative integer)"
    lo, hi = int(fields[1]), int(fields[2])
    if lo > hi:
        return f"min_bytes {lo} is above max_bytes {hi}"
    algo = None if fields[3].lower() == "default" else _canon(fields[3], ALGORITHMS)
    if algo is None and fields[3].lower() != "default":
        return (
            f"unknown algorithm {fields[3]!r} (expected one of {', '.join(ALGORITHMS)} or default)"
        )
    proto = None if fields[4].lower() == "default" else _canon(fields[4], PROTOCOLS)
    if proto is None and fields[4].lower() != "default":
        return f"unknown protocol {fields[4]!r} (expected one of {', '.join(PROTOCOLS)} or default)"
    if (algo is None) != (proto is None):
        return (
            "algorithm and protocol must both be named or both 'default' "
            "(NCCL accepts neither one alone)"
        )
    ch = _opt_int(fields[5], MAX_CHANNELS, "default")
    if isinstance(ch, str):  # "bad"
        return f"channels {fields[5]!r} (expected 1..{MAX_CHANNELS}, -1 or default)"
    if algo is None and ch is None:
        return "the row changes nothing (name an algorithm/protocol or a channel count)"
    nranks = _opt_int(fields[6], 1 << 20, "any")
    if isinstance(nranks, str):  # "bad"
        return f"nranks {fields[6]!r} (expected a positive integer, -1 or any)"
    nnodes = _opt_int(fields[7], 1 << 20, "any")
    if isinstance(nnodes, str):  # "bad"
        return f"nnodes {fields[7]!r} (expected a positive integer, -1 or any)"
    return TableRow(coll, lo, hi, algo, proto, ch, nranks, nnodes, line)


@dataclass
class TableCheck:
    """Rows (empty when any error) and every problem found."""

    path: str
    rows: list[TableRow]
    problems: list[Problem]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors


def parse_text(
    text: str,
    path: str = "<table>",
    has_nvlink: bool | Callable[[], bool | None] | None = None,
    force: bool = False,
) -> TableCheck:
    """Check a whole table; never raises. `has_nvlink` (or a callable giving it) decides
    the LL128 check: False -> error unless `force`, None (unknown) -> warning."""
    problems: list[Problem] = []
    rows: list[TableRow] = []
    seen_data = False

    def err(line: int, msg: str, sev: Severity = "error") -> None:
        problems.append(Problem(path, line, msg, sev))

    for number, raw in enumerate(text.split("\n"), start=1):
        if len(raw) > MAX_LINE:
            err(number, f"line longer than {MAX_LINE} characters")
            continue
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not seen_data and re.match(r"collective[,\s]", line, re.I):
            seen_data = True
            continue
        seen_data = True
        row = parse_row(line, number)
        if isinstance(row, str):
            err(number, row)
            continue
        if len(rows) == MAX_ROWS:
            err(number, f"more than {MAX_ROWS} rows (merge neighbouring ranges)")
            break
        for prev in rows:
            if not _same_scope(prev, row):
                continue
            if row.min_bytes <= prev.max_bytes and prev.min_bytes <= row.max_bytes:
                err(number, f"byte range overlaps the row on line {prev.line}")
                break
            if row.min_bytes < prev.min_bytes:
                err(number, f"rows are not sorted by min_bytes (line {prev.line} starts higher)")
                break
        rows.append(row)
    if not rows and not problems:
        err(0, "the table has no rows (a tuner profile without rows changes nothing)", "warning")
    _host_checks(path, rows, has_nvlink, force, problems)
    problems.sort(key=lambda p: p.line)
    ok = not any(p.severity == "error" for p in problems)
    return TableCheck(path, rows if ok else [], problems)


def _host_checks(
    path: str,
    rows: list[TableRow],
    has_nvlink: bool | Callable[[], bool | None] | None,
    force: bool,
    problems: list[Problem],
) -> None:
    ll128 = [r for r in rows if r.protocol == "LL128"]
    for r in rows:
        if r.algorithm == "PAT" and r.collective not in ("AllGather", "ReduceScatter"):
            problems.append(
                Problem(
                    path,
                    r.line,
                    f"PAT exists only for AllGather/ReduceScatter; NCCL keeps its own choice "
                    f"for this {r.collective} row",
                    "warning",
                )
            )
    if not ll128:
        return
    nvlink = has_nvlink() if callable(has_nvlink) else has_nvlink
    for r in ll128:
        if nvlink is True:
            continue
        if nvlink is None:
            problems.append(
                Problem(
                    path,
                    r.line,
                    "LL128 and the GPU topology is unknown: NCCL documents data corruption "
                    "with LL128 without NVLink (check with `fastverifyctl doctor` on the GPU host)",
                    "warning",
                )
            )
        elif force:
            problems.append(
                Problem(
                    path, r.line, "LL128 without NVLink, accepted because of --force", "warning"
                )
            )
        else:
            problems.append(
                Problem(
                    path,
                    r.line,
                    "LL128 but the GPUs have no NVLink: NCCL documents data corruption risk "
                    "(choose LL or Simple, or pass --force)",
                )
            )


def check_table(
    path: Path,
    has_nvlink: bool | Callable[[], bool | None] | None = None,
    force: bool = False,
) -> TableCheck:
    """Read and check the table file at `path` (unreadable: one problem at line 0)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return TableCheck(
            str(path),
            [],
            [Problem(str(path), 0, f"cannot read tuner table: {exc.strerror or exc}")],
        )
    if len(data) > MAX_FILE_BYTES:
        return TableCheck(
            str(path),
            [],
            [Problem(str(path), 0, f"tuner table larger than {MAX_FILE_BYTES} bytes")],
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return TableCheck(
            str(path), [], [Problem(str(path), 0, f"invalid UTF-8 at byte {exc.start}")]
        )
    return parse_text(text, str(path), has_nvlink, force)


def render(rows: Iterable[TableRow], comments: Iterable[str] = ()) -> str:
    """The CSV text of `rows` with leading `# ` comment lines and the header."""
    lines = [f"# {c}".rstrip() for c in comments]
    lines.append(HEADER)
    lines.extend(r.csv() for r in rows)
    return "\n".join(lines) + "\n"


def lookup(rows: Iterable[TableRow], collective: str, nbytes: int, nranks: int, nnodes: int):
    """The row the plugin would use (same first-match rule), or None for NCCL's choice."""
    for r in rows:
        if (
            r.collective == collective
            and r.covers(nbytes)
            and (r.nranks is None or r.nranks == nranks)
            and (r.nnodes is None or r.nnodes == nnodes)
        ):
            return r
    return None
