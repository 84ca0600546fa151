"""A sim TP worker after its exec (`WorkerPool.fork(..., exec_argv=...)`):
`python -m fastverify.sim.worker_main LOG_LEVEL RANK FD PARENT_PID` serves the
command socket it inherited (fd FD) with the engine's worker handler, like a forked one."""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    from fastverify.sim import sglang_logs
    from fastverify.sim.startup import worker_handler
    from fastverify.sim.workers import _child

    level, rank, fd, parent_pid = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    sock = socket.socket(fileno=fd)
    _child(rank, sock, parent_pid, worker_handler(sglang_logs.LogWriter(sys.stdout, level)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
