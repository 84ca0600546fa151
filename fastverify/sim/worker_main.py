"""A sim TP worker after its exec (`WorkerPool.fork(..., exec_argv=...)`):
`python -m fastverify.sim.worker_main LOG_LEVEL RANK FD PARENT_PID` serves the
command socket it inherited (fd FD) with the engine's worker handler, like a forked one.

`worker_handler` is the workers' side of the engine's commands (log, NCCL init lines, map
a FlashInfer library, write a profiler trace). What a command needs is imported when it
first comes: a worker starts on the interpreter, its log writer and its socket (a TP 8
engine starts seven of them at once)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastverify.sim.flashinfer_jit import Mapped
    from fastverify.sim.sglang_logs import LogWriter

MAPPED: list[Mapped] = []  # FlashInfer libraries this process holds mapped


def worker_handler(log: LogWriter) -> Callable[[int, dict[str, Any]], dict[str, Any] | None]:
    """A TP worker's side of the engine's commands, logging through `log`."""

    def handle(rank: int, msg: dict[str, Any]) -> dict[str, Any] | None:
        cmd = msg.get("cmd")
        if cmd == "log":
            log.log(msg["msg"], rank, msg.get("level", "info"))
        elif cmd == "nccl":
            import os

            from fastverify.sim import ncclenv, sglang_logs

            lines = sglang_logs.nccl_init_lines(
                os.environ, rank, msg["tp_size"], ncclenv.resolve(os.environ)
            )
            sglang_logs.write_nccl_lines(os.environ, lines, log)
        elif cmd == "map":  # load FlashInfer's JIT-built library, as each rank's process does
            from fastverify.sim import flashinfer_jit

            MAPPED.append(flashinfer_jit.Mapped(Path(msg["path"])))
        elif cmd == "trace":
            import os

            from fastverify.sim.profiler import write_cycles

            path = write_cycles(
                msg["path"], rank, msg["tp_size"], msg["cycles"], dict(os.environ), msg["args"]
            )
            return {"ok": True, "path": str(path)}
        return None

    return handle


def main(argv: Sequence[str]) -> int:
    from fastverify.sim import sglang_logs
    from fastverify.sim.workers import _child

    level, rank, fd, parent_pid = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    sock = socket.socket(fileno=fd)
    _child(rank, sock, parent_pid, worker_handler(sglang_logs.LogWriter(sys.stdout, level)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
