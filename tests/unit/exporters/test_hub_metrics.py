"""MetricsHub + its collectors: what a scrape shows for a given feed (parsed back with
prometheus-client's own text parser), derived figures, absence rules, label hygiene."""

from __future__ import annotations

import pytest

from fastverify.exporters.hub import MetricsHub
from tests.support.hub import Clock, names, scrape, value

DECODE = (
    "[2025-06-13 10:30:17 TP0] Decode batch, #running-req: {r}, #token: 148, token usage: 0.10, "
    "accept len: {a}, accept rate: 0.34, cuda graph: True, gen throughput (token/s): {g}, "
    "#queue-req: 2"
)


@pytest.fixture
def hub() -> MetricsHub:
    h = MetricsHub(clock=Clock())
    h.set_engine(True, "ring-ll", "eagle3", {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}, "sim",
                 "http://127.0.0.1:1")  # fmt: skip
    return h


def test_spec_cycle_breakeven_and_speedup(hub: MetricsHub) -> None:
    # field numbers: 1 request, accept 2.0, 66.7 tok/s => cycle 30 ms; baseline 82 tok/s
    hub.logs.on_line(DECODE.format(r=1, a="2.00", g="66.67"))
    s = scrape(hub)
    pm = {"profile": "ring-ll", "mode": "eagle3"}
    assert value(s, "fastverify_spec_cycle_seconds", **pm) == pytest.approx(2.0 / 66.67)
    assert value(s, "fastverify_spec_accept_length", **pm) == 2.0
    assert value(s, "fastverify_generation_tokens_per_second", **pm) == 66.67
    # without a baseline both comparisons are absent, not zero
    assert "fastverify_spec_breakeven_accept_length" not in names(s)
    assert "fastverify_spec_speedup_estimate" not in names(s)
    hub.baselines.set("ring-ll", 82.0, 82.0, hub.now() - 30, concurrency=1)
    s = scrape(hub)
    pmc = {**pm, "concurrency": "1"}  # the reading's 1 running request matches the baseline's
    assert value(s, "fastverify_spec_breakeven_accept_length", **pmc) == pytest.approx(
        2.0 / 66.67 * 82.0
    )
    assert value(s, "fastverify_spec_speedup_estimate", **pmc) == pytest.approx(66.67 / 82.0)
    assert value(s, "fastverify_baseline_age_seconds", profile="ring-ll", concurrency="1") == 30.0
    # a baseline of another profile does not apply
    hub.set_engine(True, "tree-ll", "eagle3", {}, "sim", None)
    hub.logs.on_line(DECODE.format(r=4, a="2.50", g="200.00"))
    s = scrape(hub)
    assert value(s, "fastverify_spec_cycle_seconds", profile="tree-ll", mode="eagle3") == (
        pytest.approx(4 * 2.5 / 200.0)
    )
    assert "fastverify_spec_breakeven_accept_length" not in names(s)


def test_the_live_cycle_is_decode_only_from_sglangs_inter_token_latency(
    hub: MetricsHub,
) -> None:
    """With SGLang's ITL histogram, cycle = accept x decode seconds per token
    between two polls (prefill excluded, as bench measures); a counter that goes back (a
    restarted server) starts over; without it, the decode-loop formula as before."""
    hub.baselines.set("ring-ll", 82.0, 100.0, hub.now(), concurrency=1)
    base = {"gen_throughput": 50.0, "num_running_reqs": 1.0, "spec_accept_length": 2.0}
    hub.decode.on_poll({**base, "itl_seconds_sum": 1.0, "itl_count": 100.0})
    pm = {"profile": "ring-ll", "mode": "eagle3"}
    s = scrape(hub)  # one poll: no delta yet, the decode loop's figure (1 x 2 / 50)
    assert value(s, "fastverify_spec_cycle_seconds", **pm) == pytest.approx(0.04)
    # 60 tokens in 0.3 s of decode intervals: 5 ms per token, 10 ms per 2-token cycle
    hub.decode.on_poll({**base, "itl_seconds_sum": 1.3, "itl_count": 160.0})
    s = scrape(hub)
    assert value(s, "fastverify_spec_cycle_seconds", **pm) == pytest.approx(0.010)
    pmc = {**pm, "concurrency": "1"}
    be = value(s, "fastverify_spec_breakeven_accept_length", **pmc)
    assert be == pytest.approx(0.010 * 100.0)  # cycle x baseline per-request rate
    assert value(s, "fastverify_spec_speedup_estimate", **pmc) == pytest.approx(2.0 / be)
    # a poll without new tokens keeps the last figure; a reset counter starts over
    hub.decode.on_poll({**base, "itl_seconds_sum": 1.3, "itl_count": 160.0})
    assert value(scrape(hub), "fastverify_spec_cycle_seconds", **pm) == pytest.approx(0.010)
    hub.decode.on_poll({**base, "itl_seconds_sum": 0.1, "itl_count": 10.0})
    hub.decode.on_poll({**base, "itl_seconds_sum": 0.3, "itl_count": 30.0})
    assert value(scrape(hub), "fastverify_spec_cycle_seconds", **pm) == pytest.approx(0.020)


