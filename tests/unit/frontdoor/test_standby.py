"""The standby decision: both engines' own memory beside the shared weights, per GPU."""

from __future__ import annotations

from fastverify.frontdoor.standby import GIB, NOTHING_SHARED, Sharing, decide

H200 = int(139 * GIB)


def test_fits_beside_shared_weights() -> None:
    fit = decide(sharing=Sharing(True, bytes=int(2 * 15 * GIB)), gpu_bytes=H200, tp=2,
                 engine_bytes=int(2 * 9.5 * GIB))  # fmt: skip
    assert fit.mode == "standby"
    assert "2 x 9.5 GiB" in fit.why and "15.0 GiB of shared weights" in fit.why


def test_too_big_holds_and_says_so() -> None:
    fit = decide(sharing=Sharing(True, bytes=int(15 * GIB)), gpu_bytes=H200, tp=1,
                 engine_bytes=int(70 * GIB))  # fmt: skip
    assert fit.mode == "hold" and "does not fit" in fit.why


def test_nothing_shared_or_no_reading_holds() -> None:
    common = {"gpu_bytes": H200, "tp": 1, "engine_bytes": 1}
    none = decide(sharing=None, **common)
    assert none.mode == "hold" and none.why == NOTHING_SHARED
    refused = decide(sharing=Sharing(False, "the shared weights are down"), **common)
    assert refused.mode == "hold" and refused.why == "the shared weights are down"
    blind = decide(sharing=Sharing(True, bytes=None), gpu_bytes=None, tp=1, engine_bytes=None)
    assert blind.mode == "hold" and "no GPU memory reading" in blind.why
