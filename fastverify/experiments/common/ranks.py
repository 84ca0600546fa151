"""Rank processes of the GPU experiments (preflight, derive-tuner, rehearse): the one home of
starting and supervising a group of N torch.distributed ranks.

`RankGroup` owns one group: the rendezvous port (`rendezvous_port`), each rank's environment
(`rank_env`), its files (report, NCCL debug log, stdout) in the run's directory
(`rank_workdir`), the wait (a timeout, peers stopped once one rank died, ranks that reported
but linger in teardown stopped), stopping exactly the sessions it started (never anything
else), and each rank's report. The rank side of the same contract is rank_support.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

EventFn = Callable[[str], None]
PEER_GRACE_S = 10.0  # a rank died: its peers get this long to report before they are stopped
NOTE_EVERY_S = 15.0  # "still running" on long waits
POLL_S = 0.05
RENDEZVOUS_PORTS_FROM = 20000
# what every rank group runs with: NCCL's version, the variables it confirmed ("... set by
# environment to ..."), and its algorithm/protocol per message size (TUNING lines)
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"}


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


def rendezvous_port(rng: random.Random | None = None) -> int:
    """A free TCP port for the ranks' rendezvous, below the kernel's ephemeral range when
    there is room: the port is free now, but rank 0 binds it only after starting Python and
    torch, and in that window every outgoing connection on the machine takes an ephemeral
    port (a port from `bind(0)` is one of them). Falls back to `bind(0)`."""
    low = ephemeral_low()
    rng = rng or random.Random()
    for _ in range(50):
        port = rng.randrange(RENDEZVOUS_PORTS_FROM, low) if low > RENDEZVOUS_PORTS_FROM else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The first port of the kernel's ephemeral range (0 when unknown)."""
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


ArgvFn = Callable[[int, Path], Sequence[str]]  # (rank, its report path) -> the rank's argv


