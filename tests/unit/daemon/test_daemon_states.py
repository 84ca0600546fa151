"""The supervisor's transition table."""

from __future__ import annotations

import pytest

from fastverify.daemon.states import (
    TRANSITIONS,
    IllegalTransition,
    State,
    allowed,
    check_transition,
)


def test_every_state_has_a_row_and_targets_are_states() -> None:
    assert set(TRANSITIONS) == set(State)
    for targets in TRANSITIONS.values():
        assert targets <= set(State)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("STOPPED", "STARTING"),
        ("STARTING", "VERIFYING"),
        ("VERIFYING", "READY"),
        ("READY", "STOPPING"),
        ("STOPPING", "STARTING"),  # a switch: stop the old, start the new
        ("STARTING", "FAILED"),
        ("FAILED", "ROLLING_BACK"),
        ("ROLLING_BACK", "VERIFYING"),
        ("READY", "BACKOFF"),  # crash after READY
        ("BACKOFF", "STARTING"),
        ("BACKOFF", "FAILED"),  # burst exceeded
        ("FAILED", "STARTING"),  # next switch recovers
        ("STOPPED", "STARTING"),  # adoption: followed to readiness like a fresh start
        ("STOPPED", "FAILED"),  # nothing could be started at all
        ("STARTING", "ROLLING_BACK"),  # cancelled: the previous profile is put back
    ],
)
def test_allowed(old: str, new: str) -> None:
    check_transition(State(old), State(new))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("STOPPED", "READY"),  # never READY without verification
        ("STARTING", "READY"),
        ("READY", "STARTING"),  # must stop first
        ("READY", "FAILED"),  # a crash goes through BACKOFF
        ("ROLLING_BACK", "READY"),  # rollback is verified too
        ("BACKOFF", "READY"),
        ("STOPPED", "ROLLING_BACK"),
        ("STOPPED", "VERIFYING"),  # adoption goes through STARTING (it may still load)
    ],
)
def test_refused(old: str, new: str) -> None:
    assert not allowed(State(old), State(new))
    with pytest.raises(IllegalTransition, match=f"{old} -> {new}"):
        check_transition(State(old), State(new))


def test_ready_is_reachable_only_from_verifying() -> None:
    assert [s for s, targets in TRANSITIONS.items() if State.READY in targets] == [State.VERIFYING]
