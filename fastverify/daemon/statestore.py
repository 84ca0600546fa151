"""Durable daemon state under `state_dir`: state.json, journal.jsonl, engine.pid, baselines.json.

- `state.json`: active profile + mode, last good profile + mode. Written atomically
  (`fastverify.durable`) so a crash leaves either the old or the new file, never a torn one.
- `journal.jsonl`: append-only, one JSON object per line, fsync'd per record: state
  transitions (`{"type": "transition", ...}`) and switch records (`{"type": "switch", ...}`).
- `engine.pid` (`pid_path`): the running engine's identity (pid, pgid, process start time,
  command line, a per-start random id that is also in the engine's environment) so a daemon
  restarted after kill -9 can find its engine and never mistake someone else's process
  for it; written and read by the engine's process group (group.py).
- `baselines.json`: measured baseline throughputs (POST /v1/baselines).
- `decision.json`: the newest tuning decision (POST /v1/decision, `fastverifyctl tune`).

Tolerance: a corrupted or truncated state.json is reported (kept as state.json.corrupt-N)
and rebuilt from the last good switch record of the journal; unreadable journal lines
(e.g. a torn final line after a power cut) are skipped and counted.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from fastverify.durable import append_jsonl, atomic_write_json, fsync_dir, scan_jsonl

log = logging.getLogger("fastverifyd.state")

STATE_VERSION = 1
JOURNAL_MAX_BYTES = 16 * 1024 * 1024
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
        self.pid_path = self.dir / "engine.pid"
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
        """Append one record whole, or raise and leave the journal as it was; the failure
        holds in `journal_problem` (status findings) until an append succeeds again."""
        with self._lock:
            try:
                self._rotate_if_large()
                append_jsonl(self.journal_path, record, sort_keys=True, compact=False)
            except OSError as exc:
                full = "state dir full: " if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
                self.journal_problem = (
                    f"{full}cannot append to {self.journal_path} ({exc.strerror or exc}); "
                    f"a {record.get('type', 'record')} record was not written (free space "
                    f"in {self.dir})"
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

    def _rotate_if_large(self) -> None:
        """Keep the journal bounded: past JOURNAL_MAX_BYTES the file becomes journal.1.jsonl
        (replacing the previous one) and a new journal starts; readers see both."""
        try:
            size = self.journal_path.stat().st_size
        except FileNotFoundError:
            return
        if size > self.journal_max_bytes:
            os.replace(self.journal_path, self.journal_old_path)
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

    def history(self) -> list[dict[str, Any]]:
        return [r for r in self.read_journal() if r.get("type") == "switch"]

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