class RankGroup:
    """One group of `world` rank processes in `workdir`, their files named by `tag`:
    `TAG.rankN<report_suffix>` (the report), `TAG.rankN.nccl.log`, `TAG.rankN.stdout`.

    Use as a context manager: leaving it by an exception (Ctrl-C, a rank that cannot start)
    stops every rank started."""

    def __init__(self, workdir: Path, tag: str, world: int, report_suffix: str = ".json"):
        self.workdir = Path(workdir)
        self.tag = tag
        self.world = world
        self.report_suffix = report_suffix
        self.procs: list[subprocess.Popen] = []
        self.env: dict[str, str] = {}
        self.started_at = 0.0

    # -- files
    def report_path(self, rank: int) -> Path:
        return self.workdir / f"{self.tag}.rank{rank}{self.report_suffix}"

    def nccl_log(self, rank: int) -> Path:
        return self.workdir / f"{self.tag}.rank{rank}.nccl.log"

    def stdout(self, rank: int) -> Path:
        return self.workdir / f"{self.tag}.rank{rank}.stdout"

    @property
    def reports_paths(self) -> list[Path]:
        return [self.report_path(r) for r in range(self.world)]

    # -- lifecycle
    def __enter__(self) -> RankGroup:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is not None:
            self.stop()

    def start(
        self,
        env: Mapping[str, str],
        argv_of: ArgvFn,
        gpus: int = 0,
        port: int | None = None,
    ) -> None:
        """Start every rank with `env` plus its rendezvous variables (`rank_env`; `gpus`:
        ranks sharing that many GPUs). A rank that cannot start stops the ones before it."""
        self.env = dict(env)
        port = port or rendezvous_port()
        self.started_at = time.perf_counter()
        try:
            for rank in range(self.world):
                out, log = self.report_path(rank), self.nccl_log(rank)
                for stale in (out, log):
                    stale.unlink(missing_ok=True)
                renv = rank_env(self.env, rank, self.world, port, log, gpus)
                self.procs.append(start_rank(argv_of(rank, out), renv, self.stdout(rank)))
        except BaseException:
            self.stop()
            raise

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def stop(self) -> list[int]:
        """SIGKILL the sessions of the ranks still running; the rank indices it stopped."""
        running = [i for i, p in enumerate(self.procs) if p.poll() is None]
        for p in self.procs:
            kill_rank(p)
        return running

    def wait(
        self,
        timeout_s: float,
        label: str = "",
        on_event: EventFn | None = None,
        report_grace_s: float | None = None,
        peer_grace_s: float = PEER_GRACE_S,
        on_poll: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Wait for every rank, from the start, at most `timeout_s`. A rank that died (exit
        status other than 0 and 1) leaves its peers `peer_grace_s` to report; with
        `report_grace_s`, ranks that all wrote their reports get that long to exit (NCCL
        teardown can block). Then the ranks still running are stopped. `on_poll` runs on
        every look at the ranks (reading what they stream). Returns {"timed_out",
        "stopped_after_report", "stopped": [rank indices this group SIGKILLed]} (a SIGKILL
        of any other rank came from outside, e.g. the OOM killer)."""
        t0 = self.started_at or time.perf_counter()
        first_bad: float | None = None
        reported_at: float | None = None
        last_note = t0
        try:
            while True:
                alive = self.running()
                if on_poll is not None:
                    on_poll()  # after the look at the ranks: a rank gone has written all
                if not alive:
                    return {"timed_out": False, "stopped_after_report": False, "stopped": []}
                now = time.perf_counter()
                if first_bad is None and any(p.poll() not in (None, 0, 1) for p in self.procs):
                    first_bad = now
                if report_grace_s is not None:
                    if reported_at is None and all(o.exists() for o in self.reports_paths):
                        reported_at = now
                    if reported_at is not None and now - reported_at > report_grace_s:
                        stopped = self.stop()
                        return {"timed_out": False, "stopped_after_report": True,
                                "stopped": stopped}  # fmt: skip
                timed_out = now - t0 > timeout_s
                if timed_out or (first_bad is not None and now - first_bad > peer_grace_s):
                    stopped = self.stop()
                    return {"timed_out": timed_out, "stopped_after_report": False,
                            "stopped": stopped}  # fmt: skip
                if on_event and now - last_note > NOTE_EVERY_S:
                    on_event(f"  {label}: still running ({now - t0:.0f} s)")
                    last_note = now
                time.sleep(POLL_S)
        except BaseException:
            self.stop()
            raise

    # -- what the ranks left
    def reports(self, **failed: Any) -> list[dict[str, Any]]:
        """Each rank's JSON report (`rank_reports`; `failed`: fields of a missing one)."""
        return rank_reports(self.procs, self.reports_paths, self.stdout, **failed)

    def nccl_summaries(self) -> list[dict[str, Any]]:
        """Each rank's NCCL debug log read (fastverify.nccl.loglines.summarise)."""
        from fastverify.nccl.loglines import summarise

        out = []
        for rank in range(self.world):
            log = self.nccl_log(rank)
            out.append(summarise(log.read_text(errors="replace") if log.exists() else ""))
        return out

    def nccl_env_mismatch(self, reports: Sequence[dict[str, Any]]) -> list[str]:
        """NCCL variables a rank reported with another value than the group was given."""
        want = {k: v for k, v in self.env.items() if k.startswith("NCCL_")}
        return env_mismatch(reports, want)

    def env_delivered(self, reports: Sequence[dict[str, Any]]) -> tuple[bool, list[str]]:
        """(every rank reported the NCCL variables it ran with and they are the group's,
        the variables that differ)."""
        mismatch = self.nccl_env_mismatch(reports)
        reported = bool(reports) and all(r.get("nccl_env") is not None for r in reports)
        return reported and not mismatch, mismatch


def nccl_digest(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What a group's NCCL logs (`RankGroup.nccl_summaries`) say for a report: rank 0's
    version and the variables NCCL confirmed, every rank's warnings (the first ten)."""
    from fastverify.nccl.loglines import summarise

    first = summaries[0] if summaries else summarise("")
    return {
        "version": first["version"],
        "confirmed": first["confirmed"],
        "warnings": sorted({w for s in summaries for w in s["warnings"]})[:10],
    }


def report_rows(reports: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Each rank's report cut to `keys` (those it has), for the run's JSON."""
    return [{k: r.get(k) for k in keys if r.get(k) is not None} for r in reports]
