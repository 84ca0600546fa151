"""The process-group machine (fastverify.daemon.group) through real processes: a program with a
child in its own group (tests/support/group_child.py) is started and found ready, adopted by a
new supervisor after its supervisor's kill -9, stopped while SIGSTOPped without waiting out
the grace, and restarted with backoff after crashes, as the engine, the weight cache and a
front door would be."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastverify.daemon import procs
from fastverify.daemon.group import GroupState, Member, SupervisedGroup
from fastverify.daemon.restart import RestartPolicy
from tests.support.group_programs import (
    CHILD,
    ID_VAR,
    program_group,
    ready_check,
    start_program,
    wait_ready,
)
from tests.support.harness import REPO

WAIT_S = 120.0  # a bound on each awaited event (a busy machine), never a measure


class States:
    """Every state the group enters, in order; `wait(pred)` blocks until `pred(list)`."""

    def __init__(self, group: SupervisedGroup[Member]) -> None:
        self.group = group
        self.seen: list[GroupState] = []
        self.backoffs: list[float | None] = []
        self._cond = threading.Condition()
        group.on_change = self._changed

    def _changed(self) -> None:
        with self._cond:
            st = self.group.state
            if not self.seen or self.seen[-1] != st:
                self.seen.append(st)
                if st == GroupState.BACKOFF:
                    self.backoffs.append(self.group.backoff_s)
            self._cond.notify_all()

    def wait(self, pred: Callable[[list[GroupState]], bool], what: str) -> list[GroupState]:
        with self._cond:
            assert self._cond.wait_for(lambda: pred(self.seen), WAIT_S), (what, self.seen)
            return list(self.seen)


@pytest.fixture
def groups() -> Any:
    """The groups a test made: whatever member is left is stopped at the end."""
    made: list[SupervisedGroup[Member]] = []
    yield made
    for g in made:
        g.shutdown()
        if g.member is not None:
            g.stop(g.member)


def _ids(pgid: int) -> set[str | None]:
    return {procs.engine_id_of(p.pid, var=ID_VAR) for p in procs.group_members(pgid)}


def test_a_start_is_recorded_found_ready_and_stopped(tmp_path: Path, groups: list) -> None:
    g = program_group(tmp_path / "prog.pid")
    groups.append(g)
    states = States(g)
    m, failure = start_program(g, tmp_path / "ready")
    assert failure is None and g.state == GroupState.READY and m.ready.is_set()
    st = g.status()
    assert (st["state"], st["pid"], st["adopted"]) == ("READY", m.pid, False)
    assert st["ready_s"] is not None and st["ready_s"] >= 0
    record = json.loads((tmp_path / "prog.pid").read_text())
    assert record["test_id"] == m.group_id and record["pid"] == m.pid and "pending" not in record
    assert len(procs.group_members(m.pgid)) == 2  # the leader and its child, both marked ours
    assert _ids(m.pgid) == {m.group_id}
    done = g.stop(m)
    assert done.result.signal_used == "SIGTERM" and done.result.leftover == []
    assert sorted(done.pids) == sorted(set(done.pids)) and len(done.pids) == 2
    assert m.proc is not None and m.proc.returncode == 0  # it stopped its child itself
    assert not procs.group_members(m.pgid) and not (tmp_path / "prog.pid").exists()
    assert states.seen == ["STARTING", "READY", "STOPPING", "STOPPED"]
    assert g.state == GroupState.STOPPED and g.member is None
    assert g.status() == {"state": "STOPPED", "restarts": 0, "backoff_s": None}


def test_after_the_supervisors_kill9_the_next_one_adopts_the_group(tmp_path: Path) -> None:
    record, ready = tmp_path / "prog.pid", tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tests.support.group_daemon", str(record), str(ready)],
        env=env, stdout=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    assert daemon.stdout is not None
    line = daemon.stdout.readline().split()
    assert line[:1] == ["ready"], line
    pid = int(line[1])
    daemon.send_signal(signal.SIGKILL)
    assert daemon.wait() == -signal.SIGKILL
    g = program_group(record)
    try:
        prev = g.previous()
        assert prev.kind == "ours" and prev.record["pid"] == pid, prev
        data = prev.record
        m = g.adopt(
            lambda: Member(
                data["test_id"], data["pid"], prev.pgid, data["create_time"], data["argv"],
                Path(data["log"]), started_at=data["started_at"],
            )
        )  # fmt: skip
        assert m.adopted and m.proc is None and g.state == GroupState.STARTING
        assert wait_ready(g, m, data["argv"][2]) is None and g.state == GroupState.READY
        done = g.stop(m)
        assert done.result.signal_used == "SIGTERM" and done.result.leftover == []
        assert not procs.group_members(pid) and not record.exists()
    finally:
        g.shutdown()
        if procs.group_members(pid):
            g.stop_pgid(pid)


def test_a_group_spawned_but_never_recorded_is_stopped_a_foreign_one_left_alone(
    tmp_path: Path,
) -> None:
    record = tmp_path / "prog.pid"
    gid = "0123456789abcdef"
    orphan = subprocess.Popen(  # what a supervisor killed between spawn and record left
        [sys.executable, CHILD, str(tmp_path / "ready")],
        env={**os.environ, ID_VAR: gid}, start_new_session=True,
    )  # fmt: skip
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        record.write_text(json.dumps({"test_id": gid, "pending": True, "argv": []}))
        g = program_group(record)
        prev = g.previous()
        assert prev.kind == "reaped" and [pgid for pgid, _ in prev.stopped] == [orphan.pid]
        assert orphan.wait(WAIT_S) is not None and not record.exists()
        record.write_text(
            json.dumps({"test_id": gid, "pid": sleeper.pid, "pgid": sleeper.pid, "argv": []})
        )
        prev = g.previous()
        assert prev.kind == "foreign" and "carries engine id" in prev.why, prev
        assert sleeper.poll() is None and not record.exists()  # nothing killed
    finally:
        for p in (orphan, sleeper):
            p.kill()
            p.wait()


def test_a_sigstopped_group_stops_on_its_first_signal_not_after_the_grace(
    tmp_path: Path, groups: list
) -> None:
    g = program_group(tmp_path / "prog.pid", grace_s=600.0)
    groups.append(g)
    m, failure = start_program(g, tmp_path / "ready")
    assert failure is None
    os.killpg(m.pgid, signal.SIGSTOP)
    stopped = threading.Event()

    def all_stopped() -> bool:
        members = procs.group_members(m.pgid)
        return len(members) == 2 and all(p.state == "T" for p in members)

    while not all_stopped():  # the kernel stops them asynchronously
        stopped.wait(0.01)
    done = g.stop(m)
    # SIGTERM was enough: the leader ran its handler (exit 0), no SIGKILL after 600 s
    assert done.result.signal_used == "SIGTERM" and done.result.leftover == []
    assert m.proc is not None and m.proc.returncode == 0
    assert g.state == GroupState.STOPPED


def test_a_crashed_group_restarts_with_backoff_reset_at_ready(tmp_path: Path, groups: list) -> None:
    policy = RestartPolicy(math.inf, (0.05, 0.4), burst=100)
    g = program_group(tmp_path / "prog.pid", restart=policy)
    groups.append(g)
    states = States(g)
    ready, counter = tmp_path / "ready", tmp_path / "starts"
    extra = ["--crash-starts", "2,3", str(counter)]  # starts 2 and 3 crash at once
    g.restart_with = lambda: start_program(g, ready, extra) and None
    first, failure = start_program(g, ready, extra)
    assert failure is None
    os.kill(first.pid, signal.SIGKILL)
    states.wait(lambda s: s.count(GroupState.READY) == 2, "back after two crashed starts")
    assert procs.group_members(first.pgid) == []  # the dead leader's child went with it
    second = g.member
    assert second is not None and second.pid != first.pid
    os.kill(second.pid, signal.SIGKILL)
    states.wait(lambda s: s.count(GroupState.READY) == 3, "back after one crash")
    # each crash waits twice the one before; READY counts again from the first wait
    assert states.backoffs == [0.05, 0.1, 0.2, 0.05]
    assert g.restarts == 4 and counter.read_text() == "5"
    assert states.seen == ["STARTING", "READY"] + ["BACKOFF", "STARTING"] * 3 + [
        "READY", "BACKOFF", "STARTING", "READY",
    ]  # fmt: skip
    assert g.member is not None and len(procs.group_members(g.member.pgid)) == 2


def test_crashes_beyond_the_burst_leave_the_group_failed(tmp_path: Path, groups: list) -> None:
    policy = RestartPolicy(math.inf, (0.05, 0.05), burst=1)
    g = program_group(tmp_path / "prog.pid", restart=policy)
    groups.append(g)
    states = States(g)
    ready, counter = tmp_path / "ready", tmp_path / "starts"
    extra = ["--crash-starts", "2,3,4", str(counter)]
    g.restart_with = lambda: start_program(g, ready, extra) and None
    m, failure = start_program(g, ready, extra)
    assert failure is None and not ready_check(tmp_path / "nothing")
    os.kill(m.pid, signal.SIGKILL)
    states.wait(lambda s: s[-1] == GroupState.FAILED and GroupState.BACKOFF in s, "given up")
    assert g.restarts == 1 and counter.read_text() == "2"
    assert g.member is not None and not g.member.alive()
    assert procs.group_members(m.pgid) == []  # nothing of the first group is left
