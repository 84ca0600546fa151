"""Decode the engine's log stream into typed records (plain dicts with a `kind`).

One dispatcher over the two grammars that own the formats: NCCL's lines
(`fastverify.nccl.loglines`: nccl_version, nccl_env, nccl_tuning, nccl_tuner, nccl_warn)
and SGLang's (`fastverify.sglang.loglines`: decode, prefill, ready, load_progress,
capture_progress, capture_failed, argv_error). Host-side NCCL COLL lines are deliberately
not records: under CUDA graphs they count captures, not replays.

Dispatch is by cheap substring tests before any regex runs. `parse_line` returns None for
unrecognised lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from fastverify.nccl.loglines import is_info_line, parse_nccl_line
from fastverify.sglang.loglines import READY_TEXT, parse_sglang_line

Record = dict[str, Any]

__all__ = ["READY_TEXT", "Record", "iter_records", "parse_line"]


def parse_line(line: str) -> Record | None:
    """Return the record for one log line, or None when the line is not one we know."""
    if "NCCL" in line:
        rec = parse_nccl_line(line)
        if rec is not None or is_info_line(line):
            return rec  # an NCCL INFO line is never also a decode/prefill/ready line
    return parse_sglang_line(line)


def iter_records(lines: Iterable[str]) -> Iterator[Record]:
    """Parse many lines; yields records with `line` (1-based line number) added."""
    for number, line in enumerate(lines, 1):
        rec = parse_line(line)
        if rec is not None:
            rec["line"] = number
            yield rec
