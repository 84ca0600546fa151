"""Durable daemon state under `state_dir`: state.json, journal.jsonl, engine.pid, baselines.json.

- `state.json`: active profile + mode, last good profile + mode. Written atomically
  (`fastverify.durable`) so a crash leaves either the old or the new file, never a torn one.
- `journal.jsonl`: append-only, one JSON object per line, fsync'd per record: state
  transitions (`{"type": "transition", ...}`) and switch records (`{"type": "switch", ...}`).
- `engine.pid` (`pid_path`): the running engine's identity (pid, pgid, process start time,
  command line, a per-start random id that is also in the engine's environment) so a daemon
  restarted after kill -9 can find its engine and never mistake someone else's process
  for it; written and read by the engine's process group (group.py).
- `decisions.jsonl`: recorded tuning decisions (POST /v1/decision), a journal of their own
  (rotated to decisions.1.jsonl past DECISIONS_MAX_BYTES) so that no number of them can
  rotate an operation or crash record out of journal.jsonl, which only the daemon writes.
- `baselines.json`: measured baseline throughputs (POST /v1/baselines).
- `decision.json`: the newest tuning decision (POST /v1/decision, `fastverifyctl tune`).

Tolerance: a corrupted or truncated state.json is reported (kept as state.json.corrupt-N)
and rebuilt from the last good switch record of the journal; unreadable journal lines
(e.g. a torn final line after a power cut) are skipped and counted.

History (`history(n, before)`) reads the journals from their ends, a block at a time, and
stops at `n` records: its memory is a page's, whatever the journals' size.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastverify.api_models import HISTORY_PAGE_MAX
from fastverify.durable import append_jsonl, atomic_write_json, fsync_dir, scan_jsonl

log = logging.getLogger("fastverifyd.state")

STATE_VERSION = 1
JOURNAL_MAX_BYTES = 16 * 1024 * 1024
DECISIONS_MAX_BYTES = 4 * 1024 * 1024
READ_BLOCK = 64 * 1024
MAX_LINE = 256 * 1024  # a longer journal line is not one the daemon wrote: skipped
KEEP_START_LOGS = 50
FULL_BELOW = 64 * 1024  # a file system with less left cannot take an engine log's next lines


class StateStore:
    """Load/save the daemon's durable state; thread-safe."""

    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_path = self.dir / "state.json"
        self.journal_path = self.dir / "journal.jsonl"
        self.journal_old_path = self.dir / "journal.1.jsonl"
        self.journal_max_bytes = JOURNAL_MAX_BYTES
        self.decisions_path = self.dir / "decisions.jsonl"
        self.decisions_old_path = self.dir / "decisions.1.jsonl"
        self.pid_path = self.dir / "engine.pid"
        self.standby_pid_path = self.dir / "engine-standby.pid"
        self.baselines_path = self.dir / "baselines.json"
        self.logs_dir = self.dir / "logs"
        self.logs_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # engine logs are never others' to read
            os.chmod(self.logs_dir, 0o750)
        self._lock = threading.Lock()
        self.findings: list[str] = []  # what load() found wrong, for status and the log
        self.journal_problem: str | None = None  # the last append failed (append_journal)

    # -- state.json ---------------------------------------------------------------------
    def load_state(self) -> dict[str, Any]:
        """The saved state, or one rebuilt from the journal when the file is unusable."""
        try:
            raw = self.state_path.read_bytes()  # bad UTF-8 is corruption, not a crash
        except FileNotFoundError:
            return self._from_journal(reason=None)
        except OSError as exc:
            return self._from_journal(reason=f"cannot read {self.state_path}: {exc}")
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            if data.get("profile") is not None and not isinstance(data.get("profile"), str):
                raise ValueError("'profile' is not a string")
        except ValueError as exc:
            kept = self._keep_corrupt(self.state_path)
            return self._from_journal(
                reason=f"{self.state_path} is corrupted ({exc}); kept as {kept.name}"
            )
        self.read_journal()  # report unreadable journal lines at start-up too
        return data

    def _keep_corrupt(self, path: Path) -> Path:
        n = 1
        while (target := path.with_name(f"{path.name}.corrupt-{n}")).exists():
            n += 1
        os.replace(path, target)
        return target

    def _from_journal(self, reason: str | None) -> dict[str, Any]:
        state: dict[str, Any] = {}
        last_ok = None
        for rec in self.read_journal():
            if rec.get("type") == "switch" and rec.get("result") in ("ok", "rolled_back"):
                last_ok = rec
        if last_ok is not None:
            served = last_ok.get("serving") or {
                "profile": last_ok.get("profile"),
                "mode": last_ok.get("mode"),
            }
            state = {
                "profile": served.get("profile"),
                "mode": served.get("mode"),
                "last_good": dict(served),
            }
        if reason:
            how = (
                f"recovered profile {state['profile']}/{state['mode']} from the journal"
                if state
                else "no usable journal record; starting from defaults"
            )
            self.findings.append(f"{reason}: {how}")
            log.warning("%s: %s", reason, how)
        return state

    def save_state(self, state: dict[str, Any]) -> None:
        data = dict(state, version=STATE_VERSION, updated_at=time.time())
        with self._lock:
            atomic_write_json(self.state_path, data)

    def check_writable(self, reserve: int = 1 << 20) -> str | None:
        """Why the state dir cannot take an operation's writes (state, pid file, journal,
        engine log), or None: writes and fsyncs `reserve` bytes to a probe file, removes it."""
        probe = self.dir / ".write-probe"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                left = reserve
                while left > 0:
                    left -= os.write(fd, b"\0" * min(left, 65536))
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            return f"state dir {self.dir} is not writable ({exc.strerror or exc})"
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()
        return None

    # -- journal.jsonl ------------------------------------------------------------------
    def append_journal(self, record: dict[str, Any]) -> None:
        """An operation, transition or crash record (the daemon's own) to journal.jsonl."""
        self._append(self.journal_path, self.journal_old_path, self.journal_max_bytes, record)

    def _append(self, path: Path, old: Path, limit: int, record: dict[str, Any]) -> None:
        """Append one record whole, or raise and leave the journal as it was; the failure
        holds in `journal_problem` (status findings) until an append succeeds again."""
        with self._lock:
            try:
                self._rotate_if_large(path, old, limit)
                append_jsonl(path, record, sort_keys=True, compact=False)
            except OSError as exc:
                full = "state dir full: " if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
                self.journal_problem = (
                    f"{full}cannot append to {path} ({exc.strerror or exc}); a "
                    f"{record.get('type', 'record')} record was not written (free space in "
                    f"{self.dir})"
                )
                raise
            self.journal_problem = None

    def full(self) -> str | None:
        """`state dir full: ...` when the state dir's file system has less than FULL_BELOW
        bytes left for this process (None: room, or it cannot be told)."""
        try:
            vfs = os.statvfs(self.dir)
        except OSError:
            return None
        blocks = vfs.f_bfree if os.geteuid() == 0 else vfs.f_bavail
        free = blocks * vfs.f_frsize
        if free >= FULL_BELOW:
            return None
        return f"state dir full: {self.dir} has {free} bytes left"

    def append_decision(self, record: dict[str, Any]) -> None:
        """A recorded decision's history line to decisions.jsonl (its own journal)."""
        self._append(self.decisions_path, self.decisions_old_path, DECISIONS_MAX_BYTES, record)

    def _rotate_if_large(self, path: Path, old: Path, limit: int) -> None:
        """Keep a journal bounded: past `limit` bytes the file becomes its `.1` (replacing
        the previous one) and a new one starts; readers see both."""
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return
        if size > limit:
            os.replace(path, old)
            fsync_dir(self.dir)

    def read_journal(self) -> list[dict[str, Any]]:
        """Every readable record (rotated part first); unreadable lines are skipped and
        reported once."""
        out: list[dict[str, Any]] = []
        bad = 0
        for path in (self.journal_old_path, self.journal_path):
            records, unreadable = scan_jsonl(path)
            out += records
            bad += unreadable
        if bad:
            msg = f"{self.journal_path}: skipped {bad} unreadable line(s)"
            if msg not in self.findings:
                self.findings.append(msg)
                log.warning(msg)
        return out

    def history(
        self, n: int = HISTORY_PAGE_MAX, before: float | None = None
    ) -> list[dict[str, Any]]:
        """The newest `n` history records (operations, crashes' restarts, decisions) that
        finished before `before`, oldest first; records of the same `finished_at` as the
        page's oldest all come with it (the next page starts before that time)."""
        streams = [
            _newest_first((self.journal_path, self.journal_old_path), before),
            _newest_first((self.decisions_path, self.decisions_old_path), before),
        ]
        page: list[dict[str, Any]] = []
        merged = heapq.merge(*streams, key=lambda r: -_finished(r))
        for rec in merged:
            at = _finished(rec)
            if before is not None and at >= before:
                continue
            if len(page) >= n and at != _finished(page[-1]):
                break
            page.append(rec)
        page.reverse()
        return page

    # -- logs/ -------------------------------------------------------------------------
    def prune_logs(self, keep: int = KEEP_START_LOGS, protect: tuple[Path, ...] = ()) -> int:
        """Delete all but the newest `keep` per-start logs (and their NCCL debug dirs)."""
        logs = sorted(self.logs_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)
        removed = 0
        for path in logs[:-keep] if keep > 0 else logs:
            if path in protect:
                continue
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
            debug = path.with_suffix(".nccl")
            if debug.is_dir():
                import shutil

                shutil.rmtree(debug, ignore_errors=True)
        return removed

    # -- baselines.json -----------------------------------------------------------------
    def load_baselines(self) -> dict[str, Any]:
        return self.load_json(self.baselines_path.name)

    def save_baselines(self, data: dict[str, Any]) -> None:
        self.save_json(self.baselines_path.name, data)

    # -- small JSON documents (decision.json) ----------------------------------------------
    def load_json(self, name: str) -> dict[str, Any]:
        """The JSON object in `name` under the state directory; {} when it is missing, not
        an object, or unreadable (then said in `findings`)."""
        path = self.dir / name
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self.findings.append(f"{path} is unreadable ({exc}); ignored")
            return {}

    def save_json(self, name: str, data: dict[str, Any]) -> None:
        with self._lock:
            atomic_write_json(self.dir / name, data)


