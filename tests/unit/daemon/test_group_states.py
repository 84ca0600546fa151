"""The process-group machine's state table (fastverify.daemon.group): complete, every state
reachable and left, the paths its owners drive legal, an illegal jump loud; the weight
cache's status names derived from it; the record a previous daemon left, when unreadable."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from fastverify.daemon.group import (
    TRANSITIONS,
    GroupSpec,
    GroupState,
    IllegalGroupTransition,
    SupervisedGroup,
    allowed,
    check_transition,
)
from fastverify.daemon.weight_cache import STATE_NAMES

S = GroupState


def _reach(start: GroupState) -> set[GroupState]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_every_state_has_its_row_is_reached_from_stopped_and_gets_back_to_it() -> None:
    assert set(TRANSITIONS) == set(GroupState)
    assert _reach(S.STOPPED) == set(GroupState)
    for st in GroupState:
        assert S.STOPPED in _reach(st), st


def test_a_stop_only_ends_stopped_and_ready_only_comes_from_a_start() -> None:
    assert TRANSITIONS[S.STOPPING] == {S.STOPPED}
    assert {old for old, new in TRANSITIONS.items() if S.READY in new} == {S.STARTING}
    assert {old for old, new in TRANSITIONS.items() if S.BACKOFF in new} == {
        S.STARTING, S.READY, S.FAILED,
    }  # fmt: skip


PATHS = {
    "start, ready, stop": [S.STOPPED, S.STARTING, S.READY, S.STOPPING, S.STOPPED],
    "start times out, stopped": [S.STOPPED, S.STARTING, S.FAILED, S.STOPPING, S.STOPPED],
    "waited again after a deadline": [S.STARTING, S.FAILED, S.STARTING, S.READY],
    "crash, backoff, restart": [S.READY, S.BACKOFF, S.STARTING, S.READY],
    "a restart that crashes while starting": [S.BACKOFF, S.STARTING, S.BACKOFF, S.STARTING],
    "crash seen first by the readiness wait": [S.STARTING, S.FAILED, S.BACKOFF],
    "burst exceeded": [S.READY, S.BACKOFF, S.STARTING, S.FAILED],
    "crash without a policy, the owner restarts": [S.READY, S.FAILED, S.STARTING],
    "stopped during backoff": [S.BACKOFF, S.STOPPING, S.STOPPED],
    "spawn failed": [S.STOPPED, S.FAILED, S.STARTING],
}


@pytest.mark.parametrize("name", sorted(PATHS))
def test_the_paths_the_owners_drive_are_legal(name: str) -> None:
    path = PATHS[name]
    for old, new in itertools.pairwise(path):
        check_transition(old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [(S.READY, S.STARTING), (S.STOPPING, S.FAILED), (S.STOPPED, S.READY), (S.FAILED, S.READY)],
)
def test_an_illegal_jump_raises_and_names_what_is_allowed(old: GroupState, new: GroupState) -> None:
    assert not allowed(old, new)
    with pytest.raises(IllegalGroupTransition) as exc:
        check_transition(old, new)
    assert f"{old} -> {new}" in str(exc.value)
    assert all(str(s) in str(exc.value) for s in TRANSITIONS[old])


def test_staying_is_always_allowed() -> None:
    assert all(allowed(st, st) for st in GroupState)


def test_the_weight_caches_status_names_every_state_but_stopped() -> None:
    # STOPPED is "off", "stopped" or "mismatch" by the cache's own facts
    assert set(STATE_NAMES) == set(GroupState) - {S.STOPPED}
    assert STATE_NAMES[S.BACKOFF] == "failed" and STATE_NAMES[S.READY] == "ready"


def test_the_record_unreadable_or_without_pid_is_ignored_and_cleared_twice(tmp_path: Path) -> None:
    record = tmp_path / "engine.pid"
    g = SupervisedGroup(
        GroupSpec("engine", "FASTVERIFY_TEST_ID", "engine_id", record),
        grace_s=lambda: 1.0,
        gpu_release_s=lambda: 1.0,
    )
    assert g.previous().kind == "none"
    g.write_record({"pid": 123, "pgid": 123, "engine_id": "e"})
    assert json.loads(record.read_text())["pgid"] == 123
    record.write_text("garbage")
    prev = g.previous()
    assert prev.kind == "unreadable" and f"{record} is unreadable" in prev.why
    assert record.exists()  # nothing touched
    record.write_text(json.dumps({"engine_id": "e", "argv": []}))
    assert g.previous().why == f"{record} has no pid; ignoring it"
    assert g.clear_record() is None and g.clear_record() is None and not record.exists()
    assert g.state == GroupState.STOPPED and g.member is None


def test_a_ready_standby_is_handed_over_and_only_a_ready_one(tmp_path: Path) -> None:
    from fastverify.daemon.group import Member

    def group(name: str) -> SupervisedGroup:
        return SupervisedGroup(GroupSpec(name, "FASTVERIFY_TEST_ID", "engine_id",
                                         tmp_path / f"{name}.pid"),
                               grace_s=lambda: 1.0, gpu_release_s=lambda: 1.0)  # fmt: skip

    engine, standby = group("engine"), group("standby")
    old = Member("a", 1, 1, None, [], tmp_path / "a.log")
    new = Member("b", 2, 2, None, [], tmp_path / "b.log")
    engine.member, engine.state = old, GroupState.READY
    standby.member, standby.state = new, GroupState.STARTING
    standby.write_record({"engine_id": "b", "pid": 2})
    with pytest.raises(IllegalGroupTransition):
        standby.hand_over(new, engine)  # not verified yet: nothing moves
    assert engine.member is old and standby.member is new
    standby.state = GroupState.READY
    standby.hand_over(new, engine)
    assert (engine.member, engine.state) == (new, GroupState.READY)
    assert (standby.member, standby.state) == (None, GroupState.STOPPED)
    assert not (tmp_path / "standby.pid").exists()