def test_baseline_mode_has_no_spec_figures(hub: MetricsHub) -> None:
    hub.set_engine(True, "ring-ll", "baseline", {}, "sim", None)
    hub.logs.on_line(
        "Decode batch, #running-req: 2, #token: 10, token usage: 0.00, cuda graph: True, "
        "gen throughput (token/s): 160.00, #queue-req: 0"
    )
    hub.baselines.set("ring-ll", 160.0, 80.0, hub.now(), concurrency=2)
    s = scrape(hub)
    assert value(s, "fastverify_generation_tokens_per_second", profile="ring-ll",
                 mode="baseline") == 160.0  # fmt: skip
    for absent in (
        "fastverify_spec_cycle_seconds",
        "fastverify_spec_accept_length",
        "fastverify_spec_breakeven_accept_length",
        "fastverify_spec_speedup_estimate",
    ):
        assert absent not in names(s)  # fmt: skip


def test_profile_info_labels_switch_and_hide_secrets() -> None:
    hub = MetricsHub(clock=Clock())
    env = {
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "LL",
        "NCCL_P2P_LEVEL": "SYS",
        "HF_TOKEN": "hf_x",
        "WANDB_API_KEY": "k",
        "MY_SECRET": "s",
        "DB_PASSWORD": "p",
        "AWS_SECRET_ACCESS_KEY": "a",
    }
    hub.set_engine(True, "ring-ll", "eagle3", env, "sim", None)
    s = scrape(hub)
    infos = [k for k in s if k[0] == "fastverify_profile_info"]
    assert len(infos) == 1
    labels = dict(infos[0][1])
    assert labels == {
        "profile": "ring-ll",
        "mode": "eagle3",
        "engine": "sim",
        "nccl_algo": "Ring",
        "nccl_proto": "LL",
        "nccl_p2p_level": "SYS",
        "weights": "real",
    }
    text = str(s)
    for secret in ("hf_x", "HF_TOKEN", "hf_token", "wandb", "password", "aws"):
        assert secret not in text.lower()
    hub.set_engine(True, "tree-ll", "eagle3", {"NCCL_ALGO": "Tree"}, "sim", None)
    s = scrape(hub)
    infos = [dict(k[1]) for k in s if k[0] == "fastverify_profile_info"]
    assert infos == [{"profile": "tree-ll", "mode": "eagle3", "engine": "sim",
                      "nccl_algo": "Tree", "nccl_proto": "unset", "weights": "real"}]  # fmt: skip


def test_switch_clears_gauges_but_keeps_counters(hub: MetricsHub) -> None:
    hub.logs.on_line(DECODE.format(r=1, a="2.00", g="80.00"))
    hub.traces.on_analysis({"ranks": [{"rank": 0, "verify_passes": 2, "verify_ms_p50": 30.0,
                                      "verify_ms_p90": 31.0, "allreduce_per_verify": 122.0,
                                      "allreduce_ms_per_verify": 24.6, "allreduce_share": 0.82,
                                      "verify_ms_samples": [30.0, 31.0],
                                      "allreduce_calls": 300}]})  # fmt: skip
    hub.daemon.on_switch("ok")
    hub.daemon.on_restart("switch")
    hub.set_engine(True, "tree-ll", "eagle3", {}, "sim", None)
    s = scrape(hub)
    assert "fastverify_generation_tokens_per_second" not in names(s)
    assert "fastverify_allreduce_per_verify" not in names(s)
    old = {"profile": "ring-ll", "mode": "eagle3"}
    assert value(s, "fastverify_allreduce_calls_total", source="trace", **old) == 300
    assert value(s, "fastverify_verify_cycle_seconds_count", **old) == 2
    assert value(s, "fastverify_profile_switches_total", result="ok") == 1
    assert value(s, "fastverify_profile_switches_total", result="rolled_back") == 0
    assert value(s, "fastverify_engine_restarts_total", reason="switch") == 1
    with pytest.raises(ValueError):
        hub.daemon.on_switch("maybe")


