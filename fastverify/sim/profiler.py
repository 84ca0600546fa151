"""`/start_profile` and `/stop_profile` of the sim engine: profile windows -> per-rank traces.

Like SGLang: `/start_profile` with `num_steps` records that many decode cycles (from
`start_step` when given) and answers once every TP rank has written
`[{prefix}-]{profile_id}-TP-{rank}.trace.json.gz` into `output_dir` (default
$SGLANG_TORCH_PROFILER_DIR, else /tmp); without `num_steps` it records until
`/stop_profile`. The scheduler only appends cycle start times (cheap); the files are
written afterwards by a writer thread (TP0) and by each worker process (its own rank,
its own pid), so serving is not stalled.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify.sim import traces
from fastverify.sim.sglang_logs import LogWriter
from fastverify.sim.workers import WorkerPool


class ProfileError(Exception):
    """A profile request that cannot be honoured (HTTP 400 with this message)."""


@dataclass
class _Window:
    output_dir: Path
    profile_id: str
    prefix: str | None
    num_steps: int | None
    start_after: int  # cycles to skip before recording
    activities: tuple[str, ...]
    cycles: list[traces.Cycle] = field(default_factory=list)
    seen: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    files: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Profiler:
    """Profile-window state shared by HTTP handlers and the scheduler thread."""

    def __init__(
        self,
        *,
        tp_size: int,
        trace_args: Mapping[str, Any],
        workers: WorkerPool | None,
        log: LogWriter,
    ):
        self.tp_size = tp_size
        self.trace_args = dict(trace_args)  # mode, cuda_graph, accept_length, num_steps, ...
        self.workers = workers
        self.log = log
        self._lock = threading.Lock()
        self._window: _Window | None = None
        self.forward_ct = 0

    # scheduler thread
    def on_cycle(self, start_ns: int, batch_size: int, steps: int | None = None) -> None:
        self.forward_ct += 1
        w = self._window
        if w is None:
            return
        with self._lock:
            if self._window is not w:
                return
            w.seen += 1
            if w.seen <= w.start_after:
                return
            w.cycles.append(traces.Cycle(start_ns, batch_size, steps))
            if w.num_steps is not None and len(w.cycles) >= w.num_steps:
                self._window = None
                threading.Thread(
                    target=self._write, args=(w,), name="sim-trace-writer", daemon=True
                ).start()

    # HTTP threads
    def start(self, body: Mapping[str, Any]) -> _Window:
        out = body.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR") or "/tmp"
        num_steps = body.get("num_steps")
        start_step = body.get("start_step")
        try:
            num_steps = int(num_steps) if num_steps is not None else None
            start_step = int(start_step) if start_step is not None else None
        except (TypeError, ValueError):
            raise ProfileError("num_steps and start_step must be integers") from None
        if num_steps is not None and num_steps < 1:
            raise ProfileError("num_steps must be >= 1")
        activities = tuple(body.get("activities") or ("CPU", "GPU"))
        out_dir = Path(out)
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProfileError(f"cannot create output_dir {out_dir}: {exc}") from None
        with self._lock:
            if self._window is not None:
                raise ProfileError("Profiling is already in progress. Call /stop_profile first.")
            skip = max(0, start_step - self.forward_ct) if start_step is not None else 0
            w = _Window(
                out_dir,
                str(time.time()),
                body.get("profile_prefix") or None,
                num_steps,
                skip,
                activities,
            )
            self._window = w
        self.log.log(
            f"Profiling starts. Traces will be saved to: {out_dir} "
            f"(with profile id: {w.profile_id})"
        )
        return w

    def stop(self) -> _Window:
        with self._lock:
            w = self._window
            if w is None:
                raise ProfileError("Profiling is not in progress. Call /start_profile first.")
            self._window = None
        self._write(w)
        return w

    def cancel(self) -> None:
        with self._lock:
            w, self._window = self._window, None
        if w is not None:
            w.errors.append("server shutting down")
            w.done.set()

    # writer
    def _write(self, w: _Window) -> None:
        self.log.log("Stop profiling...")
        args = dict(self.trace_args, activities=list(w.activities))
        cycles = [(c.start_ns, c.batch_size, c.steps) for c in w.cycles]
        try:
            path = w.output_dir / traces.trace_filename(w.profile_id, 0, w.prefix)
            write_cycles(path, 0, self.tp_size, cycles, dict(os.environ), args)
            w.files.append(str(path))
        except OSError as exc:
            w.errors.append(f"TP0: {exc}")
        if self.workers is not None:

            def msg(rank: int) -> dict[str, Any]:
                p = w.output_dir / traces.trace_filename(w.profile_id, rank, w.prefix)
                return {
                    "cmd": "trace",
                    "path": str(p),
                    "cycles": cycles,
                    "args": args,
                    "tp_size": self.tp_size,
                }

            for rank, reply in sorted(self.workers.request_each(msg, timeout=120).items()):
                if reply.get("ok"):
                    w.files.append(reply["path"])
                else:
                    w.errors.append(f"TP{rank}: {reply.get('error')}")
        self.log.log(f"Profiling done. Traces are saved to: {w.output_dir}")
        w.done.set()


def write_cycles(
    path: Path,
    rank: int,
    tp_size: int,
    cycles: list[tuple[int, int, int | None]],
    env: Mapping[str, str],
    args: Mapping[str, Any],
) -> Path:
    """Write one rank's trace for recorded (start_ns, batch_size, adaptive steps) cycles."""
    return traces.write_rank_trace(
        path,
        rank=rank,
        tp_size=tp_size,
        cycles=[traces.Cycle(int(c[0]), int(c[1]), c[2] if len(c) > 2 else None) for c in cycles],
        env=env,
        mode=args["mode"],
        cuda_graph=bool(args["cuda_graph"]),
        accept_length=args.get("accept_length"),
        num_steps=int(args["num_steps"]),
        topk=int(args["topk"]),
        num_draft_tokens=int(args["num_draft_tokens"]),
        activities=tuple(args.get("activities") or ("CPU", "GPU")),
        pcie_ipc_max_bytes=args.get("pcie_ipc_max_bytes"),
        sglang_version=args.get("sglang_version"),
    )
