"""Rank processes of the GPU experiments (preflight, derive-tuner, rehearse): the directory
they work in, start one in a session of its own with its output in a file, stop exactly that
session, read its report."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def rank_workdir(keep_in: str, prefix: str) -> Iterator[Path]:
    """Where a run's ranks write their jobs, reports and logs: `keep_in` (created, kept
    after the run) or, when it is empty, a temporary directory removed after the run."""
    if keep_in:
        workdir = Path(keep_in)
        workdir.mkdir(parents=True, exist_ok=True)
        yield workdir
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


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


def rank_reports(
    procs: Sequence[subprocess.Popen],
    outs: Sequence[Path],
    log_of: Callable[[int], Path],
    **failed: Any,
) -> list[dict[str, Any]]:
    """Each rank's JSON report (its `--out` file); a rank that wrote none is reported
    `failed` with the last error line of its log (and the `failed` fields). Every report gets
    the rank's exit code."""
    reports: list[dict[str, Any]] = []
    for rank, (proc, out) in enumerate(zip(procs, outs, strict=True)):
        try:
            doc = json.loads(out.read_text())
        except (OSError, ValueError):
            tail = ""
            with contextlib.suppress(OSError):
                tail = log_of(rank).read_text(errors="replace")
            doc = {"rank": rank, "status": "failed", **failed}
            doc["error"] = last_error(tail) or f"rank exited with {proc.returncode}"
        doc["returncode"] = proc.returncode
        reports.append(doc)
    return reports


def last_error(text: str) -> str | None:
    """The last line of a rank's output that mentions an error, else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line[:300]
    return lines[-1][:300] if lines else None


def rank_env(
    base: Mapping[str, str],
    rank: int,
    world: int,
    port: int,
    nccl_log: Path,
    gpus: int = 0,
) -> dict[str, str]:
    """`base` plus what one torch.distributed rank needs (its NCCL debug file, rendezvous).
    LOCAL_RANK, the GPU the rank uses, is its rank; with `gpus` fewer than `world` (ranks
    sharing GPUs, `device_of`) it is rank mod gpus."""
    env = dict(base)
    env.update(
        NCCL_DEBUG_FILE=str(nccl_log),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(device_of(rank, world, gpus)),
        WORLD_SIZE=str(world),
        PYTHONUNBUFFERED="1",
    )
    return env


def device_of(rank: int, world: int, gpus: int) -> int:
    """The GPU index of `rank`: its rank, or rank mod `gpus` when `world` ranks share fewer
    GPUs (0 < gpus < world)."""
    return rank % gpus if 0 < gpus < world else rank


def env_mismatch(reports: Sequence[dict[str, Any]], want: Mapping[str, str]) -> list[str]:
    """NCCL variables that differ between `want` and what any rank reported it ran with
    (`nccl_env`; the per-rank NCCL_DEBUG_FILE aside)."""
    got = [
        {k: v for k, v in r["nccl_env"].items() if k != "NCCL_DEBUG_FILE"}
        for r in reports
        if r.get("nccl_env") is not None
    ]
    return sorted(
        {k for g in got for k in set(g) ^ set(want)}
        | {k for g in got for k in set(g) & set(want) if g[k] != want[k]}
    )