def test_switch_downtime_is_a_histogram_by_mode_and_the_last_switch_an_info() -> None:
    hub = MetricsHub()
    s = scrape(hub)
    assert value(s, "fastverify_switch_downtime_seconds_count", mode="hold") == 0  # from 0
    assert "fastverify_switch_last_info" not in names(s)
    for seconds in (3.24, 61.0):
        hub.daemon.on_downtime("hold", seconds, {"kind": "restart", "profile": "ring-ll",
                                          "result": "ok"})  # fmt: skip
    s = scrape(hub)
    assert value(s, "fastverify_switch_downtime_seconds_count", mode="hold") == 2
    assert value(s, "fastverify_switch_downtime_seconds_sum", mode="hold") == 64.24
    assert value(s, "fastverify_switch_downtime_seconds_bucket", mode="hold", le="5.0") == 1
    assert value(s, "fastverify_switch_downtime_seconds_count", mode="none") == 0
    last = {"kind": "restart", "profile": "ring-ll", "result": "ok", "mode": "hold"}
    assert value(s, "fastverify_switch_last_info", downtime_s="61.0", **last) == 1
    assert value(s, "fastverify_switch_last_info", downtime_s="3.2", **last) is None
    with pytest.raises(ValueError):
        hub.daemon.on_downtime("maybe", 1.0, {})


def test_trace_window_gauges_and_histogram(hub: MetricsHub) -> None:
    samples = [9.0, 24.0, 30.0, 30.5, 120.0]
    hub.traces.on_analysis({"ranks": [
        {"rank": 1, "verify_passes": 5, "verify_ms_p50": 30.0, "verify_ms_p90": 84.0,
         "allreduce_per_verify": 122.0, "allreduce_ms_per_verify": 20.0, "allreduce_share": 0.5,
         "verify_ms_samples": samples, "allreduce_calls": 700},
        {"rank": 0, "verify_passes": 5, "verify_ms_p50": 30.0, "verify_ms_p90": 84.0,
         "allreduce_per_verify": 122.0, "allreduce_ms_per_verify": 24.6, "allreduce_share": 0.82,
         "verify_ms_samples": samples, "allreduce_calls": 650},
    ]})  # fmt: skip
    s = scrape(hub)
    pm = {"profile": "ring-ll", "mode": "eagle3"}
    assert value(s, "fastverify_allreduce_per_verify", **pm) == 122
    assert value(s, "fastverify_allreduce_seconds_per_verify", **pm) == pytest.approx(0.0246)
    assert value(s, "fastverify_allreduce_calls_total", source="trace", **pm) == 650  # rank 0
    assert value(s, "fastverify_rank_allreduce_seconds_per_verify", rank="1", **pm) == 0.02
    buckets = {le: value(s, "fastverify_verify_cycle_seconds_bucket", le=le, **pm)
               for le in ("0.01", "0.025", "0.03", "0.035", "0.1", "+Inf")}  # fmt: skip
    assert buckets == {"0.01": 1, "0.025": 2, "0.03": 3, "0.035": 4, "0.1": 4, "+Inf": 5}
    assert value(s, "fastverify_verify_cycle_seconds_sum", **pm) == pytest.approx(0.2135)


