"""What one worker of a run computes once for the others: `run_dir`, the directory every
xdist worker of this run shares (without xdist: the session's own base directory), and
`once`, which computes a file there under a lock unless another worker already did."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def run_dir(factory: pytest.TempPathFactory) -> Path:
    base = factory.getbasetemp()  # an xdist worker's own: popen-gwN in the run's directory
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """`run_dir/name`, written by `make(path)` in the first worker that asks (the others wait
    on its lock and read it)."""
    path = run_dir(factory) / name
    with open(path.with_name(name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            tmp = path.with_name(name + ".tmp")
            make(tmp)
            tmp.rename(path)
    return path
