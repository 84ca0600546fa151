"""Break-even arithmetic of speculative decoding against the baseline of the same profile.

A speculative cycle (draft steps + one verify pass) yields `accept_len` tokens per running
request. With `running_reqs` requests decoding and an aggregate `gen_throughput` (tokens/s):

    cycle_seconds = running_reqs * accept_len / gen_throughput

Baseline decoding yields one token per request per step at `baseline_per_request_tps`, so
speculation breaks even when a cycle yields as many tokens as the baseline would produce in
the same time:

    breakeven_accept_length = cycle_seconds * baseline_per_request_tps

(field numbers: ~30 ms verify + draft => ~30 ms cycle at 82 tok/s per request => ~2.46 needed,
while ~2.0 was accepted: speculation lost). The speedup estimate is the plain ratio of
aggregate throughputs measured under the same profile.
"""

from __future__ import annotations


def spec_cycle_seconds(
    running_reqs: float | None, accept_len: float | None, gen_throughput: float | None
) -> float | None:
    """Seconds per draft+verify cycle, or None when any input is missing or not positive."""
    if not running_reqs or not accept_len or not gen_throughput:
        return None
    if running_reqs <= 0 or accept_len <= 0 or gen_throughput <= 0:
        return None
    return running_reqs * accept_len / gen_throughput


def breakeven_accept_length(cycle_seconds: float, baseline_per_request_tps: float) -> float:
    """Accept length at which speculation produces exactly the baseline's tokens per request."""
    return cycle_seconds * baseline_per_request_tps


def speedup_estimate(spec_tps: float, baseline_tps: float) -> float | None:
    """EAGLE-3 tokens/s over baseline tokens/s (None without a positive baseline)."""
    if baseline_tps <= 0:
        return None
    return spec_tps / baseline_tps
