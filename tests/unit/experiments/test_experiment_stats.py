"""Statistics against textbook values (Student t table, Welch's worked example)."""

from __future__ import annotations

import math

import pytest

from fastverify.experiments.common import stats

# Two-sided 95% (p = 0.975), 99% (p = 0.995) and one-sided 95% critical values from a
# standard Student t table.
T_TABLE = [
    (0.975, 1, 12.706),
    (0.975, 2, 4.303),
    (0.975, 3, 3.182),
    (0.975, 4, 2.776),
    (0.975, 5, 2.571),
    (0.975, 9, 2.262),
    (0.975, 10, 2.228),
    (0.975, 20, 2.086),
    (0.975, 30, 2.042),
    (0.975, 120, 1.980),
    (0.995, 5, 4.032),
    (0.995, 10, 3.169),
    (0.95, 10, 1.812),
    (0.90, 4, 1.533),
]


@pytest.mark.parametrize(("p", "df", "expected"), T_TABLE)
def test_t_quantile_matches_table(p: float, df: int, expected: float) -> None:
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=6e-4)


def test_t_quantile_is_symmetric_and_approaches_normal() -> None:
    assert stats.t_quantile(0.025, 7) == pytest.approx(-stats.t_quantile(0.975, 7))
    assert stats.t_quantile(0.5, 3) == 0.0
    assert stats.t_quantile(0.975, 1e6) == pytest.approx(1.95996, abs=1e-4)


def test_t_quantile_rejects_bad_probability() -> None:
    with pytest.raises(ValueError):
        stats.t_quantile(1.0, 3)


def test_mean_ci_hand_computed() -> None:
    # mean 10, s = 1 (values 9, 10, 11), n = 3: half-width 4.303 / sqrt(3) = 2.4843.
    ci = stats.mean_ci([9.0, 10.0, 11.0])
    assert ci.mean == 10.0
    assert ci.stdev == pytest.approx(1.0)
    assert ci.lo == pytest.approx(10.0 - 2.4843, abs=1e-3)
    assert ci.hi == pytest.approx(10.0 + 2.4843, abs=1e-3)


def test_mean_ci_single_value_has_no_interval() -> None:
    ci = stats.mean_ci([5.0])
    assert (ci.lo, ci.hi) == (None, None)
    assert ci.to_dict()["ci"] is None


def test_welch_textbook_example() -> None:
    # Welch's t-test worked example (Wikipedia, "Welch's t-test", example 1):
    # t = -2.46, df = 24.99, p = 0.021.
    a = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
    b = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]
    r = stats.welch(a, b)
    assert r.t == pytest.approx(-2.46, abs=0.01)
    assert r.df == pytest.approx(24.99, abs=0.01)
    assert r.p == pytest.approx(0.021, abs=0.001)
    assert stats.compare(a, b) == "slower"
    assert stats.compare(b, a) == "faster"


def test_compare_overlapping_samples_not_significant() -> None:
    assert stats.compare([100.0, 102.0, 98.0], [101.0, 99.0, 100.5]) == "not significant"
    assert stats.compare([100.0], [50.0, 51.0]) == "too few runs"


def test_compare_needs_three_runs_per_side() -> None:
    assert stats.MIN_RUNS == 3
    # two constant runs per side: Welch says t = inf, p = 0; no verdict is given on that
    assert stats.welch([88.2, 88.2], [76.0, 76.0]).p == 0.0
    assert stats.compare([88.2, 88.2], [76.0, 76.0]) == "too few runs"
    assert stats.compare([88.2, 88.2, 88.2], [76.0, 76.0]) == "too few runs"
    assert stats.compare([88.2, 88.2, 88.3], [76.0, 76.0, 76.1]) == "faster"
    assert stats.compare([88.2, 88.2], [76.0, 76.0], min_runs=2) == "faster"


def test_welch_constant_samples() -> None:
    assert stats.welch([3.0, 3.0], [3.0, 3.0]).p == 1.0
    assert stats.welch([3.0, 3.0], [4.0, 4.0]).p == 0.0


def test_t_cdf_known_points() -> None:
    # df = 1 is the Cauchy distribution: CDF(1) = 3/4.
    assert stats.t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-12)
    # df = 2 has a closed form: 1/2 + t / (2 sqrt(2 + t^2)).
    t = 1.3
    assert stats.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


def test_break_even_accept_length() -> None:
    # Baseline 82 tok/s per request; EAGLE-3 accepts 2.0 tokens per cycle and reaches
    # 66 tok/s, so a cycle takes 2/66 s and breaks even at 82 * 2/66 = 2.4848 tokens.
    be = stats.break_even_accept_length(2.0, 66.0, 82.0)
    assert be == pytest.approx(2.4848, abs=1e-4)
    assert be > 2.0  # speculation loses: the accept length is below break-even
    with pytest.raises(ValueError):
        stats.break_even_accept_length(0.0, 66.0, 82.0)


def test_an_interval_is_bracketed_and_a_negative_rate_bound_clipped() -> None:
    # the field's "-123.3-283.3" read as a range from 123.3 to 283.3
    assert stats.interval([-123.3, 283.3]) == "[0 (from -123.3), 283.3]"
    assert stats.interval([80.12, 82.34]) == "[80.1, 82.3]"
    assert stats.ci_text([80.12, 82.34], 3) == "95% CI [80.1, 82.3]"
