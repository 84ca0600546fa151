"""Reading a MetricsHub as Prometheus would: a fixed clock, one scrape parsed back with
prometheus-client's own text parser, a sample by name and labels."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fastverify.exporters import collectors
from fastverify.exporters.collectors.allreduce import AllreduceSource
from fastverify.exporters.collectors.frontdoor import FrontDoorSource
from fastverify.exporters.collectors.weight_cache import WeightCacheSource
from fastverify.exporters.hub import MetricsHub


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def scrape(hub: MetricsHub) -> dict[tuple[str, tuple], float]:
    reg = CollectorRegistry()
    collectors.register(reg, hub)
    text = generate_latest(reg).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def names(samples: dict) -> set[str]:
    return {k[0] for k in samples}


SPEC_PLAN = {  # a stored plan's fields the stale check reads (speculation.plan.Plan.to_dict)
    "accept_steps": 3,
    "lower_acceptance": {"accept_length": 2.0},
    "tiers": {"1": {"steps": 2, "break_even_accept_length": {"1": 1.5, "2": 2.0}}},
}


def full_feed() -> MetricsHub:
    """A feed that makes every series of the catalog appear: every source the hub has, each
    call as its writer makes it (the daemon, parsed log records, polls, a profile window,
    inspector records, finished requests)."""
    clock = Clock()
    hub = MetricsHub(clock=clock)
    hub.set_engine(True, "ring-ll", "adaptive", {"NCCL_ALGO": "Ring", "weights": "real",
                   "acceptance_source": "forced (SGLANG_SIMULATE_ACC_LEN=3)"},
                   "sglang", "http://127.0.0.1:30000")  # fmt: skip
    hub.engine.set_sglang({"version": "0.5.23", "facts_version": "0.5.23", "supported": True})
    hub.add(AllreduceSource(hub)).set_backend("pcie_ipc", 8 << 20)  # the all-reduce part's
    hub.daemon.set_start_seconds(12.5)
    hub.daemon.set_start_phases({"weights": 8.0, "cuda_graph": 3.0, "rest": 1.5})
    cache = hub.add(WeightCacheSource(hub))  # the weight-cache part's own source
    cache.on_start({"source": "disk", "fallback": True, "reason": "mismatch"})
    cache.set_group(True, 80 << 30)
    hub.daemon.declare_restart_reasons(["crash", "switch"])
    hub.daemon.on_restart("switch")
    hub.daemon.on_switch("ok")
    hub.daemon.on_downtime("hold", 3.2, {"kind": "switch", "profile": "ring-ll", "result": "ok"})
    hub.api_auth.watch(["token", "tls"], lambda: 1)
    from fastverify.frontdoor.gate import Gate

    door = Gate(queue_size=4, max_wait_s=30.0)  # the front door's own status, as it answers
    door.serve(30001)
    door.cut("POST /generate")
    hub.add(FrontDoorSource(hub, door.status))  # the front door's part's own source
    hub.api_auth.on_failure("token")
    hub.daemon.set_decision("ring-ll", "adaptive", "pcie_ipc", True)
    hub.baselines.set("ring-ll", 160.0, 40.0, clock.t - 100.0, concurrency=1)
    hub.speculation.on_acceptance({"profile": "ring-ll", "mode": "eagle3", "steps": 3,
                                   "weights": "real", "usable": True,
                                   "histogram": [4, 3, 2, 1]})  # fmt: skip
    hub.speculation.set_plan(SPEC_PLAN)
    for rec in ({"kind": "nccl_version", "version": "2.28.9+cuda13.0"},
                {"kind": "nccl_env", "var": "NCCL_ALGO", "value": "Ring"},
                {"kind": "nccl_tuning", "collective": "AllReduce", "bytes": 16384,
                 "algo": "RING", "proto": "LL", "channel_lo": 0, "channel_hi": 1},
                {"kind": "nccl_warn"}):  # fmt: skip
        hub.logs.on_record(rec)
    poll = {"generation_tokens_total": 1000.0, "gen_throughput": 80.0, "num_running_reqs": 1.0,
            "num_queue_reqs": 0.0, "spec_accept_length": 2.5, "spec_accept_rate": 0.5,
            "token_usage": 0.1, "spec_num_steps": 2.0}  # fmt: skip
    hub.decode.on_poll(poll)
    clock.t += 20.0
    hub.decode.on_poll({**poll, "generation_tokens_total": 2600.0})
    hub.speculation.on_requests([{"histogram": [2, 3, 5], "e2e_latency": 5.0} for _ in range(20)])
    hub.traces.on_analysis({"ranks": [
        {"rank": r, "verify_passes": 2, "verify_ms_p50": 30.0, "verify_ms_p90": 31.0,
         "allreduce_per_verify": 122.0, "allreduce_ms_per_verify": 24.6, "allreduce_share": 0.82,
         "verify_ms_samples": [30.0, 31.0], "allreduce_calls": 244} for r in (0, 1)]})  # fmt: skip
    hub.traces.on_failure()
    hub.inspector.on_window({"allreduce_calls": 122, "mean_exec_seconds": 45e-6,
                      "mean_busbw_bytes_per_second": 2.5e9,
                      "mean_message_bytes": 43008.0})  # fmt: skip
    return hub
