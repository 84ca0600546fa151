"""Acceptance from SGLang's accepted-drafts histograms: the accept length at every step count.

SGLang 0.5.23 puts `spec_correct_drafts_histogram` in a finished request's `meta_info`:
entry j counts the verify passes of that request that accepted j drafts (the bonus token
excluded). With topk 1 the drafts form a chain, so a pass that accepted j drafts at K steps
would have accepted min(j, k) at k <= K steps, and one histogram measured at K steps gives

    L(k) = 1 + sum_j min(j, k) h_j / sum_j h_j        for every k <= K.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def add_histograms(histograms: Iterable[Sequence[int]]) -> list[int]:
    """Sum per-request histograms entry by entry (they differ in length: SGLang grows each
    one up to the largest count that request saw)."""
    total: list[int] = []
    for h in histograms:
        if len(h) > len(total):
            total.extend([0] * (len(h) - len(total)))
        for j, n in enumerate(h):
            total[j] += int(n)
    return total


@dataclass(frozen=True)
class AcceptCurve:
    """Accept length (bonus token included) per step count, from one histogram."""

    histogram: tuple[int, ...]
    steps: int  # the step count it was measured at (entries above it are impossible)

    @classmethod
    def from_histogram(cls, histogram: Sequence[int], steps: int | None = None) -> AcceptCurve:
        h = tuple(int(n) for n in histogram)
        if not h or sum(h) <= 0 or any(n < 0 for n in h):
            raise ValueError(
                f"an accepted-drafts histogram needs non-negative counts and at least one "
                f"verify pass, got {list(h)}"
            )
        k = len(h) - 1 if steps is None else int(steps)
        if len(h) - 1 > k:
            raise ValueError(f"histogram has entries above its step count {k}: {list(h)}")
        return cls(h, k)

    @property
    def verifies(self) -> int:
        return sum(self.histogram)

    def length(self, k: int) -> float:
        """L(k) for 0 <= k <= steps (L(0) = 1: no drafts, the target's own token)."""
        if not 0 <= k <= self.steps:
            raise ValueError(f"the curve covers steps 0..{self.steps}, not {k}")
        n = self.verifies
        return 1.0 + sum(min(j, k) * c for j, c in enumerate(self.histogram)) / n

    def curve(self) -> dict[str, float]:
        """{"1": L(1), ..., "K": L(K)} (what bench's `accept_curve` holds)."""
        return {str(k): round(self.length(k), 4) for k in range(1, self.steps + 1)}
