"""SGLang's own time stamps of one request, in its streamed `/generate` meta_info, and the
split of a client's first-token time they give.

With `--enable-metrics` (fastverify starts SGLang with it) the tokenizer manager puts the
scheduler's stamps of the request in every chunk's meta_info, the time it yielded the first
chunk in that chunk, and its own stamps in the finished one (0.5.17
`srt/managers/tokenizer_manager.py` `_handle_batch_output` / `_wait_one_response`,
`srt/observability/req_time_stats.py` `convert_to_output_meta_info`). Each stamp is
wall-clock seconds (`time.time()` scale: SGLang adds its realtime-monotonic difference), so a
client on the same host places them on its own timeline. The scheduler also sends
`queue_time`, the seconds from its waiting queue to the request's first forward, from which
the time it queued the request is rebuilt (`wait_queue_entry_time`, the scheduler's own
name for it, on the scheduler's clock as `forward_entry_time` is).

From the client's send to its first token, in order:
- `intake`: send -> the tokenizer manager took the request in (`request_received_ts`: on
  `/generate` its `generate_request` start; the HTTP parse and routing are before it);
- `tokenize`: -> the tokenizer manager handed it to the scheduler (`api_server_dispatch_finish_ts`);
- `handoff`: -> the scheduler put it in its waiting queue (`wait_queue_entry_time`: the
  socket between the processes and the scheduler's turn to read it, which a running forward
  holds back);
- `queue`: -> the scheduler put it in a prefill batch (`forward_entry_time`);
- `prefill`: -> that forward ended (`prefill_finished_time`);
- `output`: -> the tokenizer manager yielded the first chunk (`response_sent_to_client_ts`);
- `delivery`: -> the client parsed it (the HTTP stream and the client's own loop).

The finished chunk also carries the tokenizer manager's end of the request
(`request_finished_ts`), kept beside the others for timelines: where a wave of requests
begins, it shows how long the tokenizer manager spent on the wave that ended before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

QUEUE_TIME = "queue_time"  # seconds, not a stamp: waiting queue -> first forward
WAIT_QUEUE_ENTRY = "wait_queue_entry_time"  # rebuilt: forward_entry_time - queue_time
FORWARD_ENTRY = "forward_entry_time"
DISPATCHED = "api_server_dispatch_finish_ts"  # the tokenizer manager handed it on
FINISHED = "request_finished_ts"
# stamp -> the stage of the first token that ends at it, in the order above
STAMPS: dict[str, str] = {
    "request_received_ts": "intake",
    DISPATCHED: "tokenize",
    WAIT_QUEUE_ENTRY: "handoff",
    FORWARD_ENTRY: "queue",
    "prefill_finished_time": "prefill",
    "response_sent_to_client_ts": "output",
}
DELIVERY = "delivery"
STAGES: tuple[str, ...] = (*STAMPS.values(), DELIVERY)
# the stages in front of the scheduler: to the tokenizer manager's hand-off
BEFORE_HANDOFF: tuple[str, ...] = STAGES[: list(STAMPS).index(DISPATCHED) + 1]
# the wall-clock stamps meta_info carries under their own key
META_STAMPS: tuple[str, ...] = (*(k for k in STAMPS if k != WAIT_QUEUE_ENTRY), FINISHED)
# The scheduler stamps a prefill batch's forward entry from one clock read (0.5.17
# `set_time_batch(can_run_list, "set_forward_entry_time")`): requests whose entries lie this
# close went in one forward (a client that places each request's stamps on its own clock
# with that request's wall-clock offset, and rounding, are the only difference).
SAME_FORWARD_S = 5e-5
# Two processes convert their monotonic clock to wall clock with differences taken at their
# own start, and the client with another: stamps this far out of order are read as equal.
CLOCK_SLACK_S = 0.002


def _positive(meta: Mapping[str, Any], key: str) -> float | None:
    v = meta.get(key)
    return float(v) if isinstance(v, int | float) and v > 0 else None


def stamps_of(meta: Mapping[str, Any]) -> dict[str, float]:
    """The stamps one chunk's meta_info carries (the rest of its keys left out), with the
    scheduler's waiting-queue entry rebuilt where its queue time came along."""
    out = {k: v for k in META_STAMPS if (v := _positive(meta, k)) is not None}
    queued = meta.get(QUEUE_TIME)
    if FORWARD_ENTRY in out and isinstance(queued, int | float) and queued >= 0:
        out[WAIT_QUEUE_ENTRY] = out[FORWARD_ENTRY] - float(queued)
    return out


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


@dataclass(frozen=True)
class Forward:
    """One prefill forward of the scheduler, as its requests' stamps show it."""

    entry: float  # forward_entry_time (on the stamps' clock)
    seconds: float  # entry -> the last of its prompts' prefill_finished_time
    prompts: int  # the requests among those given that it took in


def prefill_forwards(requests: Iterable[Mapping[str, float]]) -> list[Forward]:
    """The prefill forwards that took `requests` in (each request's stamps, any one clock),
    in time order; requests without both forward stamps are left out."""
    timed = sorted(
        (r[FORWARD_ENTRY], r["prefill_finished_time"])
        for r in requests
        if FORWARD_ENTRY in r and "prefill_finished_time" in r
    )
    groups: list[list[tuple[float, float]]] = []
    for entry, done in timed:
        if groups and entry - groups[-1][0][0] <= SAME_FORWARD_S:
            groups[-1].append((entry, done))
        else:
            groups.append([(entry, done)])
    return [Forward(g[0][0], max(0.0, max(d for _e, d in g) - g[0][0]), len(g)) for g in groups]
