"""What a scrape shows must be true: no series without fresh data, a dead
engine's figures go with it, request counts follow SGLang's own gauge, per-source
freshness; and a golden exposition for a fixed feed of typed records."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from fastverify.exporters import collectors
from fastverify.exporters.collectors.baselines import BaselinesSource
from fastverify.exporters.hub import MetricsHub
from tests.support.hub import Clock, names, scrape, value

GOLDEN = Path(__file__).parent / "golden" / "metrics.prom"
PM = {"profile": "ring-ll", "mode": "eagle3"}
SETTINGS = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "HF_TOKEN": "hf_secretvalue"}
DECODE = {"kind": "decode", "running_reqs": 4, "token_count": 148, "token_usage": 0.1,
          "accept_len": 2.5, "accept_rate": 0.5, "cuda_graph": True, "gen_throughput": 80.0,
          "queue_reqs": 1}  # fmt: skip
IDLE_POLL = {"spec_accept_length": 0.0, "spec_accept_rate": 0.0, "num_running_reqs": 0.0,
             "num_queue_reqs": 0.0, "gen_throughput": 0.0, "token_usage": 0.0,
             "generation_tokens_total": 0.0}  # fmt: skip


def test_fresh_idle_eagle3_engine_has_no_spec_figures() -> None:
    clock = Clock()
    hub = MetricsHub(clock=clock)
    hub.set_engine(True, "ring-ll", "eagle3", SETTINGS, "sglang", "http://127.0.0.1:1")
    hub.baselines.set("ring-ll", 64.0, 40.0, clock.t - 10, concurrency=1)
    for _ in range(3):
        hub.decode.on_poll(IDLE_POLL)
        clock.t += 1.0
    s = scrape(hub)
    for absent in ("fastverify_spec_accept_length", "fastverify_spec_accept_rate",
                   "fastverify_spec_speedup_estimate", "fastverify_spec_cycle_seconds",
                   "fastverify_spec_breakeven_accept_length"):  # fmt: skip
        assert absent not in names(s), absent
    # what is true of an idle engine is published: nothing running, 0 tokens/s
    assert value(s, "fastverify_running_requests", **PM) == 0.0
    assert value(s, "fastverify_generation_tokens_per_second", **PM) == 0.0


def test_a_dead_engine_takes_its_figures_along_and_keeps_its_profile_labels() -> None:
    clock = Clock()
    hub = MetricsHub(clock=clock)
    hub.set_engine(True, "ring-ll", "eagle3", SETTINGS, "sglang", "http://127.0.0.1:1")
    hub.logs.on_record(DECODE)
    assert value(scrape(hub), "fastverify_spec_accept_length", **PM) == 2.5
    # the daemon: engine crashed (BACKOFF), same profile, its settings still known
    hub.set_engine(False, "ring-ll", "eagle3", SETTINGS, "sglang", None)
    s = scrape(hub)
    assert value(s, "fastverify_up") == 0
    for gone in ("fastverify_generation_tokens_per_second", "fastverify_spec_accept_length",
                 "fastverify_running_requests", "fastverify_queued_requests"):  # fmt: skip
        assert gone not in names(s), gone
    info = [dict(k[1]) for k in s if k[0] == "fastverify_profile_info"]
    assert info == [{"profile": "ring-ll", "mode": "eagle3", "engine": "sglang",
                     "nccl_algo": "Ring", "nccl_proto": "LL", "weights": "real"}]  # fmt: skip


def test_running_requests_follow_sglangs_gauge_not_a_stale_log_line() -> None:
    clock = Clock()
    hub = MetricsHub(clock=clock, log_fresh_s=30.0)
    hub.set_engine(True, "ring-ll", "eagle3", {}, "sglang", "http://127.0.0.1:1")
    hub.logs.on_record(DECODE)
    assert value(scrape(hub), "fastverify_running_requests", **PM) == 4
    clock.t += 1.0  # load ended: SGLang's gauge says 0 while the last decode line said 4
    hub.decode.on_poll(IDLE_POLL)
    s = scrape(hub)
    assert value(s, "fastverify_running_requests", **PM) == 0
    assert value(s, "fastverify_queued_requests", **PM) == 0


def test_the_standalone_exporter_drops_figures_when_sglang_stops_answering() -> None:
    clock = Clock()
    hub = MetricsHub(clock=clock)
    hub.set_labels("ring-ll", "eagle3", {}, "sglang")
    hub.decode.on_poll({**IDLE_POLL, "num_running_reqs": 3.0, "spec_accept_length": 2.2})
    assert value(scrape(hub), "fastverify_running_requests", **PM) == 3
    clock.t += 1.0
    hub.decode.on_poll(None)
    s = scrape(hub)
    assert value(s, "fastverify_up") == 0
    assert "fastverify_running_requests" not in names(s)
    assert "fastverify_spec_accept_length" not in names(s)
    assert value(s, "fastverify_source_up", source="sglang_metrics") == 0
    assert value(s, "fastverify_source_last_success_timestamp_seconds",
                 source="sglang_metrics") == clock.t - 1.0  # fmt: skip


def test_sources_report_success_and_freshness_separately() -> None:
    clock = Clock()
    hub = MetricsHub(clock=clock)
    s = scrape(hub)
    assert "fastverify_source_up" not in names(s)  # nothing used yet: nothing claimed
    hub.set_engine(True, "ring-ll", "eagle3", {}, "sglang", "http://127.0.0.1:1")
    clock.t += 5
    hub.logs.on_record(None)  # a line without a record still proves the log is read
    clock.t += 5
    hub.traces.on_failure()
    s = scrape(hub)
    assert value(s, "fastverify_source_up", source="daemon") == 1
    assert value(s, "fastverify_source_up", source="logs") == 1
    assert value(s, "fastverify_source_up", source="traces") == 0
    t0 = 1_800_000_000.0
    assert value(s, "fastverify_source_last_success_timestamp_seconds", source="daemon") == t0
    assert value(s, "fastverify_source_last_success_timestamp_seconds", source="logs") == t0 + 5
    assert value(s, "fastverify_source_last_success_timestamp_seconds", source="traces") is None
    assert value(s, "fastverify_source_up", source="inspector") is None


def golden_feed() -> MetricsHub:
    """A fixed feed of typed records (the daemon's calls, parsed log records, one poll)."""
    clock = Clock(1_800_000_000.0)
    hub = MetricsHub(clock=clock, timer=clock)  # a scrape takes no time on this clock
    hub.set_engine(True, "ring-ll", "eagle3", SETTINGS, "sglang", "http://127.0.0.1:30000")
    hub.daemon.set_start_seconds(12.5)
    hub.daemon.on_restart("switch")
    hub.daemon.on_switch("ok")
    hub.daemon.on_downtime("hold", 3.2, {"kind": "switch", "profile": "ring-ll", "result": "ok"})
    hub.baselines.set("ring-ll", 160.0, 40.0, clock.t - 100.0, concurrency=4)
    hub.baselines.set("ring-ll", 64.0, 64.0, clock.t - 50.0, concurrency=1)  # not this batch
    hub.logs.on_record({"kind": "nccl_version", "version": "2.28.9+cuda13.0"})
    hub.logs.on_record({"kind": "nccl_env", "var": "NCCL_PROTO", "value": "LL"})
    hub.logs.on_record({"kind": "nccl_warn"})
    clock.t += 1.0
    hub.decode.on_poll({"generation_tokens_total": 1000.0, "gen_throughput": 80.0,
                           "num_running_reqs": 4.0, "num_queue_reqs": 1.0,
                           "spec_accept_length": 2.5, "spec_accept_rate": 0.5,
                           "token_usage": 0.1})  # fmt: skip
    clock.t += 1.0
    hub.logs.on_record(DECODE)
    return hub


def test_golden_exposition() -> None:
    """The exposition for `golden_feed()`, byte for byte. The expected file was written
    and checked by hand (values derived in its comments' spirit below):
    - tokens/s: one counter point only -> SGLang's gen throughput 80 (no rate yet);
    - spec cycle = 4 running x 2.5 accepted / 80 tok/s = 0.125 s;
    - break-even = 0.125 s x 40 tok/s per request of the baseline at 4 requests (the
      reading's 4 running; the 1-request baseline is not compared with) = 5.0;
      speedup = 2.5 accepted / 5.0 = 0.5 (= 80 / 4 = 20 tok/s per request vs 40: it loses,
      as the break-even above the accept length says);
    - baseline ages = 102 s and 52 s (recorded at t-100 and t-50, scraped 2 s later);
    - HF_TOKEN never appears; nccl_algo/proto come from the profile;
    - the switch's 3.2 s downtime (hold): one count in the 5.0 bucket and above, sum 3.2,
      and the last switch's labels with downtime_s "3.2";
    - each source collected, successfully, in 0 s of the fixed clock."""
    reg = CollectorRegistry()
    collectors.register(reg, golden_feed())
    got = generate_latest(reg).decode()
    assert got == GOLDEN.read_text(encoding="utf-8")


def test_a_failing_source_is_left_out_and_reported_while_the_others_publish() -> None:
    """node_exporter's contract, per source: a collect() that raises costs its own series
    that scrape (success 0), never the scrape; the duration comes from the hub's timer."""
    ticks = iter(range(1000))
    hub = golden_feed()
    hub.timer = lambda: float(next(ticks))  # each reading of the timer one second later

    class Broken(BaselinesSource):
        def families(self, now: float) -> list:
            raise RuntimeError("a bug in one source")

    hub.sources["baselines"] = Broken(hub)
    s = scrape(hub)
    assert value(s, "fastverify_scrape_collector_success", collector="baselines") == 0
    assert "fastverify_baseline_tokens_per_second" not in names(s)
    assert value(s, "fastverify_scrape_collector_success", collector="decode") == 1
    assert value(s, "fastverify_spec_accept_length", **PM) == 2.5
    assert value(s, "fastverify_scrape_collector_duration_seconds", collector="decode") == 1.0
