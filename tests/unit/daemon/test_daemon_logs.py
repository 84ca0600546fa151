"""Log tail, progress parsing and secret masking."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fastverify.daemon.logs import LogRing, LogTail, mask, parse_progress, parse_throughput
from fastverify.redact import is_secret_name, mask_env, secret_values


def test_progress_from_sglang_lines() -> None:
    assert parse_progress("[2025-06-13 10:30:17 TP0] Load weight begin. avail mem=78.52 GB")[
        0:2
    ] == (
        "weights",
        5.0,
    )
    shards = "Loading safetensors checkpoint shards:  50% Completed | 32/64 [00:10<00:10, 3.2it/s]"
    assert parse_progress(shards)[:2] == ("weights", 42.5)
    assert parse_progress(
        "[.. TP0] Capture cuda graph begin. This can take up to several minutes."
    )[0] == ("cuda_graph")
    assert parse_progress("[.. TP0] Capture cuda graph end. Time elapsed: 2.13 s.")[1] == 95.0
    assert parse_progress("[..] The server is fired up and ready to roll!")[:2] == ("ready", 100.0)
    assert parse_progress("Prefill batch, #new-seq: 1") is None
    assert parse_progress("[2025-06-13 10:30:17 TP3] Load weight begin. avail mem=78.52 GB") is None


def test_throughput() -> None:
    line = (
        "[2025-06-13 10:30:17 TP0] Decode batch, #running-req: 1, #token: 148, token usage: 0.00, "
        "accept len: 2.01, accept rate: 0.34, cuda graph: True, gen throughput (token/s): 82.31, "
        "#queue-req: 0"
    )
    assert parse_throughput(line) == 82.31


def test_secrets() -> None:
    for name in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "OPENAI_API_KEY",
        "DB_PASSWORD",
        "MY_SECRET",
    ):
        assert is_secret_name(name), name
    for name in ("PATH", "NCCL_ALGO", "KEYBOARD", "CUDA_VISIBLE_DEVICES"):
        assert not is_secret_name(name), name
    env = {"HF_TOKEN": "hf_abcdefgh", "PATH": "/bin", "X_KEY": "k"}
    assert mask_env(env) == {"HF_TOKEN": "***", "PATH": "/bin", "X_KEY": "***"}
    assert mask("token=hf_abcdefgh ok", secret_values(env)) == "token=*** ok"


def test_tail_follows_a_growing_file_masks_and_drains_on_stop(tmp_path: Path) -> None:
    p = tmp_path / "engine.log"
    got: list[str] = []
    tail = LogTail(p, got.append, secrets=["hf_secretvalue"], interval=0.01).start()
    with open(p, "ab", buffering=0) as fh:  # created after the tail started
        fh.write(b"line one\nhalf ")
        time.sleep(0.1)
        assert got == ["line one"]
        fh.write(b"line with hf_secretvalue\nprogress 1\rprogress 2\n")
        fh.write(b"no newline at the end")
    tail.stop()
    assert got == ["line one", "half line with ***", "progress 2", "no newline at the end"]


def test_caught_up_returns_once_what_was_written_is_delivered(tmp_path: Path) -> None:
    p = tmp_path / "engine.log"
    got: list[str] = []
    tail = LogTail(p, got.append, interval=0.2).start()
    with open(p, "ab", buffering=0) as fh:
        for n in range(3):  # each time: every line written before the call, none missing
            fh.write(f"ready {n}\n".encode())
            assert tail.caught_up(30), got
            assert got == [f"ready {k}" for k in range(n + 1)]
    tail.stop()
    assert tail.caught_up(0)  # a stopped tail has nothing left to read


def test_ring_followers_see_new_lines() -> None:
    ring = LogRing(size=3)
    for i in range(5):
        ring.add(f"l{i}")
    assert [e["line"] for e in ring.tail(10)] == ["l2", "l3", "l4"]
    seq = ring.seq
    threading.Timer(0.05, ring.add, args=("late", "daemon")).start()
    new = ring.since(seq, timeout=2)
    assert [(e["line"], e["source"]) for e in new] == [("late", "daemon")]


def test_draft_token_count_is_not_a_secret() -> None:
    from fastverify.redact import mask_argv

    argv = ["python", "--speculative-num-draft-tokens", "4", "--hf-token", "hf_abcdef"]
    assert mask_argv(argv) == ["python", "--speculative-num-draft-tokens", "4", "--hf-token", "***"]
