"""fastverify.percentiles, the one percentile: its values, and the same function reached
the ways its callers reach it (the rank scripts load it by path, without fastverify)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fastverify import percentiles
from fastverify.experiments.common import rank_support

COMMON = Path(rank_support.__file__).resolve().parent


def test_percentile_linear_interpolation() -> None:
    data = [1.0, 2.0, 3.0, 4.0]
    assert percentiles.percentile(data, 50) == 2.5
    assert percentiles.percentile(data, 0) == 1.0
    assert percentiles.percentile(data, 100) == 4.0
    assert percentiles.percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    assert percentiles.percentile([], 50) is None


def test_percentile_refuses_a_q_outside_0_to_100() -> None:
    with pytest.raises(ValueError, match=r"outside 0\.\.100"):
        percentiles.percentile([1.0], 101)


def test_a_rank_script_gets_the_same_percentile_without_fastverify() -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(COMMON)!r}); import rank_support; "
        "print(rank_support.percentile([4.0, 1.0, 3.0, 2.0], 90), rank_support.percentile([], 50),"
        " any(m == 'fastverify' or m.startswith('fastverify.') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(percentiles.percentile([1.0, 2.0, 3.0, 4.0], 90)), "None", "False"]