def _finished(rec: dict[str, Any]) -> float:
    """When a journal record was written: `finished_at` (operations, decisions), `ts`."""
    at = rec.get("finished_at", rec.get("started_at", rec.get("ts")))
    return float(at) if isinstance(at, int | float) else 0.0


SLACK_LINES = 128  # records past a found place: append order is time order but for these


def _newest_first(paths: tuple[Path, ...], before: float | None) -> Iterator[dict[str, Any]]:
    """History records (`type` switch) of a journal and its rotated part, newest first by
    `finished_at` (each file is in append order, which is finish order but for records
    finished together; a window of 64 re-sorts those). With `before`, each file is read
    back from the place a binary search on its lines' times finds (plus SLACK_LINES)."""
    lines = itertools.chain.from_iterable(_lines_backward(p, before) for p in paths)
    window: list[tuple[float, int, dict[str, Any]]] = []
    order = itertools.count()
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("type") != "switch":
            continue
        heapq.heappush(window, (-_finished(rec), next(order), rec))
        if len(window) > 64:
            yield heapq.heappop(window)[2]
    while window:
        yield heapq.heappop(window)[2]


def _line_time_after(fh: Any, pos: int) -> float | None:
    """The time of the first whole record that starts after `pos` (None: none there)."""
    fh.seek(pos)
    lines = fh.read(READ_BLOCK).split(b"\n")
    for line in lines[1 if pos > 0 else 0 : -1]:  # whole lines only
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            return _finished(rec)
    return None


