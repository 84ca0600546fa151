"""bench's arithmetic on hand-built request records, and the sglang.bench_serving mapping."""

from __future__ import annotations

import pytest

from fastverify.experiments.bench import load as bench
from fastverify.experiments.bench.load import BenchConfig, RequestRecord
from fastverify.sglang import request_stamps


def _rec(start: float, chunks: list[tuple[float, int]], done: bool = True) -> RequestRecord:
    r = RequestRecord(start=start)
    total = 0
    for t, n in chunks:
        r.chunk_times.append(t)
        r.chunk_tokens.append(n)
        total += n
    r.tokens = total
    r.ttft = chunks[0][0] - start
    if done:
        r.latency = chunks[-1][0] - start
        r.completed = True
    return r


def test_summarize_hand_computed() -> None:
    cfg = BenchConfig(url="http://x", duration=2.0)
    # Request A: starts at 0.0, first token at 0.1, then 2 tokens at 0.3 (spec step),
    # then 1 token at 0.4. Request B: starts 0.5, tokens at 0.6, 0.7; a chunk at 2.5 lies
    # after the window end (2.0) and does not count.
    a = _rec(0.0, [(0.1, 1), (0.3, 2), (0.4, 1)])
    b = _rec(0.5, [(0.6, 1), (0.7, 1), (2.5, 1)], done=False)
    b.cancelled = True
    res = bench.summarize([a, b], 0.0, 2.0, cfg, accept_length=None)
    assert res.output_tokens == 4 + 2
    assert res.output_tokens_per_second == pytest.approx(3.0)
    assert res.completed == 1 and res.failed == 0
    assert res.request_rate == pytest.approx(0.5)
    # TTFTs 0.1 and 0.1 s
    assert res.ttft_ms["p50"] == pytest.approx(100.0)
    # ITLs: A: (0.2/2) x2, 0.1; B: 0.1, (1.8/1): per-token values 0.1,0.1,0.1,0.1,1.8
    assert res.itl_ms["p50"] == pytest.approx(100.0)
    assert res.itl_ms["mean"] == pytest.approx((0.1 * 4 + 1.8) / 5 * 1000)
    # Per-request decode rate: A only: (4 - 1) / (0.4 - 0.1) = 10 tok/s
    assert res.per_request_tokens_per_second == pytest.approx(10.0)


def test_decode_rate_leaves_out_the_gaps_that_hold_another_requests_prefill() -> None:
    cfg = BenchConfig(url="http://x", duration=5.0)
    # A decodes a token every 0.1 s, except one gap of 0.5 s during which B's prompt was
    # prefilled (B's first token lands inside it, at 0.55).
    a = _rec(0.0, [(0.1, 1), (0.2, 1), (0.3, 1), (0.8, 1), (0.9, 1)])
    b = _rec(0.3, [(0.55, 1), (0.95, 2), (1.05, 1)])
    res = bench.summarize([a, b], 0.0, 5.0, cfg, accept_length=None)
    # per-request rates keep the prefill: A (5 - 1) / 0.8 = 5, B (4 - 1) / 0.5 = 6
    assert res.per_request_tokens_per_second == pytest.approx(5.5)
    # decode alone: A's three gaps of 0.1 s, 1 token each (its 0.3-0.8 gap held B's first
    # token), B's 0.4 s (2 tokens) and 0.1 s (1)
    assert res.gaps_with_prefill == 1
    assert res.decode_tokens_per_second == pytest.approx((3 + 3) / (0.3 + 0.5))


def test_decode_rate_of_a_lone_request_is_its_own_rate() -> None:
    a = _rec(0.0, [(0.2, 1), (0.3, 3), (0.4, 3)])
    res = bench.summarize([a], 0.0, 1.0, BenchConfig(url="http://x"), accept_length=None)
    assert res.gaps_with_prefill == 0
    assert res.decode_tokens_per_second == pytest.approx(6 / 0.2)


