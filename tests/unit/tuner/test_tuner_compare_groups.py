"""The tuner comparison's process groups: a profile's value is the median over its groups."""

from __future__ import annotations

from fastverify.experiments.derive_tuner.compare import combine_groups


def _group(us: float | None, correct: bool = True, choice: str = "RING/LL") -> dict:
    return {"wall_s": 2.0, "sizes": {14336: {"us": us, "correct": correct, "choice": choice}}}


def test_median_over_groups_not_the_first_or_the_best() -> None:
    # NVLink on 2 x H200: one process group read 13.3 us where others read 12.2.
    got = combine_groups([_group(13.3), _group(12.2), _group(12.3)])
    row = got["sizes"][14336]
    assert row["us"] == 12.3
    assert row["groups_us"] == [13.3, 12.2, 12.3]
    assert got["wall_s"] == 6.0


def test_a_failed_or_wrong_group_is_visible() -> None:
    got = combine_groups([_group(12.0), _group(None), _group(14.0, correct=False)])
    row = got["sizes"][14336]
    assert row["us"] == 13.0  # median of the groups that measured
    assert row["groups_us"] == [12.0, None, 14.0]
    assert row["correct"] is False