def test_counter_rate_is_the_published_throughput() -> None:
    clock = Clock()
    hub = MetricsHub(clock=clock, rate_window_s=10.0)
    hub.set_engine(True, "ring-ll", "eagle3", {}, "sim", None)
    total = 1000.0
    for _ in range(20):  # 100 tokens per second, polled each second
        hub.decode.on_poll({"generation_tokens_total": total, "gen_throughput": 55.0,
                               "num_running_reqs": 2.0, "spec_accept_length": 2.2})  # fmt: skip
        clock.t += 1.0
        total += 100.0
    clock.t -= 1.0
    s = scrape(hub)
    pm = {"profile": "ring-ll", "mode": "eagle3"}
    assert value(s, "fastverify_generation_tokens_per_second", **pm) == pytest.approx(100.0)
    # the engine restarted: SGLang's counter starts over, ours stays monotonic
    hub.decode.on_poll({"generation_tokens_total": 50.0})
    s = scrape(hub)
    assert value(s, "fastverify_generation_tokens_total", **pm) == pytest.approx(2900.0 + 50.0)
    # a new profile counts its own tokens from zero; the old series keeps its total
    hub.set_engine(True, "tree-ll", "eagle3", {}, "sim", None)
    hub.decode.on_poll({"generation_tokens_total": 80.0})
    s = scrape(hub)
    assert value(s, "fastverify_generation_tokens_total", **pm) == pytest.approx(2950.0)
    assert value(s, "fastverify_generation_tokens_total", profile="tree-ll", mode="eagle3") == 30
    hub.set_engine(True, "ring-ll", "eagle3", {}, "sim", None)
    # spec cycle from the poll: 2 requests x 2.2 / 55 tok/s (SGLang's own interval figure)
    hub.decode.on_poll({"generation_tokens_total": 150.0, "gen_throughput": 55.0,
                           "num_running_reqs": 2.0, "spec_accept_length": 2.2})  # fmt: skip
    s = scrape(hub)
    assert value(s, "fastverify_spec_cycle_seconds", **pm) == pytest.approx(2 * 2.2 / 55.0)


def test_up_follows_daemon_else_polls() -> None:
    hub = MetricsHub(clock=Clock())
    assert value(scrape(hub), "fastverify_up") == 0
    hub.decode.on_poll({"gen_throughput": 1.0})
    assert value(scrape(hub), "fastverify_up") == 1
    hub.decode.on_poll(None)
    assert value(scrape(hub), "fastverify_up") == 0
    hub.set_engine(False, "p", "baseline", {}, "sim", None)
    hub.decode.on_poll({"gen_throughput": 1.0})
    assert value(scrape(hub), "fastverify_up") == 0  # the daemon's word wins


def test_nccl_facts_from_logs(hub: MetricsHub) -> None:
    for line in (
        "h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
        "h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL",
        "h:1:1 [0] NCCL INFO AllReduce: 16384 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}",
        "h:1:1 [0] NCCL WARN NET/Socket : no interface found",
        "h:1:1 [0] NCCL WARN again",
    ):
        hub.logs.on_line(line)
    s = scrape(hub)
    assert value(s, "fastverify_nccl_info", version="2.28.9+cuda13.0") == 1
    assert value(s, "fastverify_nccl_env_info", var="NCCL_PROTO", value="LL") == 1
    assert value(s, "fastverify_nccl_tuning_info", collective="AllReduce", bytes="16384",
                 algo="RING", proto="LL", channels="2") == 1  # fmt: skip
    assert value(s, "fastverify_nccl_warnings_total") == 2
    assert value(s, "fastverify_log_lines_total") == 5
    # catching up on an old log keeps NCCL facts but publishes no stale decode figures
    hub.logs.on_line(DECODE.format(r=1, a="2.00", g="80.00"), live=False)
    assert "fastverify_generation_tokens_per_second" not in names(scrape(hub))


def test_inspector_summary_counts(hub: MetricsHub) -> None:
    hub.inspector.on_window(
        {
            "allreduce_calls": 244,
            "mean_exec_seconds": 45e-6,
            "mean_busbw_bytes_per_second": 2.5e9,
            "mean_message_bytes": 43008.0,
        }
    )
    hub.inspector.on_window({"allreduce_calls": 122})
    s = scrape(hub)
    pm = {"profile": "ring-ll", "mode": "eagle3"}
    assert value(s, "fastverify_allreduce_calls_total", source="inspector", **pm) == 366


def test_fresh_decode_line_wins_over_polls_then_polls_take_over() -> None:
    clock = Clock()
    hub = MetricsHub(clock=clock, log_fresh_s=30.0)
    hub.set_engine(True, "ring-ll", "eagle3", {}, "sim", None)
    pm = {"profile": "ring-ll", "mode": "eagle3"}
    hub.logs.on_line(DECODE.format(r=1, a="2.00", g="80.00"))
    clock.t += 1
    hub.decode.on_poll({"spec_accept_length": 0.0, "num_running_reqs": 0.0})  # idle poll
    assert value(scrape(hub), "fastverify_spec_accept_length", **pm) == 2.0
    clock.t += 31  # no decode line for 30 s: the server went idle
    hub.decode.on_poll({"spec_accept_length": 1.5, "num_running_reqs": 0.0})
    assert value(scrape(hub), "fastverify_spec_accept_length", **pm) == 1.5
    assert value(scrape(hub), "fastverify_running_requests", **pm) == 0.0


