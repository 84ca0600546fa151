"""SGLang's own time stamps of one request, in its streamed `/generate` meta_info, and the
split of a client's first-token time they give.

With `--enable-metrics` (fastverify starts SGLang with it) the tokenizer manager puts the
scheduler's stamps of the request in every chunk's meta_info, the time it yielded the first
chunk in that chunk, and its own stamps in the finished one (0.5.17
`srt/managers/tokenizer_manager.py` `_handle_batch_output` / `_wait_one_response`,
`srt/observability/req_time_stats.py` `convert_to_output_meta_info`). Each is wall-clock
seconds (`time.time()` scale: SGLang adds its realtime-monotonic difference), so a client on
the same host places them on its own timeline.

From the client's send to its first token, in order:
- `intake`: send -> the tokenizer manager took the request in (`request_received_ts`: on
  `/generate` its `generate_request` start; the HTTP parse and routing are before it);
- `tokenize`: -> the tokenizer manager handed it to the scheduler (`api_server_dispatch_finish_ts`);
- `queue`: -> the scheduler put it in a prefill batch (`forward_entry_time`);
- `prefill`: -> that forward ended (`prefill_finished_time`);
- `output`: -> the tokenizer manager yielded the first chunk (`response_sent_to_client_ts`);
- `delivery`: -> the client parsed it (the HTTP stream and the client's own loop).
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any

# meta_info key -> the stage that ends at it, in the order above
STAMPS: dict[str, str] = {
    "request_received_ts": "intake",
    "api_server_dispatch_finish_ts": "tokenize",
    "forward_entry_time": "queue",
    "prefill_finished_time": "prefill",
    "response_sent_to_client_ts": "output",
}
DELIVERY = "delivery"
STAGES: tuple[str, ...] = (*STAMPS.values(), DELIVERY)
# Two processes convert their monotonic clock to wall clock with differences taken at their
# own start, and the client with another: stamps this far out of order are read as equal.
CLOCK_SLACK_S = 0.002


def stamps_of(meta: Mapping[str, Any]) -> dict[str, float]:
    """The stamps one chunk's meta_info carries (the rest of its keys left out)."""
    return {k: float(v) for k in STAMPS if isinstance(v := meta.get(k), int | float) and v > 0}


def first_token_split(
    sent: float, first_token: float, stamps: Mapping[str, float]
) -> dict[str, float] | None:
    """Seconds spent in each stage from `sent` to `first_token` (wall clock, as the stamps),
    or None when a stamp is missing or the stamps are out of order (another host's clock, a
    server without --enable-metrics)."""
    if any(k not in stamps for k in STAMPS):
        return None
    edges = [sent, *(stamps[k] for k in STAMPS), first_token]
    gaps = [b - a for a, b in pairwise(edges)]
    if min(gaps) < -CLOCK_SLACK_S:
        return None
    return {stage: max(0.0, gap) for stage, gap in zip(STAGES, gaps, strict=True)}