def test_summarize_all_failed_raises() -> None:
    r = RequestRecord(start=0.0, error="HTTP 500: boom")
    with pytest.raises(bench.BenchError, match="HTTP 500"):
        bench.summarize([r], 0.0, 1.0, BenchConfig(url="http://x"), None)


def test_synthetic_prompts_are_reproducible_and_never_shared() -> None:
    assert bench.synthetic_prompt(3, 16, seed=7, salt=1) == bench.synthetic_prompt(3, 16, 7, 1)
    assert bench.synthetic_prompt(3, 16, 7, 1) != bench.synthetic_prompt(3, 16, 8, 1)
    assert len(bench.synthetic_prompt(0, 16, seed=0)) == 16
    cfg = BenchConfig(url="http://x", concurrency=4, input_len=32)
    one, two = bench.Prompts(cfg), bench.Prompts(cfg)
    window = [one(i)["input_ids"] for i in range(200)]
    warm = [one.warmup(j)["input_ids"] for j in range(4)]
    # no two requests of a run share a first token block (the radix cache's unit), and
    # another run of the same config shares none either
    firsts = [tuple(p[:16]) for p in [*window, *warm, two(0)["input_ids"]]]
    assert len(set(firsts)) == len(firsts)


def test_accept_length_from_server_info_shapes() -> None:
    new = {"internal_states": [{"avg_spec_accept_length": 2.31, "last_gen_throughput": 80}]}
    assert bench.accept_length_from_server_info(new) == 2.31
    assert bench.accept_length_from_server_info({"avg_spec_accept_length": 1.9}) == 1.9
    assert bench.accept_length_from_server_info({"internal_states": [{}]}) is None


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        BenchConfig(duration=None, requests=None).validate()
    with pytest.raises(ValueError):
        BenchConfig(concurrency=0).validate()