def test_nccl_facts_survive_the_relabel_at_ready_and_go_with_the_engine() -> None:
    hub = MetricsHub(clock=Clock())
    hub.set_engine(True, "ring-ll", "eagle3", {}, "sim", None)
    hub.logs.on_line("h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL")
    # the daemon's switch: STOPPING/STARTING still under the old label, engine down
    hub.set_engine(False, "ring-ll", "eagle3", {}, "sim", None)
    assert "fastverify_nccl_env_info" not in names(scrape(hub))  # the old process is gone
    hub.logs.on_line("h:2:2 [0] NCCL INFO NCCL_PROTO set by environment to Simple")  # new one
    hub.set_engine(True, "ring-simple", "eagle3", {}, "sim", None)  # READY, new label
    s = scrape(hub)
    assert value(s, "fastverify_nccl_env_info", var="NCCL_PROTO", value="Simple") == 1
    assert value(s, "fastverify_nccl_env_info", var="NCCL_PROTO", value="LL") is None


def test_switch_and_restart_series_exist_at_zero_before_any_switch() -> None:
    """A counter whose label set appears at its first increment is invisible to
    Prometheus' increase() (1 -> 1) and to the dashboards' `offset` restarts expression: the
    daemon's feed publishes every switch result and every restart reason it knows at 0 from
    the first scrape."""
    from fastverify.daemon import events as ev
    from fastverify.daemon.failures import REASONS
    from fastverify.daemon.observers import ExporterFeed
    from fastverify.exporters.collectors.daemon import SWITCH_RESULTS

    hub = MetricsHub(clock=Clock())
    feed = ExporterFeed(hub)
    s = scrape(hub)
    for result in ("ok", "rolled_back", "failed", "cancelled"):
        assert value(s, "fastverify_profile_switches_total", result=result) == 0, result
    assert set(SWITCH_RESULTS) == {"ok", "rolled_back", "failed", "cancelled"}
    for reason in ("switch", "mode", "restart", "cuda_graph_capture", "worker_exited", *REASONS):
        assert value(s, "fastverify_engine_restarts_total", reason=reason) == 0, reason
    feed(ev.OperationStarted("op1", "switch", "tree-ll", "eagle3"))  # the restart of a switch
    feed(ev.Crashed("nccl_error", "NCCL WARN", "tree-ll", "eagle3"))
    s = scrape(hub)
    assert value(s, "fastverify_engine_restarts_total", reason="switch") == 1
    assert value(s, "fastverify_engine_restarts_total", reason="nccl_error") == 1
    assert value(s, "fastverify_engine_restarts_total", reason="mode") == 0
    # a reason nobody could know in advance appears at its first restart
    feed(ev.Crashed("exited(-9)", "killed", "tree-ll", "eagle3"))
    assert value(scrape(hub), "fastverify_engine_restarts_total", reason="exited(-9)") == 1


