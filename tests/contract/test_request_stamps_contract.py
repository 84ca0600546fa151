"""SGLang's per-request time stamps (fastverify.sglang.request_stamps) against the real wheels
of 0.5.17 (the GPU runs' release) and the pinned one: each key is written into a meta_info
dict by the file that owns it, as wall-clock time, the scheduler's stamps reach the
streamed meta_info under --enable-metrics, and its queue time runs from the waiting queue
the scheduler puts a request in to the request's first forward."""

from __future__ import annotations

import re

import pytest

from fastverify.sglang import request_stamps
from fastverify.sglang.versions import PINNED_VERSION
from tests.support.contract import wheel_sources

STATS = "sglang/srt/observability/req_time_stats.py"
SCHEDULER = "sglang/srt/managers/scheduler.py"
TOKENIZER = "sglang/srt/managers/tokenizer_manager.py"


@pytest.mark.parametrize("version", ["0.5.17", PINNED_VERSION])
def test_each_stamp_is_written_as_wall_clock_into_meta_info(version: str) -> None:
    src = wheel_sources(version)
    text = src[STATS] + src[TOKENIZER]
    for key in request_stamps.META_STAMPS:
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


@pytest.mark.parametrize("version", ["0.5.17", PINNED_VERSION])
def test_the_queue_time_runs_from_the_waiting_queue_to_the_first_forward(version: str) -> None:
    src = wheel_sources(version)
    stats = src[STATS]
    # sent beside the scheduler's stamps, as its queueing time
    assert re.search(
        r'"' + request_stamps.QUEUE_TIME + r'":\s*self\.get_queueing_time\(\)', stats
    ), version
    getter = re.search(r"def get_queueing_time\(self\)[^:]*:\s+return ([^\n]+)", stats)
    assert getter is not None, version
    # 0.5.17: the two stamps' difference; later: a sum, to which the first forward's entry
    # adds its wait since the request entered the waiting queue
    since_entry = r"ts - self\.wait_queue_entry_time"
    entry = re.search(r"def set_forward_entry_time\(self[^)]*\):(.+?)\n    def ", stats, re.S)
    assert entry is not None, version
    assert getter.group(1).strip() == "self.forward_entry_time - self.wait_queue_entry_time" or (
        getter.group(1).strip() == "self.queue_duration_s"
        and re.search(r"self\.queue_duration_s \+= " + since_entry, entry.group(1))
    ), (version, getter.group(1))
    assert "self.forward_entry_time = ts" in entry.group(1), version
    # the waiting-queue entry is stamped where the scheduler appends to its waiting queue
    assert re.search(
        r"self\.waiting_queue\.append\(req\)\s+req\.time_stats\.set_wait_queue_entry_time\(\)",
        src[SCHEDULER],
    ), version


@pytest.mark.parametrize("version", ["0.5.17", PINNED_VERSION])
def test_a_prefill_batch_enters_its_forward_at_one_stamp(version: str) -> None:
    # request_stamps.prefill_forwards groups prompts by an equal forward_entry_time
    src = wheel_sources(version)
    assert 'set_time_batch(can_run_list, "set_forward_entry_time")' in src[SCHEDULER], version
    body = re.search(r"def set_time_batch\(.*?\n(?=def |\Z)", src[STATS], re.S)
    assert body is not None, version
    # one clock read before the loop over the batch's requests, each set with it
    assert re.search(
        r"ts = time\.perf_counter\(\)\s+for req in reqs:\s+method = getattr\(req\.time_stats, "
        r"set_func\)\s+if attrs is None:\s+method\(ts\)",
        body.group(0),
    ), version


@pytest.mark.parametrize("version", ["0.5.17", PINNED_VERSION])
def test_the_scheduler_reads_its_socket_once_an_iteration_before_choosing_a_batch(
    version: str,
) -> None:
    # the `handoff` stage: a request sent while a forward runs is read at the next
    # iteration (the sim's scheduler follows: fastverify/sim/scheduler.py `queued_at`)
    src = wheel_sources(version)[SCHEDULER]

    def body(name: str, args: str = "self") -> str:
        m = re.search(rf"def {name}\({args}[^)]*\)[^:]*:(.+?)\n    def ", src, re.S)
        assert m is not None, (version, name)
        return m.group(1)

    # 0.5.17 receives and processes inline; later releases through one ingest_requests()
    receive = ("self.request_receiver.recv_requests(", "self.process_input_requests(")
    if "def ingest_requests(" in src:
        assert all(call in body("ingest_requests") for call in receive), version
    for loop in ("event_loop_normal", "event_loop_overlap"):
        text = body(loop)
        first = min((text.find(c) for c in (*receive, "self.ingest_requests()") if c in text),
                    default=-1)  # fmt: skip
        batch, run = text.find("self.get_next_batch_to_run("), text.find("self.run_batch(")
        assert -1 < first < batch < run, (version, loop, first, batch, run)