def test_sglang_bench_argv_uses_upstream_flags() -> None:
    # Flag names as defined by the argparse parser of python/sglang/bench_serving.py.
    cfg = BenchConfig(url="http://h:1/", concurrency=4, duration=None, requests=100,
                      input_len=64, output_len=32, seed=3, warmup=2)  # fmt: skip
    argv = bench.sglang_bench_argv(cfg, "/tmp/o.jsonl", python="py")
    assert argv[:3] == ["py", "-m", "sglang.bench_serving"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert pairs["--backend"] == "sglang"
    assert pairs["--base-url"] == "http://h:1"
    assert pairs["--dataset-name"] == "random"
    assert pairs["--random-input-len"] == "64" and pairs["--random-output-len"] == "32"
    assert pairs["--num-prompts"] == "100" and pairs["--max-concurrency"] == "4"
    assert pairs["--output-file"] == "/tmp/o.jsonl" and pairs["--warmup-requests"] == "2"
    with pytest.raises(ValueError, match="--requests"):
        bench.sglang_bench_argv(BenchConfig(duration=5.0), "/tmp/o.jsonl")


def test_result_from_sglang_jsonl_maps_keys() -> None:
    # Keys of the result dict bench_serving appends to --output-file.
    line = {
        "backend": "sglang", "duration": 12.5, "completed": 98, "total_input_tokens": 6272,
        "total_output_tokens": 3136, "request_throughput": 7.84, "output_throughput": 250.9,
        "mean_ttft_ms": 40.0, "median_ttft_ms": 35.0, "p99_ttft_ms": 90.0,
        "mean_tpot_ms": 12.5, "mean_itl_ms": 12.0, "median_itl_ms": 11.0, "p95_itl_ms": 20.0,
        "p99_itl_ms": 30.0, "accept_length": 2.4,
    }  # fmt: skip
    res = bench.result_from_sglang_jsonl(line, BenchConfig(url="http://h", requests=100))
    assert res.source == "sglang.bench_serving"
    assert res.output_tokens_per_second == 250.9 and res.request_rate == 7.84
    assert (res.completed, res.failed) == (98, 2)
    assert res.per_request_tokens_per_second == pytest.approx(80.0)  # 1000 / 12.5 ms
    assert res.ttft_ms == {"mean": 40.0, "p50": 35.0, "p90": None, "p99": 90.0}
    assert res.itl_ms["p99"] == 30.0 and res.accept_length == 2.4


def test_a_ctrl_c_racing_a_timeout_ends_the_load_as_ctrl_c(monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncio.run raises KeyboardInterrupt for Ctrl-C only when its main task was cancelled
    once; cancelled again (a timeout racing the Ctrl-C) it raises CancelledError, which a
    sweep let through as a traceback and exit 1. run_bench says Ctrl-C either way (a real
    SIGINT to this process, Python's own handler installed as in a terminal)."""
    import asyncio
    import signal

    async def ctrl_c_then_cancelled_again(*_args: object) -> None:
        signal.raise_signal(signal.SIGINT)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(1)

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(asyncio.CancelledError):  # what asyncio itself raises
            asyncio.run(ctrl_c_then_cancelled_again())
        monkeypatch.setattr(bench, "_measure", ctrl_c_then_cancelled_again)
        with pytest.raises(KeyboardInterrupt):
            bench.run_bench(BenchConfig(url="http://127.0.0.1:9", duration=1.0))
    finally:
        signal.signal(signal.SIGINT, before)


def test_split_orders_the_stages_and_refuses_what_cannot_be_placed() -> None:
    edges = (10.001, 10.002, 10.004, 10.010, 10.030, 10.031)
    stamps = dict(zip(request_stamps.STAMPS, edges, strict=True))
    split = request_stamps.first_token_split(10.0, 10.033, stamps)
    assert split is not None and list(split) == list(request_stamps.STAGES)
    assert split["handoff"] == pytest.approx(0.002) and split["queue"] == pytest.approx(0.006)
    assert split["prefill"] == pytest.approx(0.020)
    assert sum(split.values()) == pytest.approx(0.033)
    assert (
        request_stamps.first_token_split(10.0, 10.033, {**stamps, "forward_entry_time": 9.0})
        is None
    )
    missing = {k: v for k, v in stamps.items() if k != "request_received_ts"}
    assert request_stamps.first_token_split(10.0, 10.033, missing) is None


def test_the_schedulers_queue_entry_is_rebuilt_from_its_queue_time() -> None:
    meta = {"forward_entry_time": 10.010, "queue_time": 0.006, "prefill_finished_time": 10.030,
            "request_finished_ts": 11.5, "spec_accept_length": 3.0}  # fmt: skip
    stamps = request_stamps.stamps_of(meta)
    assert stamps[request_stamps.WAIT_QUEUE_ENTRY] == pytest.approx(10.004)
    assert stamps["request_finished_ts"] == 11.5 and "spec_accept_length" not in stamps
    assert "queue_time" not in stamps  # seconds, not a stamp: the timeline holds stamps alone
    # without its forward entry (or with no queue time) there is nothing to rebuild it from
    assert request_stamps.WAIT_QUEUE_ENTRY not in request_stamps.stamps_of({"queue_time": 0.006})
    assert request_stamps.WAIT_QUEUE_ENTRY not in request_stamps.stamps_of(
        {"forward_entry_time": 10.010}
    )


def test_prompts_that_entered_one_forward_are_counted_as_one() -> None:
    f = request_stamps.FORWARD_ENTRY
    reqs = [
        {f: 10.0, "prefill_finished_time": 10.011},
        {f: 10.0 + 1e-6, "prefill_finished_time": 10.012},  # placed by another offset
        {f: 10.030, "prefill_finished_time": 10.050},
        {f: 10.030, "prefill_finished_time": 10.051},
        {f: 10.030, "prefill_finished_time": 10.052},
        {"request_received_ts": 9.9},  # no forward stamps: left out
    ]
    forwards = request_stamps.prefill_forwards(reversed(reqs))
    assert [(fw.entry, fw.prompts) for fw in forwards] == [(10.0, 2), (10.030, 3)]
    assert forwards[0].seconds == pytest.approx(0.012)
    assert forwards[1].seconds == pytest.approx(0.022)
    assert request_stamps.prefill_forwards([]) == []
