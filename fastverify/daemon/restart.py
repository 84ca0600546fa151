"""The crash-restart policy, pure: given crash times and the clock, restart when and how often.

`RestartPolicy(window_s, backoff_s=(first, cap), burst)`: crash n (counted within the last
`window_s` seconds) waits `min(first * 2**(n-1), cap)` seconds before the restart; more than
`burst` crashes within the window means give up (FAILED). `CrashWindow` holds the crash
times (monotonic seconds) and answers `record(now) -> Decision`. No threads, no I/O, no
clock of its own: the caller passes `now`, so tests drive it in microseconds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastverify.config.fields import RestartConfig


@dataclass(frozen=True)
class RestartPolicy:
    window_s: float
    backoff_s: tuple[float, float]
    burst: int

    @classmethod
    def from_config(cls, restart: RestartConfig) -> RestartPolicy:
        first, cap = restart.backoff_s
        return cls(
            float(restart.window_s),
            (float(first), float(cap)),
            int(restart.burst),
        )

    def delay(self, n: int) -> float:
        """Seconds to wait before restart number `n` (1-based)."""
        first, cap = self.backoff_s
        return float(min(first * (2 ** max(0, n - 1)), cap))


@dataclass(frozen=True)
class Decision:
    """What to do after a crash: `give_up` (FAILED) or restart after `delay_s`."""

    n: int  # crashes within the window, this one included
    give_up: bool
    delay_s: float
    message: str


class CrashWindow:
    """Crash times within the policy's window (not thread-safe: the controller serialises)."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._times: deque[float] = deque()

    def __len__(self) -> int:
        return len(self._times)

    def _trim(self, now: float) -> None:
        while self._times and now - self._times[0] > self.policy.window_s:
            self._times.popleft()

    def record(self, now: float) -> Decision:
        """Count one crash at `now` and decide."""
        self._times.append(now)
        return self.decide(now)

    def decide(self, now: float) -> Decision:
        """Decide for the crashes already recorded (the last one counts as the current)."""
        self._trim(now)
        n = len(self._times)
        p = self.policy
        if n > p.burst:
            msg = f"{n} crashes within {p.window_s:.0f} s (burst limit {p.burst})"
            return Decision(n, True, 0.0, msg)
        delay = p.delay(n)
        return Decision(n, False, delay, f"restart {n} in {delay:.2f} s (crash {n}/{p.burst})")

    def clear(self) -> None:
        """A healthy start after an explicit operation forgets earlier crashes."""
        self._times.clear()

    def retune(self, policy: RestartPolicy) -> None:
        """Adopt a reloaded policy, keeping the crash times."""
        self.policy = policy
