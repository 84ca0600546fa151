"""Does speculation pay here? One verdict from one set of like-for-like quantities.

A speculative cycle (draft steps + one verify pass) yields `accept_len` tokens per running
request. With `running_reqs` requests decoding and an aggregate `gen_throughput` (tokens/s),
all three from one reading of the decode loop (one decode log line, or one poll of SGLang's
/metrics):

    cycle_seconds = running_reqs * accept_len / gen_throughput

Baseline decoding yields one token per request per step at `baseline_per_request_tps`, a
rate that depends on how many requests share the batch. So the baseline it is compared
with must have been measured at the same concurrency (`concurrency` of the baseline ==
`running_reqs` of the reading); otherwise there is no verdict (`verdict` returns None),
never one against a baseline measured at another batch size. With the two matched:

    breakeven_accept_length = cycle_seconds * baseline_per_request_tps
    speedup_estimate        = accept_len / breakeven_accept_length
                            = (gen_throughput / running_reqs) / baseline_per_request_tps

the second is the EAGLE-3 per-request decode rate over the baseline's at the same
concurrency (there, also the ratio of aggregate throughputs). Both come from the same
numbers, so they agree by construction: speedup > 1 exactly when accept_len > break-even
(floating-point division by a positive number is monotonic and never rounds a quotient
above 1 down to 1).

The break-even itself is `fastverify.speculation.breakeven` (one computation for the live
gauge, tune's report, sweep and rehearse).

(field numbers: ~30 ms verify + draft => ~30 ms cycle at 82 tok/s per request => ~2.46 needed,
while ~2.0 was accepted: speculation lost.)
"""

from __future__ import annotations

from dataclasses import dataclass

from fastverify.speculation.breakeven import breakeven_accept_length

# A reading's running-request count matches a baseline's concurrency when it is that integer.
_INTEGRAL_TOLERANCE = 1e-6


def spec_cycle_seconds(
    running_reqs: float | None,
    accept_len: float | None,
    gen_throughput: float | None,
    itl_seconds: float | None = None,
) -> float | None:
    """Seconds per draft+verify cycle, or None when any input is missing or not positive.
    With `itl_seconds` (decode seconds per token per request, SGLang's inter-token latency
    over the last poll) the cycle is `accept_len x itl_seconds`: decode only, the measure
    bench and sweep use; else the decode loop's `running_reqs x accept_len /
    gen_throughput`, whose throughput also counts prefill time between two log lines."""
    if accept_len and itl_seconds and accept_len > 0 and itl_seconds > 0:
        return accept_len * itl_seconds
    if not running_reqs or not accept_len or not gen_throughput:
        return None
    if running_reqs <= 0 or accept_len <= 0 or gen_throughput <= 0:
        return None
    return running_reqs * accept_len / gen_throughput


def concurrency_of(running_reqs: float | None) -> int | None:
    """The concurrency a reading was taken at: its running-request count when that is a
    positive integer, else None (no baseline can match it)."""
    if running_reqs is None or running_reqs < 1:
        return None
    n = round(running_reqs)
    return n if abs(running_reqs - n) <= _INTEGRAL_TOLERANCE else None


@dataclass(frozen=True)
class Verdict:
    """The matched comparison: at `concurrency` requests, the cycle, the break-even accept
    length and the speedup estimate (speedup > 1 iff accept_length > breakeven)."""

    concurrency: int
    accept_length: float
    cycle_seconds: float
    breakeven_accept_length: float
    speedup_estimate: float

    @property
    def pays(self) -> bool:
        return self.speedup_estimate > 1.0


def verdict(
    running_reqs: float | None,
    accept_len: float | None,
    gen_throughput: float | None,
    baselines: dict[int, float],
    itl_seconds: float | None = None,
) -> Verdict | None:
    """The verdict of one reading against the baseline of its concurrency.

    `baselines`: concurrency -> baseline tokens/s per request (of the same profile). None
    when the reading is incomplete, not taken at an integral concurrency, or no baseline
    was measured at that concurrency."""
    cycle = spec_cycle_seconds(running_reqs, accept_len, gen_throughput, itl_seconds)
    n = concurrency_of(running_reqs)
    if cycle is None or n is None or accept_len is None:
        return None
    rate = baselines.get(n)
    if rate is None or not rate > 0:
        return None
    breakeven = breakeven_accept_length(cycle, rate)
    if not breakeven > 0:
        return None
    return Verdict(n, float(accept_len), cycle, breakeven, float(accept_len) / breakeven)
