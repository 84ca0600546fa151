"""The sim engine fails, starts and stops like SGLang: argv errors, a missing model path,
Tree with CUDA graphs, a busy port, both CUDA-graph flag generations, 503 while loading,
and TP workers that never outlive the server (SIGTERM and SIGKILL)."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.support.field import RING_LL
from tests.support.sim import (
    READY,
    SimProcess,
    children_of,
    clean_env,
    decode_lines_rate,
    free_port,
    group_members,
    wait_gone,
)

TREE_LL = dict(RING_LL, NCCL_ALGO="Tree")


def test_unknown_flag_is_an_argparse_error() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fastverify.sim", "--model-path", "m", "--bogus-flag"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=30,
        check=False,
    )
    assert out.returncode == 2
    assert "unrecognized arguments: --bogus-flag" in out.stderr
    assert out.stderr.startswith("usage: ")


def test_missing_absolute_model_path_fails_like_sglang(tmp_path) -> None:
    missing = tmp_path / "models" / "Kimi-K2.5"
    with SimProcess(tp=2, eagle3=False, model=str(missing), load=5.0) as sim:
        rc = sim.wait_exit(15)
        text = sim.text()
    assert rc == 1
    assert f"OSError: Can't load the configuration of '{missing}'" in text
    assert READY not in text and "Load weight begin" not in text  # fails before the load


def test_tree_with_cuda_graphs_fails_during_capture_after_load() -> None:
    load = 0.6
    with SimProcess(tp=4, eagle3=True, load=load, env=TREE_LL) as sim:
        sim.wait_line("Init torch distributed begin.")
        workers = children_of(sim.pid)
        rc = sim.wait_exit(20)
        elapsed = time.monotonic() - sim.started_at
        text = sim.text()
    assert rc != 0
    assert elapsed >= load
    assert len(workers) == 3 and wait_gone(workers, 3.0) == []
    load_end = text.index("TP0] Load weight end.")
    assert load_end < text.index("Capture target verify CUDA graph begin")
    assert "Capture cuda graph failed: NCCL error: invalid usage" in text
    assert "Possible solutions:" in text
    assert "disable CUDA graph by --cuda-graph-backend-decode=disabled" in text
    assert "Traceback (most recent call last):" in text
    assert READY not in text and "Capture target verify CUDA graph end" not in text


@pytest.mark.parametrize(
    "flags",
    [
        ["--disable-cuda-graph"],
        ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"],
        ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"],
    ],
)
def test_tree_serves_in_eager_mode_with_either_flag_generation(flags: list[str]) -> None:
    with SimProcess(
        tp=2, eagle3=True, load=0.2, env=TREE_LL, extra=[*flags, "--decode-log-interval", "2"]
    ) as sim:
        sim.wait_ready()
        out = sim.post_json("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 9}})
        assert out["meta_info"]["completion_tokens"] == 9
        info = sim.get_json("/get_server_info")
        assert info["disable_cuda_graph"] is True
        assert info["sim"]["nccl"]["algo"] == "tree"
        line = sim.wait_line("Decode batch, ")
        assert "cuda graph: False" in line
        assert "CUDA graph begin" not in sim.text()


def test_invalid_nccl_algo_token_fails_at_init() -> None:
    env = dict(RING_LL, NCCL_ALGO="Treee", NCCL_DEBUG="WARN")
    with SimProcess(tp=2, eagle3=False, load=0.2, env=env) as sim:
        rc = sim.wait_exit(15)
        text = sim.text()
    assert rc != 0
    assert re.search(r"\S+:\d+:\d+ \[0\] NCCL WARN Invalid NCCL_ALGO token\(s\) treee", text)
    assert "invalid argument (run with NCCL_DEBUG=WARN for details)" in text
    assert "Last error:\nInvalid NCCL_ALGO token(s) treee in 'Treee'" in text
    assert READY not in text and "Load weight begin" not in text


def test_busy_port_fails_fast_with_uvicorn_message() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with SimProcess(tp=2, eagle3=False, load=5.0, port=port) as sim:
            rc = sim.wait_exit(15)
            text = sim.text()
    assert rc == 1
    assert re.search(
        rf"error while attempting to bind on address \('127.0.0.1', {port}\): "
        r"address already in use",
        text,
    )


def test_health_is_503_while_loading_then_200() -> None:
    with SimProcess(tp=2, eagle3=False, load=1.5) as sim:
        sim.wait_line("Load weight begin")
        assert sim.request("GET", "/health")[0] == 503
        assert sim.request("GET", "/health_generate")[0] == 503
        assert sim.request("POST", "/generate", {"text": "x"})[0] == 503
        assert sim.request("GET", "/get_model_info")[0] == 200
        assert READY not in sim.text()
        sim.wait_ready()
        assert sim.request("GET", "/health")[0] == 200


def test_sigterm_stops_server_and_workers() -> None:
    sim = SimProcess(tp=4, eagle3=False, load=0.2)
    try:
        sim.wait_ready()
        workers = children_of(sim.pid)
        assert len(workers) == 3
        sim.proc.send_signal(signal.SIGTERM)  # the server only, as a plain `kill` would
        assert sim.wait_exit(5) == 0
        assert wait_gone(workers, 3.0) == []
        assert group_members(sim.pid) == []
    finally:
        sim.stop()


def test_sigkill_of_server_takes_workers_down() -> None:
    sim = SimProcess(tp=4, eagle3=False, load=0.2)
    try:
        sim.wait_ready()
        workers = children_of(sim.pid)
        assert len(workers) == 3
        sim.proc.kill()  # SIGKILL to the server only; workers learn via PR_SET_PDEATHSIG
        sim.wait_exit(5)
        assert wait_gone(workers, 3.0) == []
    finally:
        sim.stop()


def test_sigterm_during_load_exits_cleanly() -> None:
    sim = SimProcess(tp=3, eagle3=False, load=10.0)
    try:
        sim.wait_line("Load weight begin")
        workers = children_of(sim.pid)
        sim.proc.send_signal(signal.SIGTERM)
        assert sim.wait_exit(5) == 0  # how fast: benchmarks/bench_stop.py
        assert "Load weight end" not in sim.text()  # it did not finish the load first
        assert wait_gone(workers, 3.0) == []
    finally:
        sim.stop()


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_port_is_free_again_after_exit() -> None:
    port = free_port()
    with SimProcess(tp=1, eagle3=False, load=0.1, port=port) as sim:
        sim.wait_ready()
        assert _accepts(port)  # the check below can fail: it sees a listener when one exists
    assert not _accepts(port)  # nobody listens any more
    with socket.socket() as s:  # and a new server can take the port (no SO_REUSEADDR)
        s.bind(("127.0.0.1", port))
        s.listen(1)


def test_worker_death_fails_the_server_like_sglang() -> None:
    sim = SimProcess(tp=3, eagle3=False, load=0.2)
    try:
        sim.wait_ready()
        workers = children_of(sim.pid)
        assert len(workers) == 2
        os.kill(workers[1], signal.SIGKILL)
        assert sim.wait_exit(5) == 1
        assert "Received sigquit from a child process" in sim.text()
        assert wait_gone(workers, 3.0) == []
    finally:
        sim.stop()


def _drain(sim: SimProcess) -> None:
    with contextlib.suppress(Exception):  # the server goes away mid-stream
        stream = sim.stream(
            "/generate", {"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 400}}
        )
        collections.deque(stream, maxlen=0)  # drain until the server goes away


def test_sigterm_is_never_missed_under_load() -> None:
    """SIGTERM may be delivered to any thread; the server must still stop promptly."""
    for _ in range(6):
        sim = SimProcess(tp=2, eagle3=True, load=0.05, extra=["--decode-log-interval", "2"])
        try:
            sim.wait_ready()
            clients = [threading.Thread(target=_drain, args=(sim,), daemon=True) for _ in range(4)]
            for c in clients:
                c.start()
            sim.wait_line("Decode batch, ")
            sim.proc.send_signal(signal.SIGTERM)
            assert sim.wait_exit(3) == 0  # how fast: benchmarks/bench_stop.py
        finally:
            sim.stop()


def test_baseline_batch_of_four_runs_at_the_modelled_rate() -> None:
    from fastverify.sim import costmodel

    pred = costmodel.predict(RING_LL, "baseline", 4, 4, True)
    with SimProcess(
        tp=4, eagle3=False, load=0.05, env=RING_LL, extra=["--decode-log-interval", "10"]
    ) as sim:
        sim.wait_ready()
        start = len(sim.lines)
        body = {"text": "x", "sampling_params": {"max_new_tokens": 120}}
        outs: list[dict] = []
        clients = [
            threading.Thread(target=lambda: outs.append(sim.post_json("/generate", body)))
            for _ in range(4)
        ]
        for c in clients:
            c.start()
        for c in clients:
            c.join(30)
        assert [o["meta_info"]["completion_tokens"] for o in outs] == [120] * 4
        assert all("spec_verify_ct" not in o["meta_info"] for o in outs)
        lines = [ln for _, ln in sim.lines[start:] if "Decode batch, #running-req: 4," in ln]
        rate, rates = decode_lines_rate(lines)
        assert len(rates) >= 5 and "accept len" not in lines[0]
        assert rate == pytest.approx(pred.tokens_per_second, rel=0.03)


def test_injected_oom_fails_during_load() -> None:
    with SimProcess(tp=2, eagle3=False, load=0.4, extra=["--sim-fail", "oom"]) as sim:
        rc = sim.wait_exit(15)
        text = sim.text()
    assert rc == 1
    assert "torch.OutOfMemoryError: CUDA out of memory." in text
    assert text.index("Load weight begin") < text.index("CUDA out of memory")
    assert READY not in text and "Load weight end" not in text
