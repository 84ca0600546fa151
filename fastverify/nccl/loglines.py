"""The one parser of NCCL's own log lines (NCCL_DEBUG=INFO/WARN output).

Lines look like `host:pid:tid [dev] NCCL INFO <message>` (or the bare `NCCL version ...`
banner of NCCL_DEBUG=VERSION). Messages read here (NCCL 2.28.9, see tests/fixtures/):

- `NCCL version 2.28.9+cuda13.0`                              -> kind `nccl_version`
- `NCCL_ALGO set by environment to Tree`, `NCCL_BUFFSIZE set by environment to 16777216.`
  (numbers may end with a period, dropped here)               -> kind `nccl_env`
- `AllReduce: 16384 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}` -> `nccl_tuning`
- tuner plugin (src/plugin/tuner.cc, plugin_open.cc): `TUNER/Plugin: Using NAME (v4)`,
  `Successfully loaded external tuner plugin PATH`, `TUNER/Plugin: Could not find: NAME`,
  `TUNER/Plugin: NAME: <dlerror>`, `External tuner plugin NAME is unsupported`, and the
  lines fastverify's own plugin prints through NCCL's logger (`fastverify tuner: 3 of 3
  rows from PATH apply`, `fastverify tuner: PATH has 4 rows, none for ...`)
                                                              -> kind `nccl_tuner`
- any `NCCL WARN` line                                        -> kind `nccl_warn`
- `ncclCommInitRank` (a communicator was created: `has_comm_init`)

`split_line(line)` -> `(level, message)` for any NCCL INFO/WARN line (also those no record
is made of); `FAILURE` matches the text of NCCL failing (WARN lines, `NCCL error`,
ncclUnhandledCudaError and the other ncclResult_t names).

Users: the daemon's verification (`set_by_env`), failure classification (`FAILURE`) and
tuner check (`has_comm_init`), the exporter's log parser (`parse_nccl_line`), preflight
(`summarise`) and the tuner-load check (`fastverify.tuner.loaded`, via `split_line` and
`parse_message`). No other module reads NCCL's lines (tests/unit/test_nccl_lines_home.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

Record = dict[str, Any]

_HEAD = re.compile(r"(?:^|\s)(\S+):(\d+):(\d+) \[(\d+)\] NCCL (INFO|WARN) ")
_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*?)\s*$")
_VERSION = re.compile(r"NCCL version (\S+)")
_TUNING = re.compile(
    r"(\w+): (\d+) Bytes -> Algo (\S+) proto (\S+)(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?"
)
_TUNER_USING = re.compile(r"TUNER/Plugin: Using (.+?) \(v(\d+)\)")
_TUNER_LOADED = re.compile(r"Successfully loaded external tuner plugin (\S+)")
_TUNER_MISSING = re.compile(r"TUNER/Plugin: Could not find: (\S+)")
_TUNER_OPEN_FAILED = re.compile(r"TUNER/Plugin: (\S+): (.*)")  # NAME: <dlerror>
_TUNER_UNSUPPORTED = re.compile(r"External tuner plugin (\S+) is unsupported")
_TUNER_ROWS = re.compile(r"fastverify tuner: (\d+) of (\d+) rows from (\S+) apply")
_TUNER_NO_ROWS = re.compile(r"fastverify tuner: (\S+) has (\d+) rows, none for")
_COMM_INIT = " NCCL INFO ncclCommInitRank"  # 2.28: "ncclCommInitRank[Config] comm 0x.."
FAILURE = re.compile(
    r"NCCL WARN|NCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError"
    r"|ncclInvalidUsage|ncclInvalidArgument|ncclRemoteError|NCCL failure",
    re.I,
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def normalise_value(value: str) -> str:
    """NCCL prints numbers with a trailing period ("to 16777216."): drop it."""
    value = value.strip()
    if value.endswith(".") and _NUMBER.fullmatch(value[:-1]):
        return value[:-1]
    return value


def split_line(line: str) -> tuple[str, str] | None:
    """`("INFO" | "WARN", message)` for an NCCL INFO/WARN line, else None."""
    for level in ("WARN", "INFO"):
        pos = line.find(f" NCCL {level} ")
        if pos >= 0:
            return level, line[pos + len(level) + 7 :].strip()
    return None


def is_info_line(line: str) -> bool:
    """An NCCL INFO line (whether or not a record is made of it)."""
    return " NCCL INFO " in line


def has_comm_init(text: str) -> bool:
    """Did this process's NCCL output create a communicator (`ncclCommInitRank`)?"""
    return _COMM_INIT in text


