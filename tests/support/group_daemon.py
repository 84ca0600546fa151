"""A minimal supervisor over group.SupervisedGroup, to be killed with SIGKILL by a test:

    python -m tests.support.group_daemon RECORD_PATH READY_FILE

starts tests/support/group_child.py as a supervised group recorded at RECORD_PATH, waits
until it is ready, prints `ready PID` and then waits to be killed.
"""

from __future__ import annotations

import sys
import threading

from tests.support.group_programs import program_group, start_program


def main() -> int:
    record, ready = sys.argv[1], sys.argv[2]
    group = program_group(record)
    m, failure = start_program(group, ready)
    if failure is not None:
        print(f"failed {failure.message}", flush=True)
        return 1
    print(f"ready {m.pid}", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
