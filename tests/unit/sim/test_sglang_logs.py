"""Log wording: SGLang's decode/prefill lines and NCCL's lines against the real fixtures."""

from __future__ import annotations

import io
import os
import re
import socket
from pathlib import Path

from fastverify.sim import ncclenv, sglang_logs
from tests.support.field import RING_LL

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-2.28.9-h200-1rank"


def test_decode_line_reference_example_exactly() -> None:
    line = sglang_logs.decode_line(1, 148, 0.0, 82.31, 0, True, 2.01, 0.34)
    assert line == (
        "Decode batch, #running-req: 1, #token: 148, token usage: 0.00, "
        "accept len: 2.01, accept rate: 0.34, cuda graph: True, "
        "gen throughput (token/s): 82.31, #queue-req: 0"
    )
    base = sglang_logs.decode_line(3, 10, 0.5, 12.0, 2, False)
    assert "accept" not in base and base.endswith(
        "cuda graph: False, gen throughput (token/s): 12.00, #queue-req: 2"
    )


def test_prefill_line_modern_form() -> None:
    line = sglang_logs.prefill_line(1, 128, 0.0, 0, 0, 5000.0)
    assert line.startswith(
        "Prefill batch, #new-seq: 1, #new-token: 128, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0"
    )


def test_log_prefix_and_level_filter() -> None:
    buf = io.StringIO()
    log = sglang_logs.LogWriter(buf, "warning")
    log.log("hidden info")
    log.log("shown", 3, "warning")
    log.log("server", None, "error")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP3\] shown", lines[0])
    assert re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] server", lines[1])


def test_env_confirmations_match_the_real_nccl_log() -> None:
    real = {
        ln.split("NCCL INFO ", 1)[1]
        for ln in (FIXTURES / "nccl-info-ring-ll.log").read_text().splitlines()
        if "set by environment to" in ln
    }
    ours = set(sglang_logs.nccl_env_lines(RING_LL))
    assert real  # the fixture has the numeric and P2P_LEVEL confirmations
    assert real <= ours
    assert "NCCL_ALGO set by environment to Ring" in ours  # strings: no trailing period
    assert "NCCL_BUFFSIZE set by environment to 16777216." in ours
    # NCCL reads non-numeric text in a numeric variable as 0, silently; unknown names are ignored
    odd = sglang_logs.nccl_env_lines({"NCCL_NTHREADS": "lots", "NCCL_ALGOS": "Tree"})
    assert odd == ["NCCL_NTHREADS set by environment to 0."]


def test_init_lines_have_real_prefix_and_version() -> None:
    lines = sglang_logs.nccl_init_lines(RING_LL, 2, 8, ncclenv.resolve(RING_LL))
    host = socket.gethostname().split(".")[0]
    pid = os.getpid()
    assert all(re.match(rf"{re.escape(host)}:{pid}:{pid} \[2\] NCCL INFO ", ln) for ln in lines)
    real_version = next(
        ln.split("NCCL INFO ", 1)[1]
        for ln in (FIXTURES / "nccl-info-ring-ll.log").read_text().splitlines()
        if "NCCL version" in ln
    )
    assert any(ln.endswith(real_version) for ln in lines)
    assert sum(" Channel " in ln and "/16 :" in ln for ln in lines) == 16
    assert any("via P2P/" in ln for ln in lines)
    shm = sglang_logs.nccl_init_lines({}, 0, 8, ncclenv.resolve({}))
    assert any("via SHM/" in ln for ln in shm)


def test_tuning_lines_rank0_only_and_subsys_gated() -> None:
    rows = [(14336, "RING", "LL", 16)]
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"}
    (line,) = sglang_logs.nccl_tuning_lines(env, 0, rows)
    assert line.endswith(
        "NCCL INFO AllReduce: 14336 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..15}"
    )
    assert sglang_logs.nccl_tuning_lines(env, 1, rows) == []
    assert sglang_logs.nccl_tuning_lines({"NCCL_DEBUG": "INFO"}, 0, rows) == []
    assert sglang_logs.nccl_tuning_lines({"NCCL_DEBUG_SUBSYS": "ALL"}, 0, rows)
    assert sglang_logs.nccl_tuning_lines({"NCCL_DEBUG_SUBSYS": "^TUNING"}, 0, rows) == []


def test_debug_file_expansion_and_level_filter(tmp_path: Path) -> None:
    env = {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": str(tmp_path / "n-%h-%p-%%.log")}
    path = sglang_logs.nccl_debug_file(env, 4242)
    assert path == str(tmp_path / f"n-{socket.gethostname()}-4242-%.log")
    buf = io.StringIO()
    log = sglang_logs.LogWriter(buf)
    warn = sglang_logs.nccl_warn_line(0, "boom")
    sglang_logs.write_nccl_lines(env, ["h:1:1 [0] NCCL INFO hello", warn], log)
    written = Path(sglang_logs.nccl_debug_file(env, os.getpid())).read_text().splitlines()
    assert written == [warn] and buf.getvalue() == ""
    sglang_logs.write_nccl_lines({}, [warn], log)  # NCCL_DEBUG unset: silent
    assert buf.getvalue() == ""


def test_capture_failure_text() -> None:
    text = sglang_logs.capture_failure_traceback("NCCL error: invalid usage")
    assert "Exception: Capture cuda graph failed: NCCL error: invalid usage\n" in text
    assert text.endswith(sglang_logs.CAPTURE_FAILED_HINT)
    assert "--cuda-graph-backend-decode=disabled" in sglang_logs.CAPTURE_FAILED_HINT


def test_shard_progress_format() -> None:
    line = sglang_logs.shard_progress(32, 64, 10.0)
    assert line == (
        "Loading safetensors checkpoint shards:  50% Completed | 32/64 [00:10<00:10,  3.20it/s]"
    )