def parse_nccl_line(line: str) -> Record | None:
    """The record for one NCCL line, or None (also for an NCCL INFO line we do not read)."""
    pos = line.find(" NCCL WARN ")
    if pos >= 0:
        rec: Record = {"kind": "nccl_warn", "message": line[pos + 11 :].strip()}
        _source(line, rec)
        return rec
    pos = line.find(" NCCL INFO ")
    if pos < 0:
        if line.startswith("NCCL version "):
            m = _VERSION.match(line)
            return {"kind": "nccl_version", "version": m.group(1)} if m else None
        return None
    msg = line[pos + 11 :].rstrip()
    found = parse_message(msg)
    if found is not None:
        _source(line, found)
    return found


def parse_message(msg: str) -> Record | None:
    """The record for the message part of an NCCL INFO line."""
    if " set by environment to " in msg:
        m = _ENV.search(msg)
        if m:
            return {"kind": "nccl_env", "var": m.group(1), "value": normalise_value(m.group(2))}
        return None
    if " Bytes -> Algo " in msg:
        m = _TUNING.match(msg)
        if m:
            return {
                "kind": "nccl_tuning",
                "collective": m.group(1),
                "bytes": int(m.group(2)),
                "algo": m.group(3),
                "proto": m.group(4),
                "channel_lo": int(m.group(5)) if m.group(5) is not None else None,
                "channel_hi": int(m.group(6)) if m.group(6) is not None else None,
            }
        return None
    if msg.startswith("NCCL version "):
        m = _VERSION.match(msg)
        return {"kind": "nccl_version", "version": m.group(1)} if m else None
    if "uner" in msg or "UNER" in msg:  # "tuner", "TUNER/Plugin"
        if m := _TUNER_USING.search(msg):
            return {"kind": "nccl_tuner", "event": "using", "name": m.group(1),
                    "api": int(m.group(2))}  # fmt: skip
        if m := _TUNER_LOADED.search(msg):
            return {"kind": "nccl_tuner", "event": "loaded", "path": m.group(1)}
        if m := _TUNER_MISSING.search(msg):
            return {"kind": "nccl_tuner", "event": "not_found", "path": m.group(1)}
        if m := _TUNER_UNSUPPORTED.search(msg):
            return {"kind": "nccl_tuner", "event": "unsupported", "path": m.group(1)}
        if m := _TUNER_ROWS.search(msg):
            return {"kind": "nccl_tuner", "event": "rows", "applied": int(m.group(1)),
                    "total": int(m.group(2)), "path": m.group(3)}  # fmt: skip
        if m := _TUNER_NO_ROWS.search(msg):
            return {"kind": "nccl_tuner", "event": "no_rows", "total": int(m.group(2)),
                    "path": m.group(1)}  # fmt: skip
        if m := _TUNER_OPEN_FAILED.search(msg):
            return {"kind": "nccl_tuner", "event": "open_failed", "path": m.group(1),
                    "error": m.group(2)}  # fmt: skip
    return None


def _source(line: str, rec: Record) -> None:
    m = _HEAD.search(line)
    if m:
        rec["host"] = m.group(1)
        rec["pid"] = int(m.group(2))
        rec["device"] = int(m.group(4))


def set_by_env(lines: Iterable[str]) -> dict[str, str]:
    """NCCL's `NCCL_X set by environment to Y` confirmations -> {NCCL_X: Y} (last wins)."""
    out: dict[str, str] = {}
    for line in lines:
        if " set by environment to " not in line:
            continue
        m = _ENV.search(line)
        if m:
            out[m.group(1)] = normalise_value(m.group(2))
    return out


def summarise(text: str) -> dict[str, Any]:
    """One rank's NCCL INFO output: version, confirmed variables, AllReduce algo/proto per
    message size (the most frequent choice), tuner plugin events and WARN messages."""
    version = None
    confirmed: dict[str, str] = {}
    choices: dict[int, Counter[tuple[str, str]]] = {}
    warnings: list[str] = []
    tuner: list[Record] = []
    for line in text.splitlines():
        rec = parse_nccl_line(line)
        if rec is None:
            continue
        kind = rec["kind"]
        if kind == "nccl_warn":
            warnings.append(rec["message"][:300])
        elif kind == "nccl_version":
            version = rec["version"]
        elif kind == "nccl_env":
            confirmed[rec["var"]] = rec["value"]
        elif kind == "nccl_tuning" and rec["collective"] == "AllReduce":
            choices.setdefault(rec["bytes"], Counter())[(rec["algo"], rec["proto"])] += 1
        elif kind == "nccl_tuner":
            tuner.append({k: v for k, v in rec.items() if k in ("event", "name", "api", "path")})
    tuning = {
        nbytes: {"algo": c.most_common(1)[0][0][0], "proto": c.most_common(1)[0][0][1]}
        for nbytes, c in sorted(choices.items())
    }
    return {
        "version": version,
        "confirmed": confirmed,
        "tuning": tuning,
        "warnings": warnings[:20],
        "tuner": tuner[:20],
    }
