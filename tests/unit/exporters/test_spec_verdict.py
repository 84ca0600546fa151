"""Does speculation pay? One verdict from like-for-like quantities.

The tour saw `fastverify_spec_breakeven_accept_length 3.71` next to an accept length of 2.0
(speculation loses) and `fastverify_spec_speedup_estimate 1.058` (it wins): the baseline had
been measured with 1 request, EAGLE-3 ran 2. These tests hold the published gauges to one
verdict: both only against a baseline of the reading's concurrency, and agreeing in sign.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastverify.exporters.baseline import concurrency_of, verdict
from fastverify.exporters.hub import MetricsHub
from tests.support.hub import Clock, names, scrape, value

PM = {"profile": "ring-ll", "mode": "eagle3"}
VERDICT_GAUGES = ("fastverify_spec_breakeven_accept_length", "fastverify_spec_speedup_estimate")

rates = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
accepts = st.floats(min_value=1.0, max_value=16.0, allow_nan=False, allow_infinity=False)
running = st.integers(min_value=1, max_value=256)


def _hub() -> MetricsHub:
    hub = MetricsHub(clock=Clock())
    hub.set_engine(True, "ring-ll", "eagle3", {}, "sim", "http://127.0.0.1:1")
    return hub


def _reading(hub: MetricsHub, running_reqs: float, accept: float, gen: float) -> None:
    hub.logs.on_record({"kind": "decode", "running_reqs": running_reqs, "queue_reqs": 0,
                   "accept_len": accept, "accept_rate": 0.5, "gen_throughput": gen,
                   "token_usage": 0.1, "cuda_graph": True})  # fmt: skip


def _verdict_samples(s: dict) -> dict[str, tuple[dict, float]]:
    out = {}
    for (name, labels), v in s.items():
        if name in VERDICT_GAUGES:
            out[name] = (dict(labels), v)
    return out


@settings(max_examples=500, deadline=None)
@given(accept=accepts, n=running, gen=rates, base=rates)
def test_speedup_above_one_exactly_when_accept_length_above_break_even(
    accept: float, n: int, gen: float, base: float
) -> None:
    v = verdict(n, accept, gen, {n: base})
    assert v is not None
    assert v.concurrency == n
    assert (v.speedup_estimate > 1.0) == (accept > v.breakeven_accept_length)
    assert (v.speedup_estimate < 1.0) == (accept < v.breakeven_accept_length)
    assert v.pays == (accept > v.breakeven_accept_length)


@settings(max_examples=200, deadline=None)
@given(
    accept=accepts,
    n=running,
    gen=rates,
    baselines=st.dictionaries(running, rates, max_size=4),
)
def test_the_published_gauges_agree_and_only_at_a_matching_concurrency(
    accept: float, n: int, gen: float, baselines: dict[int, float]
) -> None:
    hub = _hub()
    for conc, rate in baselines.items():
        hub.baselines.set("ring-ll", rate * conc, rate, hub.now(), concurrency=conc)
    _reading(hub, n, accept, gen)
    got = _verdict_samples(scrape(hub))
    if n not in baselines:
        assert got == {}  # no verdict rather than one against another batch size
        return
    (lb, breakeven), (ls, speedup) = (got[g] for g in VERDICT_GAUGES)
    assert lb == ls == {**PM, "concurrency": str(n)}
    assert (speedup > 1.0) == (accept > breakeven)
    assert breakeven == pytest.approx(n * accept / gen * baselines[n])


def test_the_tours_case_baseline_at_1_request_eagle3_at_2_has_no_verdict() -> None:
    hub = _hub()
    # what the tour recorded: a 1-request baseline; EAGLE-3 then ran 2 requests, 2.0 accepted
    hub.baselines.set("ring-ll", 82.0, 82.0, hub.now(), concurrency=1)
    _reading(hub, 2, 2.0, 86.8)
    s = scrape(hub)
    # the old gauges said 2 x 2.0 / 86.8 x 82 = 3.78 to break even and 86.8 / 82 = 1.058
    assert value(s, "fastverify_spec_accept_length", **PM) == 2.0
    assert value(s, "fastverify_spec_cycle_seconds", **PM) == pytest.approx(4.0 / 86.8)
    for gauge in VERDICT_GAUGES:
        assert gauge not in names(s), gauge
    # a baseline measured with 2 requests (here: 2 x 75 tok/s) gives the matched verdict:
    # EAGLE-3 gives 43.4 tok/s per request against 75, so it loses, and both gauges say so
    hub.baselines.set("ring-ll", 150.0, 75.0, hub.now(), concurrency=2)
    s = scrape(hub)
    pmc = {**PM, "concurrency": "2"}
    breakeven = value(s, "fastverify_spec_breakeven_accept_length", **pmc)
    speedup = value(s, "fastverify_spec_speedup_estimate", **pmc)
    assert breakeven == pytest.approx(2 * 2.0 / 86.8 * 75.0)
    assert speedup == pytest.approx((86.8 / 2) / 75.0)
    assert breakeven > 2.0 and speedup < 1.0
    # both baselines stay published, each with its concurrency
    assert value(s, "fastverify_baseline_request_tokens_per_second", profile="ring-ll",
                 concurrency="1") == 82.0  # fmt: skip
    assert value(s, "fastverify_baseline_request_tokens_per_second", profile="ring-ll",
                 concurrency="2") == 75.0  # fmt: skip


def test_a_baseline_without_a_concurrency_is_shown_but_never_compared() -> None:
    hub = _hub()
    hub.baselines.set("ring-ll", 82.0, 82.0, hub.now())  # e.g. a baselines.json from before
    _reading(hub, 1, 2.0, 66.67)
    s = scrape(hub)
    assert value(s, "fastverify_baseline_tokens_per_second", profile="ring-ll",
                 concurrency="unknown") == 82.0  # fmt: skip
    for gauge in VERDICT_GAUGES:
        assert gauge not in names(s), gauge


def test_a_reading_between_batch_sizes_matches_no_baseline() -> None:
    # a /metrics poll can report a fractional running count (an average): no concurrency
    assert concurrency_of(1.5) is None and concurrency_of(0.0) is None
    assert concurrency_of(None) is None and concurrency_of(2.0) == 2
    assert verdict(1.5, 2.0, 100.0, {1: 80.0, 2: 80.0}) is None
    assert verdict(2.0, 2.0, 100.0, {1: 80.0}) is None
    assert verdict(2.0, 0.0, 100.0, {2: 80.0}) is None  # SGLang's 0: no verify pass yet


def test_bad_concurrency_is_refused_by_the_hub() -> None:
    hub = _hub()
    for bad in (0, -1, True):
        with pytest.raises(ValueError, match="concurrency"):
            hub.baselines.set("ring-ll", 82.0, 82.0, hub.now(), concurrency=bad)
