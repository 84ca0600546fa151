"""The supervisor's states and the only transitions allowed between them.

This module is the single source of truth for the daemon's state machine; the
controller calls `check_transition` on every change, so an illegal jump is a bug
that fails loudly instead of a silent inconsistency.

States
------
STOPPED       no engine process (start-up before the first start, or after shutdown).
STARTING      engine spawned with a profile; waiting for health + SGLang's ready line.
VERIFYING     engine answers; checking /proc/PID/environ of the server and its TP
              workers (and NCCL's own "set by environment" lines) against the profile.
READY         verified and serving.
STOPPING      engine process group being stopped (SIGTERM, grace, SIGKILL, GPU release).
FAILED        the last start/switch failed (or the crash-restart burst was exceeded);
              the API still answers and the next switch/restart may recover.
ROLLING_BACK  a switch failed: stopping the failed engine and starting the last good
              profile again (ends in VERIFYING -> READY, or FAILED).
BACKOFF       the engine crashed after READY; waiting (exponential backoff) before restart.

Transitions (old -> allowed new)
--------------------------------
STOPPED      -> STARTING (start, switch, adopting a live engine after a daemon crash: it is
                followed to readiness like a fresh start), STOPPING (shutdown with a
                leftover group), FAILED (nothing could be started at all)
STARTING     -> VERIFYING (ready), FAILED (start failed), STOPPING (shutdown),
                ROLLING_BACK (cancelled: the previous profile is put back)
VERIFYING    -> READY, FAILED, STOPPING, ROLLING_BACK (cancelled)
READY        -> STOPPING (switch, restart, shutdown), BACKOFF (engine crashed)
STOPPING     -> STOPPED, STARTING (switch: start the new profile), FAILED,
                ROLLING_BACK (cancelled before the new profile started)
FAILED       -> ROLLING_BACK, STARTING (next switch/restart), STOPPING, BACKOFF, STOPPED
ROLLING_BACK -> VERIFYING, FAILED, STOPPING
BACKOFF      -> STARTING (restart), FAILED (burst exceeded), STOPPING (switch/shutdown)
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class State(StrEnum):
    STOPPED = "STOPPED"
    STARTING = "STARTING"
    VERIFYING = "VERIFYING"
    READY = "READY"
    STOPPING = "STOPPING"
    FAILED = "FAILED"
    ROLLING_BACK = "ROLLING_BACK"
    BACKOFF = "BACKOFF"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.STOPPED: frozenset({State.STARTING, State.STOPPING, State.FAILED}),
    State.STARTING: frozenset({State.VERIFYING, State.FAILED, State.STOPPING, State.ROLLING_BACK}),
    State.VERIFYING: frozenset({State.READY, State.FAILED, State.STOPPING, State.ROLLING_BACK}),
    State.READY: frozenset({State.STOPPING, State.BACKOFF}),
    State.STOPPING: frozenset({State.STOPPED, State.STARTING, State.FAILED, State.ROLLING_BACK}),
    State.FAILED: frozenset(
        {State.ROLLING_BACK, State.STARTING, State.STOPPING, State.BACKOFF, State.STOPPED}
    ),
    State.ROLLING_BACK: frozenset({State.VERIFYING, State.FAILED, State.STOPPING}),
    State.BACKOFF: frozenset({State.STARTING, State.FAILED, State.STOPPING}),
}


class IllegalTransition(RuntimeError):
    """A transition not in TRANSITIONS was attempted (a supervisor bug)."""


def allowed(old: Any, new: Any, table: Mapping[Any, frozenset[Any]] = TRANSITIONS) -> bool:
    """True when `old -> new` is in the table (staying in the same state is always allowed).
    `table`: this one, or another machine's (group.py's process states)."""
    return old == new or new in table[old]


def check_transition(
    old: Any,
    new: Any,
    table: Mapping[Any, frozenset[Any]] = TRANSITIONS,
    error: type[IllegalTransition] = IllegalTransition,
) -> None:
    """Raise `error` unless `old -> new` is allowed by `table`."""
    if not allowed(old, new, table):
        allowed_next = ", ".join(sorted(table[old]))
        raise error(f"illegal state transition {old} -> {new} (allowed: {allowed_next})")