def _end_before(fh: Any, size: int, before: float) -> int:
    """An offset of `fh` after which every line's time is >= `before`, SLACK_LINES lines
    past the place a binary search finds (the lines are in append order)."""
    lo, hi = 0, size
    while hi - lo > READ_BLOCK:
        mid = (lo + hi) // 2
        at = _line_time_after(fh, mid)
        if at is not None and at < before:
            lo = mid
        else:
            hi = mid
    fh.seek(hi)
    ahead = fh.read(MAX_LINE)
    end, n = 0, 0
    while n < SLACK_LINES and (nl := ahead.find(b"\n", end)) >= 0:
        end, n = nl + 1, n + 1
    return min(size, hi + (end if n == SLACK_LINES else len(ahead)))


def _lines_backward(path: Path, before: float | None = None) -> Iterator[bytes]:
    """The non-blank lines of `path`, last first, read READ_BLOCK bytes at a time from the
    end (from `_end_before` with `before`); a line longer than MAX_LINE is skipped."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 (a generator holds it)
    except FileNotFoundError:
        return
    with fh:
        pos = fh.seek(0, os.SEEK_END)
        if before is not None:
            pos = _end_before(fh, pos, before)
        tail, overlong = b"", False
        while pos > 0:
            step = min(READ_BLOCK, pos)
            pos -= step
            fh.seek(pos)
            parts = (fh.read(step) + tail).split(b"\n")
            tail = parts.pop(0)  # may go on in the block before
            if overlong and parts:
                parts.pop()  # the start of the overlong line
                overlong = False
            for line in reversed(parts):
                if line.strip():
                    yield line
            if len(tail) > MAX_LINE:
                tail, overlong = b"", True
        if tail.strip() and not overlong:
            yield tail
