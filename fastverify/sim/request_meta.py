"""A finished request's `meta_info` as SGLang 0.5.23 returns it, and its per-request metrics
file (`--export-metrics-to-file --export-metrics-to-file-dir DIR`).

`tokenizer_manager.py` (`_calculate_spec_decoding_metrics`, in the tokenizer process, whose
spec config adaptive never overrides): `spec_verify_ct`, `spec_accept_length` =
completion_tokens / verify_ct (the prefill's token included), `spec_accept_rate` = correct
drafts / (verify_ct x (the launch num_draft_tokens - 1)), `spec_num_correct_drafts`,
`spec_num_proposed_drafts`, and on a finished request `spec_correct_drafts_histogram`.

`observability/request_metrics_exporter.py` (`FileRequestMetricsExporter`): one JSON object
per finished request, `{"request_parameters": json.dumps(params), **meta_info}`, appended to
`DIR/sglang-request-metrics-YYYYMMDD_HH.log` (local time, one file per hour); health-check
requests are not written. The sim's parameters hold the rid, the sampling parameters and
the stream flag (never the prompt). The record is the finished output's meta_info, so with
`--enable-metrics` it holds the stamps below too.

With `--enable-metrics` (`stamps`), the request's time stamps, wall clock
(`req_time_stats.py` `convert_time_to_realtime`): the scheduler's in every chunk
(`forward_entry_time`, `prefill_finished_time`, `queue_time`: from the loop iteration that
first saw the request, as SGLang's scheduler reads its socket once an iteration), the first
chunk's send (`response_sent_to_client_ts`) once it happened, and on the finished one the
tokenizer manager's (`request_received_ts`, `api_server_dispatch_finish_ts`: the sim has no
tokenizer, so both are the request's arrival; `request_finished_ts`).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from fastverify.sglang import adaptive
from fastverify.sim.scheduler import Request

FILE_FORMAT = "sglang-request-metrics-{hour}.log"


def _wall(t: float) -> float:
    return t + (time.time() - time.perf_counter())


def time_stamps(req: Request) -> dict[str, float]:
    """The stamps SGLang's meta_info carries for `req` so far (module docstring)."""
    meta: dict[str, float] = {}
    if req.forward_entry_at is not None:
        meta["forward_entry_time"] = _wall(req.forward_entry_at)
        meta["queue_time"] = req.forward_entry_at - (req.queued_at or req.created)
    if req.first_token_at is not None:
        meta["prefill_finished_time"] = _wall(req.first_token_at)
    if req.first_sent_at is not None:
        meta["response_sent_to_client_ts"] = _wall(req.first_sent_at)
    if req.done.is_set():
        meta["request_received_ts"] = meta["api_server_dispatch_finish_ts"] = _wall(req.created)
        if req.finished_at is not None:
            meta["request_finished_ts"] = _wall(req.finished_at)
    return meta


def meta_info(
    req: Request, speculative: bool, launch_draft_tokens: int, stamps: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": {"type": "length", "length": req.max_new_tokens}
        if req.done.is_set()
        else None,
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.generated,
        "cached_tokens": 0,
        "e2e_latency": round(req.e2e_latency, 6),
    }
    if speculative and req.verify_ct:
        correct = sum(j * n for j, n in enumerate(req.histogram))
        proposed = req.verify_ct * max(0, launch_draft_tokens - 1)
        if proposed:
            meta["spec_accept_rate"] = correct / proposed
            meta["spec_accept_length"] = req.generated / req.verify_ct
            meta["spec_num_correct_drafts"] = correct
            meta["spec_num_proposed_drafts"] = proposed
        meta[adaptive.VERIFY_CT_KEY] = req.verify_ct
        if req.done.is_set() and req.histogram:  # SGLang: finished requests only
            meta[adaptive.HISTOGRAM_KEY] = list(req.histogram)
    if stamps:
        meta.update(time_stamps(req))
    return meta


class MetricsFile:
    """`FileRequestMetricsExporter`: appends one record per finished request."""

    def __init__(
        self, directory: str | Path, speculative: bool, launch_draft_tokens: int, stamps: bool
    ):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.speculative = speculative
        self.draft_tokens = launch_draft_tokens
        self.stamps = stamps  # --enable-metrics: the record is the finished output's meta_info
        self._lock = threading.Lock()

    def write(self, req: Request) -> None:
        meta = meta_info(req, self.speculative, self.draft_tokens, self.stamps)
        params = {"rid": req.rid, "stream": req.stream, "sampling_params": dict(req.sampling)}
        record = {"request_parameters": json.dumps(params), **meta}
        path = self.dir / FILE_FORMAT.format(hour=datetime.now().strftime("%Y%m%d_%H"))
        with self._lock, open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
