"""Log parsing on real NCCL logs (H200 fixtures), both generations of SGLang decode lines,
the sim engine's own lines, and the `fastverifyctl logs parse` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify.sglang.loglines import iter_records, parse_line

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-2.28.9-h200-1rank"

NEW = (
    "[2025-06-13 10:30:17 TP0] Decode batch, #running-req: 1, #token: 148, token usage: 0.00, "
    "accept len: 2.01, accept rate: 0.34, cuda graph: True, gen throughput (token/s): 82.31, "
    "#queue-req: 0"
)
OLD_SPEC = (
    "[2025-06-13 10:30:17 TP0] Decode batch. #running-req: 32, #token: 9120, "
    "token usage: 0.05, accept len: 2.46, cuda graph: False, gen throughput (token/s): 1234.50, "
    "#queue-req: 3, "
)
OLD_PLAIN = (
    "[2025-01-02 03:04:05] Decode batch. #running-req: 4, #token: 512, token usage: 0.01, "
    "gen throughput (token/s): 300.00, #queue-req: 0, "
)
SUFFIX = (
    "[2026-03-01 12:00:00 DP0 TP0 EP0] Decode batch, #running-req: 8, #token: 2048, "
    "token usage: 0.12, accept len: 3.10, accept rate: 0.70, cuda graph: True, "
    "gen throughput (token/s): 410.25, #queue-req: 1, fwd occupancy: 97.50%"
)


def test_new_decode_line() -> None:
    rec = parse_line(NEW)
    assert rec == {
        "kind": "decode", "running_reqs": 1, "token_count": 148, "token_usage": 0.0,
        "accept_len": 2.01, "accept_rate": 0.34, "cuda_graph": True, "gen_throughput": 82.31,
        "queue_reqs": 0, "time": "2025-06-13 10:30:17", "tp_rank": 0,
    }  # fmt: skip


def test_old_decode_lines_with_trailing_comma() -> None:
    rec = parse_line(OLD_SPEC)
    assert rec["kind"] == "decode"
    assert (rec["running_reqs"], rec["token_count"], rec["queue_reqs"]) == (32, 9120, 3)
    assert rec["accept_len"] == 2.46 and rec["accept_rate"] is None
    assert rec["cuda_graph"] is False and rec["gen_throughput"] == 1234.5
    assert "extra" not in rec  # the trailing ", " leaves nothing behind
    plain = parse_line(OLD_PLAIN)
    assert plain["accept_len"] is None and plain["cuda_graph"] is None
    assert plain["gen_throughput"] == 300.0 and plain["running_reqs"] == 4
    assert "tp_rank" not in plain


def test_unknown_suffix_kept_and_rank_found_among_other_ranks() -> None:
    rec = parse_line(SUFFIX)
    assert rec["extra"] == {"fwd occupancy": "97.50%"}
    assert rec["tp_rank"] == 0 and rec["accept_len"] == 3.1 and rec["queue_reqs"] == 1


def test_prefill_lines() -> None:
    rec = parse_line(
        "[2025-06-13 10:30:16 TP0] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0"
    )
    assert rec["kind"] == "prefill"
    assert (rec["new_seqs"], rec["new_tokens"], rec["cached_tokens"]) == (1, 6, 0)
    mixed = parse_line(
        "Prefill batch(mixed #running-req: 3). #new-seq: 2, #new-token: 64, #cached-token: 8, "
        "cache hit rate: 11.11%, #queue-req: 5"
    )
    assert mixed["mixed_running_reqs"] == 3 and mixed["cache_hit_rate"] == pytest.approx(11.11)
    newest = parse_line(
        "Prefill batch, #new-seq: 1, #new-token: 128, #cached-token: 0, token usage: 0.01, "
        "#running-req: 0, #queue-req: 0, input throughput (token/s): 2048.00"
    )
    assert newest["input_throughput"] == 2048.0


def test_ready_and_progress_lines() -> None:
    assert parse_line("[2025-06-13 10:30:15] The server is fired up and ready to roll!")[
        "kind"
    ] == ("ready")
    load = parse_line(
        "Loading safetensors checkpoint shards:  50% Completed | 32/64 [00:10<00:10,  3.20it/s]"
    )
    assert load == {"kind": "load_progress", "percent": 50, "current": 32, "total": 64}
    cap = parse_line(
        "Capturing batches (bs=4 avail_mem=70.12 GB):  75%|███████▌  | 3/4 [00:01<00:00,  2.1it/s]"
    )
    assert cap == {"kind": "capture_progress", "bs": 4, "percent": 75, "current": 3, "total": 4}
    redraw = parse_line(
        "Capturing batches (bs=8 avail_mem=1 GB):  25%|██▌ | 1/4 [00:00<00:01]\r"
        "Capturing batches (bs=4 avail_mem=1 GB):  50%|█████ | 2/4 [00:01<00:01]"
    )
    assert (redraw["bs"], redraw["current"]) == (4, 2)


def test_nccl_lines() -> None:
    env = parse_line("vm:442:442 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.")
    assert (env["kind"], env["var"], env["value"]) == ("nccl_env", "NCCL_BUFFSIZE", "16777216")
    algo = parse_line("h:1:1 [3] NCCL INFO NCCL_ALGO set by environment to Tree")
    assert (algo["value"], algo["device"], algo["pid"]) == ("Tree", 3, 1)
    tune = parse_line(
        "vm:442:442 [0] NCCL INFO AllReduce: 16384 Bytes -> Algo RING proto LL "
        "channel{Lo..Hi}={0..1}"
    )
    assert tune == {
        "kind": "nccl_tuning", "collective": "AllReduce", "bytes": 16384, "algo": "RING",
        "proto": "LL", "channel_lo": 0, "channel_hi": 1, "host": "vm", "pid": 442, "device": 0,
    }  # fmt: skip
    warn = parse_line("vm:442:470 [0] NCCL WARN Cuda failure 'out of memory'")
    assert warn["kind"] == "nccl_warn" and warn["message"] == "Cuda failure 'out of memory'"
    coll = "vm:479:479 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f recvbuff 0x7f count 21504"
    assert parse_line(coll) is None  # host-side COLL lines never count all-reduces
    assert parse_line("vm:479:479 [0] NCCL INFO Channel 00/64 : 0") is None
    assert parse_line('INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK') is None


def test_real_ring_ll_log() -> None:
    lines = (FIX / "nccl-info-ring-ll.log").read_text().splitlines()
    recs = list(iter_records(lines))
    env = {r["var"]: r["value"] for r in recs if r["kind"] == "nccl_env"}
    # the profile in the fixture README: P2P_LEVEL=SYS, MAX_NCHANNELS=16, BUFFSIZE, NTHREADS
    assert env == {
        "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16", "NCCL_BUFFSIZE": "16777216",
        "NCCL_NTHREADS": "512",
    }  # fmt: skip
    versions = [r for r in recs if r["kind"] == "nccl_version"]
    assert [v["version"] for v in versions] == ["2.28.9+cuda13.0"]
    assert versions[0]["line"] == 3


def test_real_coll_log_yields_no_allreduce_records() -> None:
    lines = (FIX / "nccl-info-tree-ll-coll.log").read_text().splitlines()
    recs = list(iter_records(lines))
    assert [r["kind"] for r in recs if r["kind"] != "nccl_tuner"] == ["nccl_version"]
    # the real line "TUNER/Plugin: Could not find: libnccl-tuner.so" (no plugin configured)
    assert {(r["event"], r["path"]) for r in recs if r["kind"] == "nccl_tuner"} <= {
        ("not_found", "libnccl-tuner.so")
    }


def test_sim_engine_lines_round_trip() -> None:
    sim = pytest.importorskip("fastverify.sim.sglang_logs")
    line = sim.LogWriter().prefix(0) + sim.decode_line(
        running=16, tokens=4096, token_usage=0.25, gen_throughput=512.34, queue=2,
        cuda_graph=True, accept_len=2.5, accept_rate=0.5,
    )  # fmt: skip
    rec = parse_line(line)
    assert (rec["running_reqs"], rec["token_count"], rec["queue_reqs"]) == (16, 4096, 2)
    assert (rec["accept_len"], rec["accept_rate"], rec["gen_throughput"]) == (2.5, 0.5, 512.34)
    assert rec["cuda_graph"] is True and rec["tp_rank"] == 0
    env_lines = sim.nccl_env_lines({"NCCL_BUFFSIZE": "16777216", "NCCL_ALGO": "Ring"})
    recs = [parse_line("h:1:1 [0] NCCL INFO " + x) for x in env_lines]
    assert {r["var"]: r["value"] for r in recs} == {
        "NCCL_BUFFSIZE": "16777216", "NCCL_ALGO": "Ring",
    }  # fmt: skip


def test_logs_parse_command(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join([OLD_PLAIN, NEW, "noise", SUFFIX]) + "\n")
    run = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "logs", "parse", "--json", str(log)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    recs = [json.loads(x) for x in run.stdout.splitlines()]
    assert [r["line"] for r in recs] == [1, 2, 4]
    assert [r["accept_len"] for r in recs] == [None, 2.01, 3.1]
    assert "3 decode" in run.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "logs", "parse", str(tmp_path / "nope.log")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 2 and "no such file" in missing.stderr  # usage, as trace analyze


def test_free_memory_before_the_load_from_a_real_start() -> None:
    # SGLang 0.5.17 on an H100 (model_runner.py: `Load weight begin. avail mem=...`)
    from pathlib import Path

    from fastverify.sglang.loglines import memory_record

    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "sglang-0.5.17-h100-standby"
    found = {}
    for log in sorted(fixture.glob("engine-*.log")):
        recs = [r for line in log.read_text().splitlines() if (r := memory_record(line))]
        found[log.name[-9:-4]] = [r.gib for r in recs if r.what == "free_before_load"]
    assert found == {"1ea64": [62.89], "3c94f": [38.55], "9a385": [47.08], "649a0": [44.06]}
