"""The process-group machine's tests' plumbing: a group spec for tests/support/group_child.py
(a third program plugged in as a front door would be) and its start and readiness."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from fastverify.daemon import procs
from fastverify.daemon.failures import Failure
from fastverify.daemon.group import GroupSpec, Member, SupervisedGroup
from fastverify.daemon.restart import RestartPolicy

CHILD = str(Path(__file__).with_name("group_child.py"))
ID_VAR = "FASTVERIFY_TEST_GROUP_ID"


def program_group(
    record: str | Path, *, grace_s: float = 600.0, restart: RestartPolicy | None = None
) -> SupervisedGroup[Member]:
    spec = GroupSpec("test program", ID_VAR, "test_id", Path(record), restart=restart)
    return SupervisedGroup(spec, grace_s=lambda: grace_s, gpu_release_s=lambda: 5.0)


def ready_check(ready: str | Path) -> bool:
    return Path(ready).exists()


def wait_ready(group: SupervisedGroup[Member], m: Member, ready: str | Path) -> Failure | None:
    return group.wait_ready(
        m,
        lambda: ready_check(ready),
        timeout_s=300.0,
        cancel=threading.Event(),
        exit_failure=lambda: Failure("exited", f"exited ({m.exit_code})"),
        timeout_failure=lambda: Failure("timeout", "not ready in 300 s"),
        cancelled=Failure("cancelled", "cancelled"),
    )


def start_program(
    group: SupervisedGroup[Member], ready: str | Path, extra: Sequence[str] = ()
) -> tuple[Member, Failure | None]:
    """Spawn group_child.py (its ready file first removed) and wait until it is ready."""
    Path(ready).unlink(missing_ok=True)
    gid = group.new_id()
    argv = [sys.executable, CHILD, str(ready), *extra]
    log = Path(ready).with_suffix(".log")
    env = {**os.environ, ID_VAR: gid}

    def make(proc: subprocess.Popen[bytes]) -> Member:
        pid = proc.pid
        return Member(gid, pid, pid, procs.create_time(pid), argv, log, proc=proc)

    m = group.spawn(gid, argv, env, log, make)
    return m, wait_ready(group, m, ready)
