"""Decode SGLang and NCCL log lines into typed records (plain dicts with a `kind`).

Owns the log formats listed in REFERENCE.md, across releases:

- `decode`: `Decode batch, #running-req: 1, #token: 148, token usage: 0.00, accept len: 2.01,
  accept rate: 0.34, cuda graph: True, gen throughput (token/s): 82.31, #queue-req: 0` (newest)
  and the older `Decode batch. ... #queue-req: 0, ` (trailing comma), with or without the
  speculative fields, with unknown suffixes (`fwd occupancy: ...`) kept under `extra`.
- `prefill`: `Prefill batch[(mixed #running-req: N)][.,] #new-seq: ..., #new-token: ...`.
- `ready`: `The server is fired up and ready to roll!`.
- `load_progress` / `capture_progress`: tqdm bars of weight loading and CUDA-graph capture.
- `nccl_version`, `nccl_env` (`X set by environment to Y`; numbers lose NCCL's trailing
  period), `nccl_tuning` (`AllReduce: N Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}`),
  `nccl_warn`.

Dispatch is by cheap substring tests before any regex runs, so the common line (an NCCL
INFO line we do not care about, a request log) costs a few `in` checks. `parse_line`
returns None for unrecognised lines. Host-side NCCL COLL lines are deliberately not
records: under CUDA graphs they count captures, not replays.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

Record = dict[str, Any]

READY_TEXT = "The server is fired up and ready to roll"

# the common shapes of both generations in one pass; anything else takes the generic path
_DECODE_FAST = re.compile(
    r" #running-req: (\d+), #token: (\d+), token usage: ([\d.]+), "
    r"(?:accept len: ([\d.]+), )?(?:accept rate: ([\d.]+), )?(?:cuda graph: (True|False), )?"
    r"gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)(?:, )?$"
)
_NCCL_HEAD = re.compile(r"(?:^|\s)(\S+):(\d+):(\d+) \[(\d+)\] NCCL (INFO|WARN) ")
_NCCL_ENV = re.compile(r"(NCCL_[A-Z0-9_]+) set by environment to (.*)$")
_NCCL_VERSION = re.compile(r"NCCL version (\S+)")
_NCCL_TUNING = re.compile(
    r"(\w+): (\d+) Bytes -> Algo (\S+) proto (\S+)"
    r"(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?"
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_TQDM = re.compile(r"(\d+)%\s*(?:Completed\s*)?\|(?:[^|]*\|)?\s*(\d+)/(\d+)")
_CAPTURE_BS = re.compile(r"bs=(\d+)")

# SGLang key -> (our field, type)
_DECODE_FIELDS: dict[str, tuple[str, type]] = {
    "#running-req": ("running_reqs", int),
    "#token": ("token_count", int),
    "token usage": ("token_usage", float),
    "accept len": ("accept_len", float),
    "accept rate": ("accept_rate", float),
    "cuda graph": ("cuda_graph", bool),
    "gen throughput (token/s)": ("gen_throughput", float),
    "#queue-req": ("queue_reqs", int),
}
_PREFILL_FIELDS: dict[str, tuple[str, type]] = {
    "#new-seq": ("new_seqs", int),
    "#new-token": ("new_tokens", int),
    "#cached-token": ("cached_tokens", int),
    "token usage": ("token_usage", float),
    "#running-req": ("running_reqs", int),
    "#queue-req": ("queue_reqs", int),
    "input throughput (token/s)": ("input_throughput", float),
    "cache hit rate": ("cache_hit_rate", float),
}


def _convert(raw: str, kind: type) -> Any:
    if kind is bool:
        return raw == "True"
    try:
        return kind(raw)
    except ValueError:
        raw = raw.rstrip("%")
        try:
            return kind(raw) if kind is float else int(float(raw))
        except ValueError:
            return None


def _fields(body: str, table: dict[str, tuple[str, type]], rec: Record) -> None:
    """`key: value, key: value, ` -> typed fields; unknown keys kept as text in `extra`."""
    extra: dict[str, str] | None = None
    for part in body.split(", "):
        key, sep, raw = part.partition(": ")
        if not sep:
            continue
        key = key.strip()
        raw = raw.strip().rstrip(",")
        spec = table.get(key)
        if spec is not None:
            rec[spec[0]] = _convert(raw, spec[1])
        elif raw:
            if extra is None:
                extra = {}
            extra[key] = raw
    if extra:
        rec["extra"] = extra


def _prefix(head: str, rec: Record) -> None:
    """`[2025-06-13 10:30:17 TP0] ` / `[... DP0 TP3 EP0] ` -> time and tp_rank (if any)."""
    i = head.find("[")
    j = head.find("]", i + 1)
    if i < 0 or j < 0:
        return
    parts = head[i + 1 : j].split(" ")
    if len(parts) < 2 or len(parts[0]) != 10 or parts[0][4:5] != "-":
        return
    rec["time"] = f"{parts[0]} {parts[1]}"
    for part in parts[2:]:
        if part.startswith("TP") and part[2:].isdigit():
            rec["tp_rank"] = int(part[2:])
            return


def _decode(line: str, start: int) -> Record:
    m = _DECODE_FAST.match(line, start + 13)
    if m is not None:
        r, tok, use, alen, arate, graph, gen, queue = m.groups()
        rec: Record = {
            "kind": "decode",
            "running_reqs": int(r),
            "token_count": int(tok),
            "token_usage": float(use),
            "accept_len": float(alen) if alen is not None else None,
            "accept_rate": float(arate) if arate is not None else None,
            "cuda_graph": (graph == "True") if graph is not None else None,
            "gen_throughput": float(gen),
            "queue_reqs": int(queue),
        }
        if start:
            _prefix(line[:start], rec)
        return rec
    rec = {
        "kind": "decode",
        "running_reqs": None,
        "token_count": None,
        "token_usage": None,
        "accept_len": None,
        "accept_rate": None,
        "cuda_graph": None,
        "gen_throughput": None,
        "queue_reqs": None,
    }
    _fields(line[start + 13 :], _DECODE_FIELDS, rec)
    if start:
        _prefix(line[:start], rec)
    return rec


def _prefill(line: str, start: int) -> Record:
    rec: Record = {"kind": "prefill"}
    body = line[start + 13 :]
    if body.startswith("(mixed"):
        close = body.find(")")
        m = _NUMBER.search(body, 0, close)
        if m:
            rec["mixed_running_reqs"] = int(m.group(0))
        body = body[close + 1 :]
    _fields(body.lstrip(".,"), _PREFILL_FIELDS, rec)
    _prefix(line[:start], rec)
    return rec


def _nccl(line: str) -> Record | None:
    pos = line.find(" NCCL WARN ")
    if pos >= 0:
        rec: Record = {"kind": "nccl_warn", "message": line[pos + 11 :].strip()}
        _nccl_source(line, rec)
        return rec
    pos = line.find(" NCCL INFO ")
    if pos < 0:
        if line.startswith("NCCL version "):  # NCCL_DEBUG=VERSION prints the bare banner
            m = _NCCL_VERSION.match(line)
            return {"kind": "nccl_version", "version": m.group(1)} if m else None
        return None
    msg = line[pos + 11 :].rstrip()
    rec = None
    if " set by environment to " in msg:
        m = _NCCL_ENV.search(msg)
        if m:
            value = m.group(2).strip()
            if value.endswith(".") and _NUMBER.fullmatch(value[:-1]):
                value = value[:-1]
            rec = {"kind": "nccl_env", "var": m.group(1), "value": value}
    elif " Bytes -> Algo " in msg:
        m = _NCCL_TUNING.match(msg)
        if m:
            rec = {
                "kind": "nccl_tuning",
                "collective": m.group(1),
                "bytes": int(m.group(2)),
                "algo": m.group(3),
                "proto": m.group(4),
                "channel_lo": int(m.group(5)) if m.group(5) is not None else None,
                "channel_hi": int(m.group(6)) if m.group(6) is not None else None,
            }
    elif msg.startswith("NCCL version "):
        m = _NCCL_VERSION.match(msg)
        if m:
            rec = {"kind": "nccl_version", "version": m.group(1)}
    if rec is not None:
        _nccl_source(line, rec)
    return rec


def _nccl_source(line: str, rec: Record) -> None:
    m = _NCCL_HEAD.search(line)
    if m:
        rec["host"] = m.group(1)
        rec["pid"] = int(m.group(2))
        rec["device"] = int(m.group(4))


def _progress(line: str) -> Record | None:
    seg = line
    if "\r" in seg:  # tqdm redraws with carriage returns; the last drawn state wins
        parts = [p for p in seg.split("\r") if p.strip()]
        if not parts:
            return None
        seg = parts[-1]
    m = _TQDM.search(seg)
    if m is None:
        return None
    if "Capturing batches" in seg:
        rec: Record = {"kind": "capture_progress"}
        bs = _CAPTURE_BS.search(seg)
        rec["bs"] = int(bs.group(1)) if bs else None
    else:
        rec = {"kind": "load_progress"}
    rec["percent"] = int(m.group(1))
    rec["current"] = int(m.group(2))
    rec["total"] = int(m.group(3))
    return rec


def parse_line(line: str) -> Record | None:
    """Return the record for one log line, or None when the line is not one we know."""
    if "NCCL" in line:
        rec = _nccl(line)
        if rec is not None or " NCCL INFO " in line:
            return rec  # an NCCL INFO line is never also a decode/prefill/ready line
    pos = line.find("Decode batch")
    if pos >= 0 and line[pos + 12 : pos + 13] in ",.":
        return _decode(line, pos)
    pos = line.find("Prefill batch")
    if pos >= 0:
        return _prefill(line, pos)
    if READY_TEXT in line:
        rec = {"kind": "ready"}
        _prefix(line, rec)
        return rec
    if "|" in line and ("Loading" in line or "Capturing batches" in line):
        return _progress(line)
    return None


def iter_records(lines: Iterable[str]) -> Iterator[Record]:
    """Parse many lines; yields records with `line` (1-based line number) added."""
    for number, line in enumerate(lines, 1):
        rec = parse_line(line)
        if rec is not None:
            rec["line"] = number
            yield rec
