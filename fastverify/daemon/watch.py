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
once; `failures` non-200 answers in a row is unresponsive. After a failed check the next one
comes `retry_s` after its answer (not `interval_s`), so the time from the first failed check
to the verdict is (failures - 1) x (retry_s + the check's own time: SGLang's 20 s before its
503); `detection_s()` says it. The failure (reason `engine_unresponsive`) quotes SGLang's
"Health check failed" line when the engine logged one. `health()` is what status shows
while checks fail (how many, since when, the last answer). The watch is the controller's
(crashes.py starts and stops it); a crash it reports goes through the restart policy like
an exit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastverify.daemon.failures import Failure
from fastverify.sglang import client, loglines

if TYPE_CHECKING:
    from fastverify.config.fields import WatchConfig

log = logging.getLogger("fastverifyd.watch")


# SGLang's own wait before /health_generate answers 503 (SGLANG_HEALTH_CHECK_TIMEOUT, 20 s
# in 0.5.23's srt/environ.py): how long a failed check of a hung scheduler takes.
SGLANG_HEALTH_CHECK_S = 20.0


@dataclass(frozen=True)
class WatchPolicy:
    interval_s: float  # between polls while they pass (0: no watch)
    timeout_s: float  # one poll without an answer this long: unresponsive
    failures: int  # non-200 answers in a row: unresponsive
    retry_s: float  # after a failed poll, the next one this soon

    @classmethod
    def from_config(cls, watch: WatchConfig) -> WatchPolicy:
        return cls(
            float(watch.interval_s),
            float(watch.timeout_s),
            int(watch.failures),
            float(watch.retry_s),
        )

    def detection_s(self, check_s: float = SGLANG_HEALTH_CHECK_S) -> float:
        """Seconds from the first failed check to the verdict when each check takes
        `check_s` (SGLang's 503 after 20 s; at most `timeout_s`)."""
        return (self.failures - 1) * (self.retry_s + min(check_s, self.timeout_s))

    def worst_case_s(self, check_s: float = SGLANG_HEALTH_CHECK_S) -> float:
        """Seconds from an engine's hang to the verdict, at worst: it hangs just after a
        check passed (a whole interval), then its first check fails after `check_s` (or
        gives no answer within `timeout_s`, a verdict at once), then the others."""
        if check_s >= self.timeout_s:
            return self.interval_s + self.timeout_s
        return self.interval_s + check_s + self.detection_s(check_s)

    def describe(self) -> str:
        """When a hang becomes a verdict, in words (the daemon logs it as each watch starts)."""
        detect = self.detection_s()
        first = "its first failed check"
        when = f"{detect:g} s after {first}" if detect else f"at {first}"
        worst = self.worst_case_s()
        return f"a hung engine is declared {when} (at most {worst:g} s after it hangs)"


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


# Held by every check of every watch: `quiet()` holds it, so no check runs inside, whether
# of the engine serving now or of one whose watch starts meanwhile (after a switch).
_CHECKING = threading.Lock()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No watch check runs inside (one in flight ends first): a caller telling whether the
    engine serves traffic (a trace capture's idle check) must not count the watch's own
    1-token generation as traffic."""
    with _CHECKING:
        yield


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
        self.failing_since: float | None = None  # wall clock of the first failed check
        self._failing_t0 = 0.0  # the same, monotonic
        self.last_failed: str | None = None  # what the last failed check got

    def stop(self) -> None:
        self._stop.set()

    def health(self) -> dict[str, Any]:
        """Status's view: checks so far, and while they fail how many, since when, the last
        answer, and how many in a row make the engine unresponsive."""
        n = self.failed_in_row
        since = time.strftime("%H:%M:%S UTC", time.gmtime(self.failing_since or 0))
        summary = (
            f"{n} failed check{'s' * (n != 1)} of {client.HEALTH_GENERATE} in a row since "
            f"{since} (last: {self.last_failed}; {self.policy.failures} make the engine "
            "unresponsive, a crash the restart policy handles)"
        )
        return {
            "checks": self.polls,
            "failed_checks": n,
            "failing_since": self.failing_since,
            "last_failed": self.last_failed,
            "failures_limit": self.policy.failures,
            "summary": summary if n else None,
        }

    def run(self) -> None:
        p = self.policy
        log.info("engine pid %s: checking %s every %g s; %s", self.pid, client.HEALTH_GENERATE,
                 p.interval_s, p.describe())  # fmt: skip
        while not self._stop.wait(p.retry_s if self.failed_in_row else p.interval_s):
            if not self.serving():
                return
            with _CHECKING:
                verdict = self._poll()
            self.polls += 1
            if verdict is None or self._stop.is_set() or not self.serving():
                continue
            self._stop.set()
            log.warning("engine pid %s unresponsive %.1f s after its first failed check: %s",
                        self.pid, time.monotonic() - self._failing_t0,
                        verdict.message)  # fmt: skip
            self.on_unresponsive(verdict)
            return

    def _failed(self, why: str) -> None:
        """One more failed check in a row (the first one starts the clock)."""
        if not self.failed_in_row:
            self.failing_since, self._failing_t0 = time.time(), time.monotonic()
            log.warning("engine pid %s: %s failed (%s); /readyz answers 503 until a check "
                        "passes", self.pid, client.HEALTH_GENERATE, why)  # fmt: skip
        self.failed_in_row += 1
        self.last_failed = why

    def _poll(self) -> Failure | None:
        p = self.policy
        try:
            status, _ = client.request(self.url, client.HEALTH_GENERATE, timeout=p.timeout_s)
        except TimeoutError:
            self._failed(f"no answer within {p.timeout_s:g} s")
            return self._failure(
                f"{client.HEALTH_GENERATE} gave no answer within {p.timeout_s:.0f} s "
                "(the server's HTTP loop itself is stuck)"
            )
        except (OSError, ValueError) as exc:
            status, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = f"HTTP {status}"
        if status == 200:
            if self.failed_in_row:
                log.info("engine pid %s: %s passes again after %d failed check(s)", self.pid,
                         client.HEALTH_GENERATE, self.failed_in_row)  # fmt: skip
            self.failed_in_row, self.failing_since, self.last_failed = 0, None, None
            return None
        self._failed(why)
        if self.failed_in_row < p.failures:
            log.info("engine pid %s: %s answered %s (%d/%d in a row)", self.pid,
                     client.HEALTH_GENERATE, why, self.failed_in_row, p.failures)  # fmt: skip
            return None
        return self._failure(f"{client.HEALTH_GENERATE} failed {self.failed_in_row} times in a "
                             f"row (last: {why})")  # fmt: skip

    def _failure(self, what: str) -> Failure:
        line = sglang_line(file_tail(self.log_path)) or sglang_line(self.recent_lines())
        quoted = f"; SGLang: {line}" if line else ""
        since = time.monotonic() - self._failing_t0
        return Failure(
            "engine_unresponsive",
            f"engine pid {self.pid} stopped answering while its process lives: {what}, "
            f"{since:.1f} s after its first failed check{quoted}",
            log=self.log_path,
            line=line,
        )
