"""After READY: is the engine still answering? A thread per serving engine polls SGLang's own
liveness probe, `GET /health_generate`, and reports an unresponsive engine once.

SGLang 0.5.23 (srt/entrypoints/http_server.py) answers it with a 1-token generation: 200 as
soon as its detokenizer produced anything since the request came in (a busy server answers
at once, with no extra work), 503 while starting or shutting down, and 503 after
SGLANG_HEALTH_CHECK_TIMEOUT seconds (20) without output, logging "Health check failed.
Server couldn't get a response from detokenizer for last N seconds ...". A scheduler stuck
in an NCCL collective keeps the process, its /health and its HTTP server alive: only this
probe sees it.

Verdicts: no answer within `timeout_s` (the HTTP server itself is stuck) is unresponsive at
once; `failures` non-200 answers in a row is unresponsive. The failure (reason
`engine_unresponsive`) quotes SGLang's "Health check failed" line when the engine logged
one. The watch is the controller's (crashes.py starts and stops it); a crash it reports
goes through the restart policy like an exit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastverify.daemon.failures import Failure
from fastverify.sglang import client, loglines

log = logging.getLogger("fastverifyd.watch")


@dataclass(frozen=True)
class WatchPolicy:
    interval_s: float  # between polls (0: no watch)
    timeout_s: float  # one poll without an answer this long: unresponsive
    failures: int  # non-200 answers in a row: unresponsive

    @classmethod
    def from_config(cls, daemon_cfg: object) -> WatchPolicy:
        return cls(
            float(getattr(daemon_cfg, "watch_interval_s", 30.0)),
            float(getattr(daemon_cfg, "watch_timeout_s", 40.0)),
            int(getattr(daemon_cfg, "watch_failures", 3)),
        )


def file_tail(path: str, limit: int = 65536) -> list[str]:
    """The last lines of the engine's log file as it is now: SGLang (and the sim) write and
    flush its "Health check failed" line before answering 503, so it is there already,
    whatever the daemon's own log reader has read so far. [] when unreadable."""
    if not path:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def sglang_line(lines: list[str]) -> str | None:
    """The last "Health check failed" line of the engine's recent output, if any."""
    for line in reversed(lines):
        i = line.find(loglines.HEALTH_CHECK_FAILED_TEXT)
        if i >= 0:
            return line[i:].strip()
    return None


class EngineWatch(threading.Thread):
    """Polls `url`/health_generate every `policy.interval_s` while `serving()` holds; calls
    `on_unresponsive(failure)` once, then ends. `stop()` ends it early."""

    def __init__(
        self,
        url: str,
        policy: WatchPolicy,
        serving: Callable[[], bool],
        on_unresponsive: Callable[[Failure], None],
        recent_lines: Callable[[], list[str]],
        *,
        log_path: str = "",
        pid: int | None = None,
    ) -> None:
        super().__init__(name=f"watch-{pid}", daemon=True)
        self.url = url
        self.policy = policy
        self.serving = serving
        self.on_unresponsive = on_unresponsive
        self.recent_lines = recent_lines
        self.log_path = log_path
        self.pid = pid
        self._stop = threading.Event()
        self.polls = 0  # answered or not, for status and tests
        self.failed_in_row = 0

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        p = self.policy
        while not self._stop.wait(p.interval_s):
            if not self.serving():
                return
            t0 = time.monotonic()
            verdict = self._poll()
            self.polls += 1
            if verdict is None or self._stop.is_set() or not self.serving():
                continue
            self._stop.set()
            log.warning("engine pid %s unresponsive after %.1f s: %s", self.pid,
                        time.monotonic() - t0, verdict.message)  # fmt: skip
            self.on_unresponsive(verdict)
            return

    def _poll(self) -> Failure | None:
        p = self.policy
        try:
            status, _ = client.request(self.url, client.HEALTH_GENERATE, timeout=p.timeout_s)
        except TimeoutError:
            return self._failure(
                f"{client.HEALTH_GENERATE} gave no answer within {p.timeout_s:.0f} s "
                "(the server's HTTP loop itself is stuck)"
            )
        except (OSError, ValueError) as exc:
            status, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = f"HTTP {status}"
        if status == 200:
            self.failed_in_row = 0
            return None
        self.failed_in_row += 1
        if self.failed_in_row < p.failures:
            log.info("engine pid %s: %s answered %s (%d/%d in a row)", self.pid,
                     client.HEALTH_GENERATE, why, self.failed_in_row, p.failures)  # fmt: skip
            return None
        return self._failure(f"{client.HEALTH_GENERATE} failed {self.failed_in_row} times in a "
                             f"row (last: {why})")  # fmt: skip

    def _failure(self, what: str) -> Failure:
        line = sglang_line(file_tail(self.log_path)) or sglang_line(self.recent_lines())
        quoted = f"; SGLang: {line}" if line else ""
        return Failure(
            "engine_unresponsive",
            f"engine pid {self.pid} stopped answering while its process lives: {what}{quoted}",
            log=self.log_path,
            line=line,
        )
