"""Rank processes of the GPU experiments (preflight, derive-tuner, rehearse): start one in a
session of its own with its output in a file, and stop exactly that session."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def start_rank(argv: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen:
    """Start `argv` in a new session (so it can be stopped as a group), stdout+stderr to
    `log`."""
    with open(log, "wb") as stdio:
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            stdout=stdio,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill_rank(proc: subprocess.Popen) -> None:
    """SIGKILL the session started for this rank (never anything else), then reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
