"""Small-sample statistics for benchmark repeats, stdlib only (no scipy, no numpy); a
sample's percentile is fastverify.percentiles'.

- `t_quantile(p, df)`: Student t quantile, by bisection on the t CDF, which is computed from
  the regularized incomplete beta function (continued fraction, modified Lentz).
- `mean_ci(values, level=0.95)`: mean and its two-sided Student-t confidence interval.
- `interval(ci)`: a rate's interval as `[lo, hi]`, its lower bound clipped at 0 (and said).
- `ci_text(ci, n)`: the CI as people read it, with a too-few-runs note below MIN_RUNS.
- `FEW_REQUESTS`: a window that completed fewer requests gives a quantised per-request rate.
- `welch(a, b)`: Welch's unequal-variance t test -> `WelchResult(t, df, p)`.
- `compare(a, b, alpha)`: "faster" / "slower" / "not significant" for two samples, or
  "too few runs" below `MIN_RUNS` (3) on either side: two runs of a closed-loop load on a
  quiet server often give identical figures, a zero-width CI and a t of infinity.
- `break_even_accept_length(...)`: the speculative accept length at which EAGLE-3 would
  only match the baseline, given the measured cycle (see the function's docstring).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_EPS = 1e-15
_TINY = 1e-300
# Fewest runs per side for a "faster"/"slower" verdict (and for "tied with best").
MIN_RUNS = 3
TOO_FEW = "too few runs"
# Fewest requests one measurement window should complete: below it its per-request rate
# (and a short window's tok/s) moves in steps of one request, so it is flagged.
FEW_REQUESTS = 5


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of an empty sample")
    return math.fsum(values) / len(values)


def stdev(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1 in the denominator); 0.0 for a single value."""
    n = len(values)
    if n < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz's method)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x={x} outside [0, 1]")
    if x in (0.0, 1.0):
        return x
    ln_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (df may be fractional)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The value t with P(T <= t) = p (0 < p < 1) for Student's t with `df` degrees of freedom."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability {p} outside (0, 1)")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class MeanCI:
    n: int
    mean: float
    stdev: float
    lo: float | None  # None when n < 2: one run has no interval
    hi: float | None
    level: float = 0.95

    @property
    def half_width(self) -> float | None:
        return None if self.hi is None else self.hi - self.mean

    def to_dict(self) -> dict[str, object]:
        return {
            "n": self.n,
            "mean": self.mean,
            "stdev": self.stdev,
            "ci": None if self.lo is None else [self.lo, self.hi],
            "level": self.level,
        }


def mean_ci(values: Sequence[float], level: float = 0.95) -> MeanCI:
    """Mean and two-sided Student-t confidence interval (mean +- t * s / sqrt(n))."""
    n = len(values)
    m = mean(values)
    s = stdev(values)
    if n < 2:
        return MeanCI(n, m, s, None, None, level)
    half = t_quantile(0.5 + level / 2.0, n - 1) * s / math.sqrt(n)
    return MeanCI(n, m, s, m - half, m + half, level)


@dataclass(frozen=True)
class WelchResult:
    t: float
    df: float
    p: float  # two-sided


def cell(value: Any, digits: int = 1) -> str:
    """A table cell: `-` for None, yes/no for a flag, a float to `digits` places."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def interval(ci: Sequence[float], digits: int = 1) -> str:
    """`[80.1, 82.3]`; a lower bound below 0 (a rate cannot be negative: the runs scatter
    too much for the interval to mean more) is clipped and said: `[0 (from -123.3), 283.3]`."""
    lo, hi = ci[0], ci[1]
    low = f"0 (from {lo:.{digits}f})" if lo < 0 else f"{lo:.{digits}f}"
    return f"[{low}, {hi:.{digits}f}]"


def ci_text(ci: Sequence[float], n: int) -> str:
    """`95% CI [80.1, 82.3]`, with a too-few-runs note below MIN_RUNS runs (two runs of a
    quiet server often give a zero-width interval that promises what it cannot)."""
    text = f"95% CI {interval(ci)}"
    if n < MIN_RUNS:
        text += f" from {n} run(s): {TOO_FEW} to trust it (--repeats {MIN_RUNS} or more)"
    return text


def welch(a: Sequence[float], b: Sequence[float]) -> WelchResult:
    """Welch's t test for a difference in means; needs at least two values on each side."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("Welch's test needs at least two values in each sample")
    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    diff = mean(a) - mean(b)
    se2 = va + vb
    if se2 == 0.0:
        # Both samples constant: identical means are indistinguishable, different ones are not.
        return WelchResult(
            0.0 if diff == 0 else math.copysign(math.inf, diff), math.inf, 1.0 if diff == 0 else 0.0
        )
    t = diff / math.sqrt(se2)
    df = se2**2 / ((va**2 / (len(a) - 1) if va else 0.0) + (vb**2 / (len(b) - 1) if vb else 0.0))
    p = 2.0 * (1.0 - t_cdf(abs(t), df))
    return WelchResult(t, df, min(1.0, max(0.0, p)))


def compare(
    a: Sequence[float], b: Sequence[float], alpha: float = 0.05, min_runs: int = MIN_RUNS
) -> str:
    """Whether sample `a` is "faster", "slower" or "not significant" against `b`.

    Welch's test at `alpha` when both sides have `min_runs`+ values; with fewer on either
    side the answer is "too few runs" (two identical runs per side would otherwise be
    "significant" with a zero-width interval).
    """
    if len(a) < max(2, min_runs) or len(b) < max(2, min_runs):
        return TOO_FEW
    result = welch(a, b)
    if result.p >= alpha:
        return "not significant"
    return "faster" if result.t > 0 else "slower"


def break_even_accept_length(
    accept_length: float, spec_tokens_per_second: float, baseline_tokens_per_second: float
) -> float:
    """Accept length at which speculative decoding only matches the baseline.

    One speculative cycle (draft + verify) emits `accept_length` tokens per sequence and
    takes `accept_length / spec_tokens_per_second`; the baseline emits one token per
    `1 / baseline_tokens_per_second`. With the cycle time held fixed, speculation breaks
    even when accept_length' / cycle == baseline rate, i.e.
    `accept_length * baseline / spec`. Use per-request (per-sequence) rates; above the
    break-even, speculation wins by the ratio `accept_length / break_even`.
    """
    from fastverify.speculation.breakeven import breakeven_accept_length, cycle_seconds

    if accept_length <= 0 or spec_tokens_per_second <= 0 or baseline_tokens_per_second <= 0:
        raise ValueError("accept length and both rates must be positive")
    return breakeven_accept_length(
        cycle_seconds(accept_length, spec_tokens_per_second), baseline_tokens_per_second
    )
