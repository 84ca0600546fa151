"""The standby decision: both engines' own memory beside the shared weights, per GPU."""

from __future__ import annotations

from fastverify.frontdoor.standby import GIB, decide

H200 = int(139 * GIB)


def test_fits_beside_shared_weights() -> None:
    fit = decide(weight_cache="auto", cache_serves=True, gpu_bytes=H200, tp=2,
                 engine_bytes=int(2 * 9.5 * GIB), shared_bytes=int(2 * 15 * GIB))  # fmt: skip
    assert fit.mode == "standby"
    assert "2 x 9.5 GiB" in fit.why and "15.0 GiB of shared weights" in fit.why


def test_too_big_holds_and_says_so() -> None:
    fit = decide(weight_cache="on", cache_serves=True, gpu_bytes=H200, tp=1,
                 engine_bytes=int(70 * GIB), shared_bytes=int(15 * GIB))  # fmt: skip
    assert fit.mode == "hold" and "does not fit" in fit.why


def test_no_cache_or_no_reading_holds() -> None:
    common = {"gpu_bytes": H200, "tp": 1, "engine_bytes": 1, "shared_bytes": 1}
    assert decide(weight_cache="off", cache_serves=False, **common).mode == "hold"
    assert "cannot serve" in decide(weight_cache="auto", cache_serves=False, **common).why
    blind = decide(weight_cache="auto", cache_serves=True, gpu_bytes=None, tp=1,
                   engine_bytes=None, shared_bytes=None)  # fmt: skip
    assert blind.mode == "hold" and "no GPU memory reading" in blind.why
