"""Live acceptance from SGLang's per-request metrics files and the plan-stale check
(fastverify.exporters.request_metrics), through the hub to a scrape."""

from __future__ import annotations

import json
from pathlib import Path

from fastverify.exporters.hub import MetricsHub
from fastverify.exporters.request_metrics import Drift, RequestMetricsFollower, parse_line
from tests.support.hub import Clock, scrape, value

PLAN = {  # a stored plan's fields the check reads (speculation.plan.Plan.to_dict)
    "accept_steps": 3,
    "lower_acceptance": {"accept_length": 2.0},
    "tiers": {"1": {"steps": 2, "break_even_accept_length": {"1": 1.5, "2": 2.0}},
              "8": {"steps": 0, "break_even_accept_length": {"1": 1.8}}},
}  # fmt: skip


def _record(hist: list[int], latency: float = 1.0) -> str:
    return json.dumps({"request_parameters": json.dumps({"text": "a prompt"}),
                       "spec_correct_drafts_histogram": hist, "spec_verify_ct": sum(hist),
                       "e2e_latency": latency})  # fmt: skip


def test_the_follower_keeps_the_histograms_and_deletes_an_hour_sglang_left(tmp_path: Path) -> None:
    old = tmp_path / "sglang-request-metrics-20261201_10.log"
    new = tmp_path / "sglang-request-metrics-20261201_11.log"
    old.write_text(_record([5, 3, 2, 1]) + "\n" + _record([1, 1, 1, 9]) + "\n")
    new.write_text(_record([2, 2, 2, 2]) + "\n" + _record([1, 0, 0, 0])[:20])  # half a line
    (tmp_path / "other.log").write_text(_record([9]) + "\n")
    got: list[list[dict]] = []
    f = RequestMetricsFollower(lambda recs, _now: got.append(recs), tmp_path)
    assert f.poll_once() == 3
    assert [r["histogram"] for r in got[0]] == [[5, 3, 2, 1], [1, 1, 1, 9], [2, 2, 2, 2]]
    assert all("request_parameters" not in r for r in got[0])  # the prompts are never kept
    assert not old.exists() and new.exists()  # SGLang writes the newer hour now
    with open(new, "a") as fh:  # the rest of the half line, and one more
        fh.write(_record([1, 0, 0, 0])[20:] + "\n" + _record([0, 4]) + "\n")
    assert f.poll_once() == 2
    assert f.poll_once() == 0
    assert parse_line('{"e2e_latency": 1.0}') is None and parse_line("not json") is None


def test_requests_are_attributed_to_the_steps_they_ran_at_and_mixed_ones_left_out() -> None:
    d = Drift()
    d.on_steps(100.0, 2)
    d.on_steps(110.0, 2)
    d.on_requests([{"histogram": [4, 3, 3], "e2e_latency": 3.0}], 110.0)  # 106..110 at 2
    d.on_steps(111.0, 0)
    d.on_requests([{"histogram": [1, 1, 1], "e2e_latency": 4.0}], 112.0)  # 107..112: 2, then 0
    d.on_steps(111.5, 2)  # a pass or two at 0 (a health check's batch): still its steps' own
    d.on_requests([{"histogram": [4, 3, 3], "e2e_latency": 12.0}], 119.0)
    assert d.mixed == 1
    live = d.live()
    assert set(live) == {2} and live[2]["requests"] == 2
    assert live[2]["accept_length"] == {1: 1.6, 2: 1.9}


def test_a_plan_goes_stale_below_a_tiers_break_even_and_the_scrape_says_so() -> None:
    clock = Clock()
    hub = MetricsHub(clock=clock)
    hub.set_engine(True, "ring-ll", "adaptive", {"weights": "real"}, "sim", "http://x")
    hub.speculation.set_plan(PLAN)
    hub.decode.on_poll({"spec_num_steps": 2.0, "num_running_reqs": 1.0})
    clock.t += 20
    hub.decode.on_poll({"spec_num_steps": 2.0, "num_running_reqs": 1.0})
    good = [{"histogram": [2, 3, 5], "e2e_latency": 5.0} for _ in range(20)]  # L(2) 2.3
    hub.speculation.on_requests(good)
    s = scrape(hub)
    assert value(s, "fastverify_spec_plan_stale", profile="ring-ll", mode="adaptive") == 0.0
    assert value(s, "fastverify_spec_live_accept_length", profile="ring-ll", mode="adaptive",
                 steps="2", k="2") == 2.3  # fmt: skip
    bad = [{"histogram": [6, 3, 1], "e2e_latency": 5.0} for _ in range(200)]  # L(2) 1.5
    hub.speculation.on_requests(bad)
    drift = hub.speculation.reading()["drift"]
    assert drift["stale"]
    assert "tier 1 drafts 2 steps" in drift["why"]
    assert "below its break-even 2.00" in drift["why"]
    assert "fastverifyctl spec plan" in drift["replan"]
    s = scrape(hub)
    assert value(s, "fastverify_spec_plan_stale", profile="ring-ll", mode="adaptive") == 1.0
    assert value(s, "fastverify_spec_live_requests", profile="ring-ll", mode="adaptive",
                 steps="2") == 220  # fmt: skip
    # a trial on dummy weights never counts; a new engine starts from nothing
    hub.set_engine(True, "ring-ll", "baseline", {}, "sim", "http://x")
    assert hub.speculation.reading()["drift"] is None
