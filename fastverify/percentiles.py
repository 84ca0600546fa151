"""The one percentile of fastverify: linear interpolation between closest ranks (numpy's
default), for benchmark repeats, preflight and rehearse timings and trace figures.

Standard library only, and no fastverify import: the GPU rank scripts, which run without
fastverify on their import path, load this file by its path
(experiments/common/rank_support.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation; None for an empty sample."""
    if not values:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} outside 0..100")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)
