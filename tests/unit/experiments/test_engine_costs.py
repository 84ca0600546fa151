"""`spec costs`' reading of one bench window: the decode rate and the dummy accept length a
cycle is computed from (fastverify.experiments.engine_costs.run)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fastverify.experiments.engine_costs.run import (
    CostTrialConfig,
    _decode_rate,
    _dummy_accept,
)
from fastverify.speculation.breakeven import cycle_seconds


def _window(**kw: object) -> SimpleNamespace:
    base = {"per_request_tokens_per_second": None, "itl_ms": {"mean": None, "p50": None},
            "accept_histogram": None, "accept_length": None,
            "decode_tokens_per_second": None, "gaps_with_prefill": None}  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def test_completed_requests_give_the_rate() -> None:
    assert _decode_rate(_window(per_request_tokens_per_second=40.0)) == (
        40.0, "completed requests",
    )  # fmt: skip


def test_the_decode_rate_without_prefills_comes_first() -> None:
    window = _window(per_request_tokens_per_second=30.0, decode_tokens_per_second=40.0,
                     gaps_with_prefill=7)  # fmt: skip
    rate, src = _decode_rate(window)
    assert rate == 40.0 and "7 gap(s)" in src


def test_without_a_finished_request_the_mean_itl_not_the_median() -> None:
    # 1 step, a 30 ms cycle: 46% of cycles stream 1 token (ITL 30 ms), 54% stream 2 (15 ms
    # each, counted twice): the token median is 15 ms, the mean 30 / 1.54 ms
    c, share = 30.0, 0.46
    tokens = share * 1 + (1 - share) * 2
    mean = c / tokens
    rate, src = _decode_rate(_window(itl_ms={"mean": mean, "p50": c / 2}))
    assert src.startswith("mean ITL") and rate == pytest.approx(1000 * tokens / c)
    assert cycle_seconds(tokens, rate) == pytest.approx(c / 1000)  # the cycle read back
    assert _decode_rate(_window()) == (None, "none")


def test_dummy_accept_from_the_histogram_else_the_server_else_the_floor() -> None:
    accept, src = _dummy_accept(_window(accept_histogram=[46, 54]), 1)
    assert accept == pytest.approx(1.54) and "histogram" in src
    assert _dummy_accept(_window(accept_length=1.3), 2) == (
        1.3, "the server's avg_spec_accept_length",
    )  # fmt: skip
    assert _dummy_accept(_window(), 2)[0] == 1.0


def test_config_refuses_what_cannot_run() -> None:
    for bad, said in (({"max_steps": 0}, "1..64"), ({"max_steps": 65}, "1..64"),
                      ({"batch_sizes": ()}, ">= 1"), ({"duration": 0}, "positive")):  # fmt: skip
        with pytest.raises(ValueError, match=said):
            CostTrialConfig(**bad).validate()  # type: ignore[arg-type]