def test_active_steps_time_at_each_and_recorded_acceptance() -> None:
    clock = Clock()
    hub = MetricsHub(clock=clock)
    hub.set_engine(True, "ring-ll", "adaptive", {}, "sim", None)
    # polls each second: 3 s at 3 steps while decoding, 2 s at 0, then 4 s idle at 0
    for steps, running in ((3, 1), (3, 1), (3, 1), (0, 32), (0, 32), (0, 0), (0, 0), (0, 0),
                           (0, 0), (3, 1)):  # fmt: skip
        hub.decode.on_poll({"spec_num_steps": float(steps), "num_running_reqs": running})
        clock.t += 1.0
    pm = {"profile": "ring-ll", "mode": "adaptive"}
    s = scrape(hub)
    assert value(s, "fastverify_spec_active_steps", **pm) == 3.0
    assert value(s, "fastverify_spec_steps_seconds_total", **pm, steps="3") == pytest.approx(3.0)
    # the idle polls do not count: the gauge of an idle server is stale
    assert value(s, "fastverify_spec_steps_seconds_total", **pm, steps="0") == pytest.approx(2.0)
    hub.speculation.on_acceptance({"profile": "ring-ll", "mode": "eagle3", "steps": 3,
                                   "weights": "real", "usable": True,
                                   "histogram": [4, 3, 2, 1]})  # fmt: skip
    s = scrape(hub)
    lab = {"profile": "ring-ll", "mode": "eagle3", "steps": "3", "weights": "real",
           "usable": "true", "source": "measured"}  # fmt: skip
    assert value(s, "fastverify_spec_accepted_drafts_ratio", **lab, drafts="0") == 0.4
    assert value(s, "fastverify_spec_recorded_accept_length", **lab, k="3") == pytest.approx(2.0)
    assert value(s, "fastverify_spec_recorded_accept_length", **lab, k="1") == pytest.approx(1.6)
    # acceptance SGLang forced is recorded as such, never as measured
    forced = "forced (SGLANG_SIMULATE_ACC_LEN=2)"
    hub.speculation.on_acceptance({"profile": "ring-ll", "mode": "eagle3", "steps": 3,
                                   "weights": "dummy", "usable": False, "histogram": [0, 10],
                                   "acceptance_source": forced})  # fmt: skip
    lab = {**lab, "weights": "dummy", "usable": "false", "source": forced}
    assert value(scrape(hub), "fastverify_spec_recorded_accept_length", **lab, k="3") == 2.0
    # a baseline server has no active steps
    hub.set_engine(True, "ring-ll", "baseline", {}, "sim", None)
    hub.decode.on_poll({"spec_num_steps": 0.0, "num_running_reqs": 1})
    assert value(scrape(hub), "fastverify_spec_active_steps", profile="ring-ll",
                 mode="baseline") is None  # fmt: skip


def test_a_trial_on_dummy_weights_shows_its_steps_and_never_counts() -> None:
    """`spec costs` at 2 steps on dummy weights, then the real server at 3 again: only the
    real server's decoding counts under the profile's time at each step count."""
    clock = Clock()
    hub = MetricsHub(clock=clock)
    hub.set_engine(True, "ring-ll", "eagle3", {"weights": "dummy"}, "sim", None)
    for _ in range(3):
        hub.decode.on_poll({"spec_num_steps": 2.0, "num_running_reqs": 4})
        clock.t += 1.0
    pm = {"profile": "ring-ll", "mode": "eagle3"}
    s = scrape(hub)
    assert value(s, "fastverify_spec_active_steps", **pm) == 2.0
    assert value(s, "fastverify_spec_steps_seconds_total", **pm, steps="2") is None
    hub.set_engine(False, "ring-ll", "eagle3", {"weights": "dummy"}, "sim", None)  # restart
    hub.set_engine(True, "ring-ll", "eagle3", {"weights": "real"}, "sim", None)
    for _ in range(3):
        hub.decode.on_poll({"spec_num_steps": 3.0, "num_running_reqs": 1})
        clock.t += 1.0
    s = scrape(hub)
    assert value(s, "fastverify_spec_steps_seconds_total", **pm, steps="3") == pytest.approx(2.0)
    assert value(s, "fastverify_spec_steps_seconds_total", **pm, steps="2") is None


def test_steps_seen_before_a_switch_never_count_under_the_new_labels() -> None:
    """An EAGLE-3 server at 3 steps, then a switch to adaptive whose server runs 2: the time
    after the switch counts at 2 under adaptive, never at the old server's 3."""
    clock = Clock()
    hub = MetricsHub(clock=clock)
    hub.set_engine(True, "ring-ll", "eagle3", {}, "sim", None)
    for _ in range(3):
        hub.decode.on_poll({"spec_num_steps": 3.0, "num_running_reqs": 1})
        clock.t += 1.0
    hub.set_engine(True, "ring-ll", "adaptive", {}, "sim", None)
    for _ in range(3):
        hub.decode.on_poll({"spec_num_steps": 2.0, "num_running_reqs": 1})
        clock.t += 1.0
    s = scrape(hub)
    adaptive = {"profile": "ring-ll", "mode": "adaptive"}
    assert value(s, "fastverify_spec_steps_seconds_total", **adaptive, steps="3") is None
    assert value(s, "fastverify_spec_steps_seconds_total", **adaptive, steps="2") == pytest.approx(
        2.0
    )
    eagle3 = {"profile": "ring-ll", "mode": "eagle3"}
    assert value(s, "fastverify_spec_steps_seconds_total", **eagle3, steps="3") == pytest.approx(
        2.0
    )
