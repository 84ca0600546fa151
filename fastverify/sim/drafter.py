"""The sim's stand-in for an EAGLE-3 drafter: how many drafts each verify pass accepts.

What it follows from SGLang (0.5.23, topk 1): the drafts of one cycle are a chain, so a pass
at s steps accepts the first j drafts for some j in 0..s, and the request's
`spec_correct_drafts_histogram` counts passes by j (`fastverify.sglang.adaptive`). A pass at
s steps that would have accepted J drafts with unlimited steps accepts min(J, s): one draw
per pass, whatever the step count, so a request's acceptance does not depend on the steps
it was served at.

What it models (a drafter is the workload's property, not SGLang's): each request has its
own per-position acceptance q_r, P(J >= j) = q_r^j. `--sim-accept-spread S` is the standard
deviation of q_r over requests (a Beta distribution; 0: every request has the same q), the
per-request variation a real prompt set has. The mean of q_r is solved so that the accept
length at `--sim-accept-steps` K, pooled over verify passes as a bench pools them (requests
of one output length: the harmonic mean of the requests' own accept lengths), is
`--sim-accept-length`. A request's passes draw from a golden-ratio sequence from its seeded
phase (low discrepancy: its histogram converges fast to its own q_r).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

GOLDEN = 0.6180339887498949  # per-request draw sequence step (low discrepancy)
GRID = 400  # midpoints over (0, 1) for the population integrals


def chain_length(q: float, steps: int) -> float:
    """Accept length (bonus token included) of a chain with per-position acceptance q."""
    return 1.0 + sum(q**j for j in range(1, steps + 1))


def drafts(q: float, steps: int, u: float) -> int:
    """Drafts a pass accepts at `steps` for a uniform u in [0, 1): the largest j <= steps
    with u < q^j (so P(>= j) = q^j)."""
    j, level = 0, q
    while j < steps and u < level:
        j += 1
        level *= q
    return j


def _beta_shape(mean: float, sd: float) -> tuple[float, float] | None:
    """Beta(a, b) with this mean and standard deviation; None when sd is 0 (a point)."""
    if sd <= 0.0:
        return None
    var = min(sd * sd, mean * (1.0 - mean) * 0.999)
    nu = mean * (1.0 - mean) / var - 1.0
    return max(mean * nu, 1e-3), max((1.0 - mean) * nu, 1e-3)


def _weights(shape: tuple[float, float]) -> list[tuple[float, float]]:
    """(q, probability mass) on GRID midpoints for Beta(a, b)."""
    a, b = shape
    pts = [(i + 0.5) / GRID for i in range(GRID)]
    logs = [(a - 1) * math.log(q) + (b - 1) * math.log(1 - q) for q in pts]
    top = max(logs)
    dens = [math.exp(v - top) for v in logs]
    total = sum(dens)
    return [(q, d / total) for q, d in zip(pts, dens, strict=True)]


@dataclass(frozen=True)
class Drafter:
    """The population of requests' acceptance (see the module docstring)."""

    mean_q: float
    spread: float

    @classmethod
    def solve(cls, accept_length: float, steps: int, spread: float = 0.0) -> Drafter:
        """The drafter whose pooled accept length at `steps` is `accept_length`."""
        if steps < 1:
            raise ValueError("steps must be >= 1")
        if not 1.0 <= accept_length <= steps + 1:
            raise ValueError(f"accept length must be in 1..{steps + 1} at {steps} steps")
        if spread < 0.0:
            raise ValueError("the spread must be >= 0")
        lo, hi = 0.0, 1.0
        for _ in range(50):
            mid = (lo + hi) / 2
            if cls(mid, spread).pooled_length(steps) < accept_length:
                lo = mid
            else:
                hi = mid
        return cls((lo + hi) / 2, spread)

    def _population(self) -> list[tuple[float, float]]:
        shape = _beta_shape(self.mean_q, self.spread) if 0 < self.mean_q < 1 else None
        return [(self.mean_q, 1.0)] if shape is None else _weights(shape)

    def pooled_length(self, steps: int) -> float:
        """Tokens per verify pass at `steps` over the passes of requests of one output
        length: the harmonic mean of the requests' own accept lengths."""
        return 1.0 / sum(w / chain_length(q, steps) for q, w in self._population())

    def request_q(self, rng: random.Random) -> float:
        """One request's per-position acceptance."""
        shape = _beta_shape(self.mean_q, self.spread) if 0 < self.mean_q < 1 else None
        return self.mean_q if shape is None else rng.betavariate(*shape)


class RequestDraws:
    """One request's draws: its own q and a golden-ratio sequence from a seeded phase."""

    __slots__ = ("n", "phase", "q")

    def __init__(self, q: float, phase: float):
        self.q, self.phase, self.n = q, phase, 0

    def next(self, steps: int) -> int:
        """Drafts the next pass at `steps` accepts (0 at steps 0: nothing was drafted)."""
        u = (self.phase + self.n * GOLDEN) % 1.0
        self.n += 1
        return drafts(self.q, steps, u) if steps > 0 else 0
