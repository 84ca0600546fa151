"""Recorded acceptance as the plan uses it: the per-request accepted-drafts histograms of one
bench at K steps (topk 1), how uncertain their pooled accept length is, a stated lower
acceptance, and draws of accepted drafts per verify pass for replaying SGLang's controller.

- Passes of one request are correlated (its prompt decides how well the drafter guesses),
  so the interval of a pooled accept length comes from a cluster bootstrap: resample whole
  requests with replacement (`interval`), never passes as independent draws.
- "Acceptance falls by f" (`thinned`): every draft position is kept with probability f on
  top of what was accepted, so a pass that accepted j drafts accepts min(j, G) with
  P(G >= i) = f^i; the pooled L_f(k) = 1 + sum_j h_j sum_{i<=min(j,k)} f^i / sum_j h_j.
  `factor_for(length)` solves f for a stated accept length at K.
- `Draws`: a request's passes as a list to draw from (its own histogram), optionally thinned.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from fastverify.speculation.curve import AcceptCurve, add_histograms

Z95 = 1.959964
BOOTSTRAP_DRAWS = 400


@dataclass(frozen=True)
class Acceptance:
    """Per-request histograms (entry j: that request's passes that accepted j drafts) at
    `steps` draft steps."""

    requests: tuple[tuple[int, ...], ...]
    steps: int

    @classmethod
    def from_requests(cls, histograms: Sequence[Sequence[int]], steps: int) -> Acceptance:
        reqs = tuple(tuple(int(n) for n in h) for h in histograms if h and sum(h) > 0)
        if not reqs:
            raise ValueError("no request with a verify pass: nothing to plan with")
        if steps < 1:
            raise ValueError(f"acceptance is measured at >= 1 draft step, not {steps}")
        for h in reqs:
            if any(n < 0 for n in h) or len(h) - 1 > steps:
                raise ValueError(f"a request histogram {list(h)} does not fit {steps} steps")
        return cls(reqs, steps)

    @property
    def pooled(self) -> AcceptCurve:
        return AcceptCurve.from_histogram(add_histograms(self.requests), self.steps)

    @property
    def verifies(self) -> int:
        return sum(sum(h) for h in self.requests)

    def length(self, k: int, f: float = 1.0) -> float:
        """Pooled L(k), with every draft position kept with probability f (see above)."""
        return _length(add_histograms(self.requests), k, f)

    def factor_for(self, accept_length: float) -> float:
        """The f at which the pooled L(K) is `accept_length` (1.0 when it is not lower)."""
        if accept_length >= self.length(self.steps):
            return 1.0
        lo, hi = 0.0, 1.0
        for _ in range(50):
            mid = (lo + hi) / 2
            if self.length(self.steps, mid) < accept_length:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def resample(self, rng: random.Random) -> Acceptance:
        """One cluster-bootstrap replicate: as many requests, drawn with replacement."""
        n = len(self.requests)
        return Acceptance(tuple(self.requests[rng.randrange(n)] for _ in range(n)), self.steps)

    def bootstrap(self, k: int, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> list[float]:
        """Pooled L(k) of `draws` cluster-bootstrap replicates."""
        rng = random.Random(seed)
        per = [(sum(min(j, k) * c for j, c in enumerate(h)), sum(h)) for h in self.requests]
        n = len(per)
        out = []
        for _ in range(draws):
            acc = tot = 0
            for _ in range(n):
                a, t = per[rng.randrange(n)]
                acc += a
                tot += t
            out.append(1.0 + acc / tot)
        return out

    def stderr(self, k: int, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> float:
        """The cluster-bootstrap standard error of the pooled L(k)."""
        vals = self.bootstrap(k, draws, seed)
        mu = sum(vals) / len(vals)
        return math.sqrt(sum((v - mu) ** 2 for v in vals) / max(1, len(vals) - 1))

    def interval(self, k: int, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> tuple[float, float]:
        """95% interval of the pooled L(k): the point estimate +- 1.96 bootstrap standard
        errors (requests resampled whole)."""
        mid = self.length(k)
        half = Z95 * self.stderr(k, draws, seed)
        return mid - half, mid + half


def _length(hist: Sequence[int], k: int, f: float) -> float:
    total = sum(hist)
    keep = [f**i for i in range(1, k + 1)]
    acc = sum(c * sum(keep[: min(j, k)]) for j, c in enumerate(hist))
    return 1.0 + acc / total


class Draws:
    """Accepted drafts per pass for one request (at the recording's K steps), thinned by f:
    `next(rng)` -> j (cap it at the steps served: min(j, s))."""

    __slots__ = ("_log_f", "passes")

    def __init__(self, histogram: Sequence[int], f: float = 1.0):
        self.passes = [j for j, c in enumerate(histogram) for _ in range(int(c))]
        self._log_f = math.log(f) if 0.0 < f < 1.0 else (None if f >= 1.0 else -math.inf)

    def next(self, rng: random.Random) -> int:
        j = self.passes[int(rng.random() * len(self.passes))]
        if self._log_f is None or j == 0:
            return j
        if self._log_f == -math.inf:
            return 0
        u = 1.0 - rng.random()
        return min(j, int(math.log(u) / self._log_f))
