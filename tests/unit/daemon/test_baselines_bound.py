"""baselines.json stays bounded however many concurrencies a caller records."""

from __future__ import annotations

from fastverify.daemon.baselines import KEEP_CONCURRENCIES, with_concurrency


def test_a_profiles_baselines_keep_the_most_recently_measured_concurrencies() -> None:
    """What a flood of baselines at ever new concurrencies can grow to (baselines.json)."""
    entry = None
    for c in range(1, KEEP_CONCURRENCIES + 40):
        entry = with_concurrency(entry, {"profile": "ring-ll", "concurrency": c,
                                         "measured_at": 1.7e9 + c})  # fmt: skip
    assert entry is not None and len(entry["by_concurrency"]) == KEEP_CONCURRENCIES
    assert (
        "1" not in entry["by_concurrency"]
        and str(KEEP_CONCURRENCIES + 39) in entry["by_concurrency"]
    )
