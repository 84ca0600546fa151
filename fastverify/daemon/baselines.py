"""Baseline measurements as the daemon keeps them (baselines.json): the checks a recorded
baseline must pass (`check_baseline`, field -> what is wrong), one profile's entry with a
record per concurrency (`with_concurrency`), and every stored record (`baseline_records`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

# Baselines measured before this are not from fastverify (2020-01-01T00:00:00Z).
EARLIEST_MEASUREMENT = 1577836800.0
# Clocks of the measuring host and the daemon may differ this much.
CLOCK_SKEW_S = 60.0


def check_baseline(
    body: Mapping[str, Any], profile_problem: Callable[[str], str | None], now: float
) -> dict[str, str]:
    """What is wrong with a baseline body, field -> message (empty: nothing)."""
    out: dict[str, str] = {}
    problem = profile_problem(str(body.get("profile", "")))
    if problem is not None:
        out["profile"] = problem
    conc = body.get("concurrency")
    if conc is None:
        out["concurrency"] = (
            "required: the number of concurrent requests the baseline was measured at "
            "(bench --concurrency); a verdict compares only figures of the same concurrency"
        )
    elif not isinstance(conc, int) or isinstance(conc, bool) or conc < 1:
        out["concurrency"] = f"must be a whole number of requests >= 1, got {conc!r}"
    for key in ("tokens_per_second", "per_request_tokens_per_second"):
        v = body.get(key)
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            out[key] = f"must be a finite number of tokens per second, got {v!r}"
        elif v <= 0:
            out[key] = f"must be > 0 tokens per second, got {v!r}"
    at = body.get("measured_at")
    if at is not None:
        if not isinstance(at, int | float) or isinstance(at, bool) or not math.isfinite(at):
            out["measured_at"] = f"must be a finite unix time in seconds, got {at!r}"
        elif at < EARLIEST_MEASUREMENT:
            out["measured_at"] = f"{at!r} is before 2020-01-01 (expected unix seconds)"
        elif at > now + CLOCK_SKEW_S:
            out["measured_at"] = (
                f"{at!r} is {at - now:.0f} s in the future (at most {CLOCK_SKEW_S:.0f} s ahead)"
            )
    return out


KEEP_CONCURRENCIES = 64  # per profile: the most recently measured concurrencies


def with_concurrency(old: Any, rec: dict[str, Any]) -> dict[str, Any]:
    """A profile's baselines.json entry after recording `rec`: the newest record at the top
    (what GET /v1/baselines readers of one record per profile use) and the last record of
    each of the KEEP_CONCURRENCIES most recently measured concurrencies under
    `by_concurrency` ("N" -> record; a caller cannot grow the file without bound)."""
    by: dict[str, Any] = {}
    if isinstance(old, dict):
        prev = old.get("by_concurrency")
        if isinstance(prev, dict):
            by.update({k: v for k, v in prev.items() if isinstance(v, dict)})
    by[str(rec["concurrency"])] = dict(rec)
    while len(by) > KEEP_CONCURRENCIES:  # the least recently measured goes
        by.pop(min(by, key=lambda k: _measured_at(by[k])))
    return {**rec, "by_concurrency": by}


def _measured_at(rec: dict[str, Any]) -> float:
    at = rec.get("measured_at")
    return float(at) if isinstance(at, int | float) else 0.0


def baseline_records(data: Any) -> list[dict[str, Any]]:
    """Every stored baseline record of baselines.json (one per profile and concurrency; a
    record written before concurrencies were recorded stands alone, without one)."""
    out: list[dict[str, Any]] = []
    if not isinstance(data, dict):
        return out
    for entry in data.values():
        if not isinstance(entry, dict):
            continue
        by = entry.get("by_concurrency")
        if isinstance(by, dict) and by:
            out.extend(v for v in by.values() if isinstance(v, dict))
        else:
            out.append(entry)
    return out
