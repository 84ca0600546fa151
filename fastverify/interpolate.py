"""Log-log interpolation on a (size, time) curve: the one reading of a measured or published
all-reduce curve between its points (the rehearse grid's preflight points, the sim's
published SGLang/FlashInfer figures). A leaf: pure arithmetic, no fastverify import, so the
sim (an SGLang stand-in) and the experiments that measure it may both use it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence


def loglog(points: Sequence[tuple[float, float]], x: float) -> float:
    """y at `x` from (x, y) points sorted by x: log-log interpolation between them, the
    first y below the first x (latency-bound), linear in x above the last."""
    pts = sorted(points)
    if not pts:
        raise ValueError("no points")
    if x <= pts[0][0]:
        return pts[0][1]
    if x >= pts[-1][0]:
        return pts[-1][1] * x / pts[-1][0]
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if x0 <= x <= x1:
            if x1 == x0:
                return y0
            f = math.log(x / x0) / math.log(x1 / x0)
            return y0 * (y1 / y0) ** f
    return pts[-1][1]  # unreachable: x lies between the ends
