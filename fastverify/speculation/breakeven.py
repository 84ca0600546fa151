"""The break-even accept length: one definition, one computation, for every figure that
reports it (tune's trial and report, sweep's EAGLE-3 rows, rehearse, and the exporter's live
`fastverify_spec_breakeven_accept_length`).

Definition: the accept length (tokens per draft+verify cycle per request, bonus token
included) at which speculative decoding yields exactly the baseline's decode tokens per
second per request, at the same concurrency:

    breakeven = cycle_seconds x baseline_tokens_per_second_per_request

where `cycle_seconds` is one draft+verify cycle as one request sees it. Speculation pays
when the real accept length is above it, by the ratio `accept_length / breakeven`. Both
inputs are per request at one concurrency: a break-even is for the concurrency its two
rates were measured at, and is never set against a baseline of another one.
"""

from __future__ import annotations


def cycle_seconds(accept_length: float, spec_tokens_per_second_per_request: float) -> float:
    """One draft+verify cycle per request: `accept_length` tokens at the speculative rate."""
    if accept_length <= 0 or spec_tokens_per_second_per_request <= 0:
        raise ValueError("the accept length and the speculative rate must be positive")
    return accept_length / spec_tokens_per_second_per_request


def breakeven_accept_length(cycle_s: float, baseline_tokens_per_second_per_request: float) -> float:
    """The accept length at which a `cycle_s` cycle matches the baseline's rate."""
    if cycle_s <= 0 or baseline_tokens_per_second_per_request <= 0:
        raise ValueError("the cycle and the baseline rate must be positive")
    return cycle_s * baseline_tokens_per_second_per_request
