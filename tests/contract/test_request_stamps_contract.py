"""SGLang's per-request time stamps (fastverify.sglang.request_stamps) against the real wheels
of 0.5.17 (the GPU runs' release) and the pinned one: each key is written into a meta_info
dict by the file that owns it, as wall-clock time, and the scheduler's stamps reach the
streamed meta_info under --enable-metrics."""

from __future__ import annotations

import re

import pytest

from fastverify.sglang import request_stamps
from fastverify.sglang.versions import PINNED_VERSION
from tests.support.contract import wheel_sources

STATS = "sglang/srt/observability/req_time_stats.py"
TOKENIZER = "sglang/srt/managers/tokenizer_manager.py"


@pytest.mark.parametrize("version", ["0.5.17", PINNED_VERSION])
def test_each_stamp_is_written_as_wall_clock_into_meta_info(version: str) -> None:
    src = wheel_sources(version)
    text = src[STATS] + src[TOKENIZER]
    for key in request_stamps.STAMPS:
        # meta_info["key"] = convert_time_to_realtime(...) or a getter that returns one
        m = re.search(r'\[\s*"' + re.escape(key) + r'"\s*\]\s*=\s*([^\n]+(?:\n[^\n]+)?)', text)
        assert m is not None, f"{version}: no meta_info[{key!r}] written"
        assert re.search(r"convert_time_to_realtime|_realtime\(\)", m.group(1)), (version, key)
    # the scheduler's stamps ride on every chunk, but only with --enable-metrics
    tok = src[TOKENIZER]
    assert re.search(
        r"if self\.enable_metrics:\s+if recv_obj\.time_stats is not None:\s+"
        r"scheduler_time_stats = recv_obj\.time_stats\[i\]\s+"
        r"meta_info\.update\(scheduler_time_stats\.convert_to_output_meta_info\(\)\)",
        tok,
    ), version
    # the first chunk's send time is set where the tokenizer manager yields a streamed chunk
    assert tok.count('"response_sent_to_client_ts"') >= 2, version
