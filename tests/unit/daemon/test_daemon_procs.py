"""Process groups: spawn, ownership, stop with SIGTERM -> SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from fastverify.daemon import procs

IGNORE_TERM = (
    "import signal,subprocess,sys,time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "subprocess.Popen([sys.executable, '-c', 'import signal,time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n"
)


def _wait_members(pgid: int, n: int) -> None:
    for _ in range(300):
        if len(procs.group_members(pgid)) >= n:
            return
        time.sleep(0.01)
    raise AssertionError(f"group {pgid} never reached {n} members")


def test_spawn_in_own_group_with_exact_env_and_log(tmp_path: Path) -> None:
    log = tmp_path / "e.log"
    env = {"PATH": os.environ["PATH"], procs.ENGINE_ID_VAR: "abc123"}
    p = procs.spawn(["sh", "-c", "echo hello; env; sleep 0.2"], env, log)
    assert os.getpgid(p.pid) == p.pid != os.getpgid(0)
    assert p.wait(5) == 0
    text = log.read_text()
    assert "hello" in text and "FASTVERIFY_ENGINE_ID=abc123" in text
    assert "HOME=" not in text  # nothing inherited beyond env


def test_stop_group_escalates_to_sigkill_for_term_ignorers(tmp_path: Path) -> None:
    p = procs.spawn([sys.executable, "-c", IGNORE_TERM], dict(os.environ), tmp_path / "l.log")
    _wait_members(p.pid, 2)
    res = procs.stop_group(p.pid, grace_s=0.3, proc=p)
    assert res.signal_used == "SIGKILL" and res.leftover == []
    assert procs.group_members(p.pid) == []
    assert p.returncode == -9


def test_stop_group_sigterm_is_enough_for_polite_ones(tmp_path: Path) -> None:
    p = procs.spawn(["sleep", "30"], dict(os.environ), tmp_path / "l.log")
    _wait_members(p.pid, 1)
    res = procs.stop_group(p.pid, grace_s=5, proc=p)
    assert res.signal_used == "SIGTERM" and res.leftover == []  # duration: bench_stop.py
    assert procs.stop_group(p.pid, grace_s=1).signal_used == "none"


def test_is_ours_checks_engine_id_and_start_time(tmp_path: Path) -> None:
    env = dict(os.environ, **{procs.ENGINE_ID_VAR: "e1"})
    ours = procs.spawn(["sleep", "30"], env, tmp_path / "l.log")
    foreign = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        _wait_members(ours.pid, 1)
        info = {"pid": ours.pid, "pgid": ours.pid, "engine_id": "e1",
                "create_time": psutil.Process(ours.pid).create_time()}  # fmt: skip
        assert procs.is_ours(info)[0] is True
        assert procs.is_ours(dict(info, engine_id="e2"))[0] is False
        assert procs.is_ours(dict(info, create_time=1.0))[0] is False
        assert (
            procs.is_ours({"pid": foreign.pid, "pgid": foreign.pid, "engine_id": "e1"})[0] is False
        )
        assert procs.is_ours({"pid": 1, "pgid": 1, "engine_id": "e1"})[0] is False
    finally:
        for p in (ours, foreign):
            p.kill()
            p.wait()


def test_gpu_release_without_nvml_says_so() -> None:
    released, how = procs.wait_gpu_release([os.getpid()], timeout_s=0.5)
    assert released
    assert how
