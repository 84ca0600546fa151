"""Process groups: spawn, ownership, stop with SIGTERM -> SIGKILL."""

from __future__ import annotations

import os
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


FAKE = Path(__file__).resolve().parents[2] / "fixtures" / "proc"
BTIME = 1764460800  # tests/fixtures/proc/stat


def started(ticks: int) -> float:
    return BTIME + ticks / os.sysconf("SC_CLK_TCK")


def test_proc_tree_groups_and_descendants_skip_zombies() -> None:
    assert [p.pid for p in procs.group_members(4242, FAKE)] == [4242, 4243, 4245]
    assert procs.group_members(7000, FAKE) == []  # its only member is a zombie
    assert [p.pid for p in procs.descendants(4242, FAKE)] == [4242, 4243, 4245]
    assert procs.descendants(4244, FAKE) == [] and procs.descendants(99999, FAKE) == []
    worker = procs.read_stat(4243, FAKE)
    assert worker is not None
    assert (worker.comm, worker.ppid, worker.pgid) == ("tp) worker (1", 4242, 4242)
    assert procs.engine_id_of(4243, FAKE) == "e1"
    assert procs.engine_id_of(6000, FAKE) is None and procs.engine_id_of(99999, FAKE) is None
    assert procs.create_time(4242, FAKE) == started(123456)


def test_is_ours_checks_engine_id_and_start_time() -> None:
    info = {"pid": 4242, "pgid": 4242, "engine_id": "e1", "create_time": started(123456)}
    assert procs.is_ours(info, FAKE) == (True, "group 4242: 3 process(es) carry our engine id")
    ok, why = procs.is_ours(dict(info, engine_id="e2"), FAKE)
    assert not ok and "none of its processes carries engine id e2" in why
    # the start in clock ticks since boot decides; epoch seconds move with the clock
    ticks = dict(info, start_ticks=123456)
    assert procs.is_ours(ticks, FAKE)[0] is True
    ok, why = procs.is_ours(dict(ticks, start_ticks=123457), FAKE)
    assert not ok and "started at another time" in why
    assert procs.is_ours(dict(ticks, create_time=started(123456) + 3600), FAKE)[0] is True
    ok, why = procs.is_ours({"pid": 6000, "pgid": 6000, "engine_id": "e1"}, FAKE)
    assert not ok  # a foreign process that reused the pid
    ok, why = procs.is_ours({"pid": 7000, "pgid": 7000, "engine_id": "e3"}, FAKE)
    assert not ok and "no process is left" in why
    assert procs.is_ours({"pid": 1, "pgid": 1, "engine_id": "e1"}, FAKE)[0] is False


def test_the_proc_reader_agrees_with_psutil_on_the_real_proc() -> None:
    # a child of known environment (this process's own may be retitled: pytest-xdist calls
    # setproctitle in its workers when it is installed, which overwrites /proc/self/environ)
    import subprocess

    child = subprocess.Popen(["sleep", "30"], env={"PATH": os.environ["PATH"], "X": "1"})
    try:
        me = psutil.Process(child.pid)
        # between fork and exec the child still holds this process's environment: wait for
        # the exec (its command line), which a busy machine may delay
        deadline = time.monotonic() + 30
        while me.cmdline() != ["sleep", "30"]:
            assert time.monotonic() < deadline, me.cmdline()
            time.sleep(0.01)
        info = procs.read_stat(me.pid)
        assert info is not None
        assert (info.ppid, info.pgid) == (me.ppid(), os.getpgid(0))
        assert abs(procs.create_time(me.pid) - me.create_time()) < 0.05
        assert procs.environ(me.pid) == me.environ() == {"PATH": os.environ["PATH"], "X": "1"}
        assert me.pid in [p.pid for p in procs.group_members(os.getpgid(0))]
    finally:
        child.kill()
        child.wait()


def test_gpu_release_without_nvml_says_so() -> None:
    released, how = procs.wait_gpu_release([os.getpid()], timeout_s=0.5)
    assert released
    assert how


# A server that stops its own child on SIGTERM, as SGLang's does (its SIGTERM handler drains
# and kills its process tree); the child says which signal reached it.
SERVER_STOPS_CHILD = """
import signal, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
def term(*_):
    print("server: SIGTERM", flush=True)
    child.send_signal(signal.SIGUSR1)
    child.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("up", flush=True)
signal.pause()
"""
CHILD_REPORTS = """
import signal, sys
def said(name):
    def handler(*_):
        print("child:", name, flush=True)
        sys.exit(0)
    return handler
signal.signal(signal.SIGTERM, said("SIGTERM"))
signal.signal(signal.SIGUSR1, said("stopped by its server"))
print("up", flush=True)
signal.pause()
"""


def test_stop_group_terms_the_server_and_lets_it_stop_its_children(tmp_path: Path) -> None:
    """A SIGTERM to every member reads to SGLang as a crashed scheduler (it then waits 5 s
    for crash diagnostics): only the leader gets it while it lives."""
    log = tmp_path / "l.log"
    p = procs.spawn(
        [sys.executable, "-c", SERVER_STOPS_CHILD, CHILD_REPORTS], dict(os.environ), log
    )
    _wait_members(p.pid, 2)
    while log.read_text().count("up") < 2:  # both have installed their handlers
        time.sleep(0.01)
    res = procs.stop_group(p.pid, grace_s=30, proc=p)
    assert res.signal_used == "SIGTERM" and res.leftover == []
    said = log.read_text().splitlines()
    assert "server: SIGTERM" in said and "child: stopped by its server" in said, said
    assert "child: SIGTERM" not in said


LEADER_DIES_CHILD_STAYS = (
    "import subprocess,time\n"
    "subprocess.Popen(['sleep', '600'])\n"
    "print('up', flush=True)\n"
    "time.sleep(600)\n"
)


def test_stop_group_terms_what_a_leader_left_behind_without_waiting_the_grace(
    tmp_path: Path,
) -> None:
    """A leader that dies of the SIGTERM (no handler yet: it was stopped while starting)
    leaves its child in the group; nothing else will stop it, so the group gets SIGTERM too
    rather than waiting out the grace for a SIGKILL."""
    log = tmp_path / "l.log"
    p = procs.spawn([sys.executable, "-c", LEADER_DIES_CHILD_STAYS], dict(os.environ), log)
    _wait_members(p.pid, 2)
    res = procs.stop_group(p.pid, grace_s=60, proc=p)
    assert res.signal_used == "SIGTERM" and res.leftover == [], res
    assert p.returncode == -15
