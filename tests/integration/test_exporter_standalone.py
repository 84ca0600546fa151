"""`fastverify-exporter` as a real process against an SGLang stand-in: polls /metrics,
follows a log file through rotation and truncation, runs profile windows, labels series,
and stops cleanly on SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.sglang_stub import SGLangStub
from tests.support.harness import free_port, sigint_in

DECODE = (
    "[2026-11-29 10:00:00 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.01, "
    "accept len: {a}, accept rate: 0.40, cuda graph: True, gen throughput (token/s): 200.00, "
    "#queue-req: 0\n"
)
NCCL = "h:7:7 [0] NCCL INFO NCCL_PROTO set by environment to LL\n"


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def _value(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split(" ")[-1])
    raise AssertionError(f"{series} not in /metrics")


def _wait(url: str, needle: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            text = _scrape(url)
            if needle in text:
                return text
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} not in /metrics after {timeout}s:\n{text[-3000:]}")


@pytest.fixture
def stub():
    s = SGLangStub(tp_size=2, profile_delay_s=0.05).start()
    s.values["num_running_reqs"] = 4.0  # serving: background windows skip an idle engine
    yield s
    s.stop()


def test_standalone_exporter(tmp_path: Path, stub: SGLangStub) -> None:
    log = tmp_path / "server.log"
    log.write_text(NCCL + DECODE.format(a="9.99"))  # history: NCCL facts yes, old figures no
    env_file = tmp_path / "ring-ll.env"
    env_file.write_text("# description: x\nNCCL_ALGO=Ring\nNCCL_PROTO=LL\nHF_TOKEN=hf_secret\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastverify.exporters.standalone", "--sglang-url", stub.url,
         "--log-file", str(log), "--trace-dir", str(tmp_path / "traces"), "--trace-period", "1",
         "--trace-steps", "3", "--listen", f"127.0.0.1:{port}", "--profile", "ring-ll",
         "--mode", "eagle3", "--profile-env", str(env_file), "--poll-interval", "0.2",
         "--baseline-tps", "82", "--baseline-request-tps", "41",
         "--baseline-concurrency", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        stub.values.update(generation_tokens_total=100.0, gen_throughput=200.0)
        _wait(url, "fastverify_up 1.0")
        # the log follower starts after the poller: wait until it has read the history
        text = _wait(url, 'fastverify_nccl_env_info{value="LL",var="NCCL_PROTO"} 1.0')
        assert 'nccl_algo="Ring"' in text and "hf_secret" not in text and "hf_token" not in text
        assert "9.99" not in text  # the old decode line is history, not a current figure
        with open(log, "a") as fh:
            fh.write(DECODE.format(a="2.50"))
        text = _wait(url, 'fastverify_spec_accept_length{mode="eagle3",profile="ring-ll"} 2.5')
        # the line says 4 requests x 2.5 / 200 tok/s = 50 ms per cycle; 41 tok/s per request
        # in baseline => 0.05 x 41 = 2.05 accepted tokens needed to break even
        # (the baseline was measured at 4 concurrent requests, as the line's 4 running)
        assert _value(text, 'fastverify_spec_breakeven_accept_length{concurrency="4",'
                      'mode="eagle3",profile="ring-ll"}') == pytest.approx(2.05)  # fmt: skip
        assert _value(text, 'fastverify_spec_speedup_estimate{concurrency="4",'
                      'mode="eagle3",profile="ring-ll"}') == pytest.approx(2.5 / 2.05)  # fmt: skip
        # the poller's counter turns into a rate
        for total in (300.0, 500.0, 700.0):
            time.sleep(0.5)
            stub.values["generation_tokens_total"] = total
        text = _wait(url, "fastverify_generation_tokens_total")
        # a profile window from the trace period: 122 all-reduces per verify on both ranks
        _wait(url, 'fastverify_allreduce_per_verify{mode="eagle3",profile="ring-ll"} 122.0')
        assert stub.profile_requests and stub.profile_requests[0]["num_steps"] == 3
        # logrotate (create mode), then copytruncate
        os.rename(log, tmp_path / "server.log.1")
        log.write_text(DECODE.format(a="3.25"))
        _wait(url, 'fastverify_spec_accept_length{mode="eagle3",profile="ring-ll"} 3.25')
        with open(log, "r+") as fh:
            fh.truncate(0)
        with open(log, "a") as fh:
            fh.write(DECODE.format(a="1.75") * 3)
        _wait(url, 'fastverify_spec_accept_length{mode="eagle3",profile="ring-ll"} 1.75')
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert proc.returncode == 0, out.decode()[-2000:]
    assert b"serving http://127.0.0.1" in out


@pytest.mark.parametrize("ignored", [False, True], ids=["foreground", "background"])
def test_sigint_stops_it_unless_it_started_ignored(ignored: bool) -> None:
    """Started with SIGINT ignored (`fastverify-exporter &` from a script) it keeps ignoring it,
    so the script's Ctrl-C does not stop it; otherwise Ctrl-C stops it cleanly."""
    port = free_port()
    disposition = signal.SIG_IGN if ignored else signal.SIG_DFL
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastverify.exporters.standalone", "--sglang-url",
         "http://127.0.0.1:1", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, disposition),
    )  # fmt: skip
    try:
        # "serving" is said once its handlers are in place (the poller may log before it)
        assert any("serving" in line for line in proc.stdout), proc.poll()
        assert sigint_in(proc.pid, "SigIgn") is ignored
        assert sigint_in(proc.pid, "SigCgt") is not ignored
        proc.send_signal(signal.SIGINT)  # an ignored signal is discarded when sent
        if ignored:
            assert "fastverify_up" in _scrape(f"http://127.0.0.1:{port}/metrics")
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_standalone_bad_arguments(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "fastverify.exporters.standalone", "--sglang-url", "http://x:1",
         "--listen", "127.0.0.1:notaport"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert run.returncode == 2 and "not a number" in run.stderr
    busy = subprocess.Popen(
        [sys.executable, "-c", "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',0)); "
         "s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        port = busy.stdout.readline().strip()
        run = subprocess.run(
            [sys.executable, "-m", "fastverify.exporters.standalone", "--sglang-url",
             "http://127.0.0.1:1", "--listen", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert run.returncode == 1 and "cannot listen" in run.stderr
    finally:
        busy.kill()
        busy.wait()
