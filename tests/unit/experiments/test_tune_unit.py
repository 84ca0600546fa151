"""`fastverifyctl tune` pieces on hand-built data: the plan and its budget, the journal
(torn lines, what counts as finished, a new tune setting an old one aside), the no-GPU
skips, the decision rule and what would change it, load counting, backend labels."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fastverify.client import Calls
from fastverify.engines.allreduce_host import AllreduceHost, possible_backends
from fastverify.experiments.tune import confirm, decide, gpu, plan
from fastverify.experiments.tune.candidates import candidate_backend
from fastverify.experiments.tune.context import TuneConfig
from fastverify.experiments.tune.journal import Journal
from fastverify.profiles import topology


def _facts(**kw: Any) -> plan.PlanFacts:
    base: dict[str, Any] = dict(candidates=7, skips={}, finalists=3, budget_s=None, repeats=3,
                                duration_s=20.0, accept_known=True)  # fmt: skip
    base.update(kw)
    return plan.PlanFacts(**base)


def _stage(p: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in p["stages"] if s["name"] == name)


# ------------------------------------------------------------------ plan and budget


def test_plan_without_records_says_default_and_counts_loads() -> None:
    p = plan.make_plan(_facts())
    assert _stage(p, "trial")["source"] == "dummy load: default"
    assert _stage(p, "confirm")["source"] == "real load: default"
    # 7 trials + 3 EAGLE-3 trials on dummy weights, 3 finalists with real weights
    assert p["loads"] == {"dummy": 10, "real": 3, "cached": 0, "disk": 3}
    assert p["cached"] is False
    measure = 3 * (20.0 + plan.DEFAULTS["bench_overhead"])
    assert _stage(p, "confirm")["estimate_s"] == pytest.approx(3 * (600.0 + measure))
    assert p["budget_note"] is None and not p["over_budget"]


def test_unknown_accept_length_plans_one_real_eagle3_load() -> None:
    p = plan.make_plan(_facts(accept_known=False))
    assert p["loads"]["real"] == 4
    assert "+ 1 EAGLE-3" in _stage(p, "confirm")["units"]


def test_with_the_weight_cache_the_trial_runs_real_weights_at_a_cached_loads_cost() -> None:
    history = [
        {"kind": "start", "result": "ok", "weights": "real", "duration_s": 600.0,
         "weight_load": {"source": "disk"}},
        *[{"kind": "switch", "result": "ok", "weights": "real", "duration_s": 30.0 + i,
           "weight_load": {"source": "cache"}} for i in range(3)],
        {"kind": "switch", "result": "ok", "weights": "dummy", "duration_s": 40.0},
    ]  # fmt: skip
    p = plan.make_plan(_facts(history=history, cached=True, finalists=2, accept_known=False))
    measure = 3 * (20.0 + plan.DEFAULTS["bench_overhead"])
    trace = plan.DEFAULTS["trace"]
    t, c, d = (_stage(p, n) for n in ("trial", "confirm", "decide"))
    # 7 baselines map the cache's weights (31 s each), 2 EAGLE-3 trials load dummy weights
    assert t["estimate_s"] == pytest.approx(
        7 * (31.0 + measure + trace) + 2 * (40.0 + measure + trace)
    )
    assert t["source"] == (
        "cached load: recorded: median of 3 daemon load(s); dummy load: recorded: median of 1 "
        "daemon load(s)"
    )
    assert "7 baseline(s) on cached real weights x (31 s cached load" in t["units"]
    # confirm reloads no finalist; the EAGLE-3 load reads from disk
    assert c["estimate_s"] == pytest.approx(600.0 + measure)
    assert "no reload" in c["units"] and "1 EAGLE-3 x (600 s load from disk" in c["units"]
    assert (t["cached_loads"], c["cached_loads"], c["real_loads"]) == (7, 0, 1)
    assert d["cached_loads"] == 1 and d["estimate_s"] == pytest.approx(32.0)
    assert p["cached"] is True
    assert p["loads"] == {"real": 9, "cached": 8, "disk": 1, "dummy": 2}
    # without the cache the same history: dummy trials, the finalists reloaded from disk
    p = plan.make_plan(_facts(history=history, finalists=2, accept_known=False))
    assert _stage(p, "confirm")["estimate_s"] == pytest.approx(3 * (600.0 + measure))
    assert p["loads"] == {"real": 3, "cached": 0, "disk": 3, "dummy": 9}
    # nothing recorded: the defaults, and the plan says so
    p = plan.make_plan(_facts(cached=True, finalists=2))
    assert _stage(p, "trial")["source"] == "cached load: default; dummy load: default"


def test_the_trial_uses_shared_weights_only_where_a_part_serves_baseline_loads() -> None:
    from fastverify.experiments.tune.pipeline import _shared_baseline_loads

    class Daemon(Calls):
        def __init__(self, status: dict[str, Any]) -> None:
            self.answer = status

        def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
            assert (method, path, body) == ("GET", "/v1/status", None)
            return self.answer

    def serves(**sections: Any) -> tuple[bool, float | None]:
        status = {"parts": list(sections), **sections}
        return _shared_baseline_loads(SimpleNamespace(client=Daemon(status)))

    assert serves(a={"shared_loads": []}, b={"shared_loads": ["baseline", "eagle3"]}) == (
        True,
        None,
    )
    for no in (serves(a={"shared_loads": ["eagle3"]}), serves(a={}), serves()):
        assert no == (False, None)
    # the seconds the sharing part took to read the weights: what a load from disk reads too
    read = serves(a={"shared_loads": [], "shared_load_s": 5.0},
                  b={"shared_loads": ["baseline"], "shared_load_s": 20.7})  # fmt: skip
    assert read == (True, 20.7)
    # a section the status does not list as a part's is not read
    assert _shared_baseline_loads(
        SimpleNamespace(client=Daemon({"x": {"shared_loads": ["baseline"]}}))
    ) == (False, None)


def test_a_cached_start_counts_its_phases_and_prices_a_dummy_load_none_recorded() -> None:
    # the daemon's first start waited 5.6 s for the cache's own disk load: not a cached
    # load's cost (its phases are); with no dummy load recorded, a cached one prices it
    start = {"kind": "start", "result": "ok", "weights": "real", "duration_s": 9.0,
             "phases": {"engine_ready": 3.3, "stop": 0.0, "validate": 0.05, "verify": 0.05},
             "weight_load": {"source": "cache"}}  # fmt: skip
    loads = plan.load_times([start])
    first = " (first start: kernel builds included)"
    assert loads["cached"] == (pytest.approx(3.4), f"recorded: median of 1 daemon load(s){first}")
    assert loads["dummy"] == (
        pytest.approx(3.4),
        f"recorded: the engine's part of 1 daemon load(s){first}, no weights read",
    )
    assert loads["real"] == (600.0, "default")
    # a disk load keeps its whole duration
    disk = dict(start, weight_load={"source": "disk"})
    assert plan.load_times([disk])["real"][0] == 9.0


def test_the_real_host_arithmetic_of_docs_tune_md_is_the_plans_own() -> None:
    """docs/guides/tune.md's 8-GPU table: today's total, the total with the weight cache at the
    field's 1.5-minute load, and at the H200's measured cached (36 s) and dummy (32 s)
    starts, as the plan computes them from the figures the doc names (10-minute real load,
    3 x 20 s per measurement, 9 candidates, 2 finalists, the recorded stage times)."""
    doc = (Path(__file__).resolve().parents[3] / "docs/guides/tune.md").read_text()
    found = re.findall(r"the plan's own arithmetic with these figures: ([\d.]+)", doc)
    quoted = [float(x) for x in found]
    times = {"inventory": [10.0], "candidates": [2.0], "derive_tuner": [12.4], "preflight": [5.1],
             "rehearse": [11.2], "trace": [5.0], "bench_overhead": [2.0]}  # fmt: skip
    facts = _facts(candidates=9, finalists=2, times=times, ranked=True)
    today = plan.make_plan(facts)["total_s"] / 60
    cached = plan.make_plan(plan.PlanFacts(**{**facts.__dict__, "cached": True}))["total_s"] / 60
    h200 = [{"kind": "switch", "result": "ok", "weights": "real", "duration_s": 36.0,
             "weight_load": {"source": "cache"}},
            {"kind": "switch", "result": "ok", "weights": "dummy", "duration_s": 32.0}]  # fmt: skip
    measured = plan.make_plan(plan.PlanFacts(**{**facts.__dict__, "cached": True, "history": h200}))
    totals = [round(today, 1), round(measured["total_s"] / 60, 1), round(cached, 1)]
    assert quoted == totals == [41.2, 14.0, 20.5]
    assert measured["total_s"] <= 15 * 60 and measured["loads"]["disk"] == 0


def test_recorded_loads_come_from_the_daemon_history() -> None:
    history = [
        {"kind": "switch", "result": "ok", "weights": "real", "duration_s": 100.0},
        {"kind": "switch", "result": "ok", "weights": "real", "duration_s": 140.0},
        {"kind": "switch", "result": "rolled_back", "weights": "real", "duration_s": 900.0},
        {"kind": "switch", "result": "ok", "weights": "dummy", "duration_s": 12.0},
        {"kind": "decision", "result": "applied", "duration_s": 0.0},
    ]
    loads = plan.load_times(history)
    assert loads["real"] == (120.0, "recorded: median of 2 daemon load(s)")
    assert loads["dummy"][0] == 12.0
    p = plan.make_plan(_facts(history=history))
    assert _stage(p, "confirm")["source"].startswith("real load: recorded")


def test_real_loads_bound_a_dummy_one_and_recorded_stage_times_replace_defaults() -> None:
    history = [{"kind": "start", "result": "ok", "duration_s": 4.0}]
    loads = plan.load_times(history)
    assert loads["dummy"] == (
        4.0,
        "recorded: the engine's part of 1 daemon load(s) (first start: kernel builds "
        "included), no weights read",
    )
    times = {"inventory": [0.5], "candidates": [0.1], "trace": [3.0], "bench_overhead": [0.4]}
    p = plan.make_plan(_facts(history=history, times=times))
    for name in ("inventory", "candidates"):
        assert _stage(p, name)["source"].startswith("recorded"), _stage(p, name)
    trial = _stage(p, "trial")
    assert "4 s load" in trial["units"] and "3 s trace" in trial["units"], trial
    assert "90 s" not in trial["units"]
    measure = 3 * (20.0 + 0.4)
    assert _stage(p, "confirm")["estimate_s"] == pytest.approx(3 * (4.0 + measure))


def test_budget_lowers_finalists_before_trials_and_never_overruns_silently() -> None:
    full = plan.make_plan(_facts())
    per_finalist = 600.0 + 3 * 22.0
    # room for everything but one finalist: only the finalists go down
    p = plan.make_plan(_facts(budget_s=full["total_s"] - per_finalist / 2))
    assert (p["finalists"], p["trial_candidates"]) == (2, 7)
    assert p["total_s"] <= p["budget_s"] and "finalists 3 -> 2" in p["budget_note"]
    # a budget below one finalist + all trials: trials go down too, finalists stay at 1
    one = plan.make_plan(_facts(finalists=1))
    p = plan.make_plan(_facts(budget_s=one["total_s"] - 3 * 200.0))
    assert p["finalists"] == 1 and 1 <= p["trial_candidates"] < 7
    assert p["total_s"] <= p["budget_s"]
    # impossible: the smallest plan, and the note says by how much it is over
    p = plan.make_plan(_facts(budget_s=60.0))
    assert (p["finalists"], p["trial_candidates"]) == (1, 1)
    assert p["over_budget"] and "over" in p["budget_note"]


def test_skipped_and_finished_stages_cost_nothing_in_the_plan() -> None:
    p = plan.make_plan(_facts(skips={"preflight": "no GPU"}, done=["inventory"]))
    assert _stage(p, "preflight")["estimate_s"] == 0 and not _stage(p, "preflight")["will_run"]
    assert _stage(p, "inventory")["note"] == "finished earlier (resume)"
    assert plan.remaining_s(p, "trial", 0.0) == pytest.approx(
        sum(_stage(p, n)["estimate_s"] for n in ("trial", "confirm", "decide"))
    )


# ------------------------------------------------------------------ no-GPU skips


def test_no_gpu_skips_every_gpu_stage_with_its_reason() -> None:
    cfg = TuneConfig(model_config="config.json")
    assert set(gpu.skip_reasons(cfg, gpus=0, torch_ok=False)) == {
        "derive_tuner", "preflight", "rehearse"}  # fmt: skip
    assert all("no GPU" in r for r in gpu.skip_reasons(cfg, 0, False).values())
    one = gpu.skip_reasons(cfg, gpus=1, torch_ok=True)
    assert set(one) == {"derive_tuner"} and "2+" in one["derive_tuner"]
    assert gpu.skip_reasons(cfg, gpus=2, torch_ok=True) == {}
    no_torch = gpu.skip_reasons(cfg, gpus=8, torch_ok=False)
    assert all("PyTorch" in r for r in no_torch.values()) and len(no_torch) == 3
    no_model = gpu.skip_reasons(TuneConfig(), gpus=8, torch_ok=True)
    assert set(no_model) == {"rehearse"} and "--model-config" in no_model["rehearse"]


# ------------------------------------------------------------------ journal


def test_journal_finished_stages_torn_lines_and_a_new_tune(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.begin({"a": 1})
    j.append({"event": "stage_finished", "name": "inventory", "status": "done", "data": {}})
    j.append({"event": "stage_finished", "name": "trial", "status": "failed"})
    with open(j.path, "a") as fh:  # kill -9 in the middle of a write
        fh.write('{"event": "stage_finished", "name": "conf')
    again = Journal(tmp_path)
    assert again.unfinished() and set(again.finished()) == {"inventory"}
    again.append({"event": "stage_finished", "name": "trial", "status": "done"})
    lines = again.path.read_text().splitlines()
    assert json.loads(lines[-1])["name"] == "trial"  # not glued to the torn line
    assert set(Journal(tmp_path).finished()) == {"inventory", "trial"}
    again.append({"event": "end"})
    assert not Journal(tmp_path).unfinished()
    # a new tune sets the old journal aside
    fresh = Journal(tmp_path)
    fresh.begin({"a": 2})
    assert [r["config"] for r in fresh.records if r["event"] == "start"] == [{"a": 2}]
    assert len(list(tmp_path.glob("journal-*.jsonl"))) == 1


def test_the_loads_of_every_run_of_every_stage_add_up_across_daemons(tmp_path: Path) -> None:
    """A stage Ctrl-C cut (its put-back included), one that failed and one run again by
    --resume all count: the journal's runs, not one daemon's history, are the total."""
    from fastverify.experiments.tune.pipeline import total_loads

    def loads(real: int = 0, cached: int = 0, dummy: int = 0) -> dict[str, int]:
        return {"real": real, "cached": cached, "disk": real - cached, "dummy": dummy}

    j = Journal(tmp_path)
    j.begin({})
    assert total_loads(j) is None  # no run yet
    j.append({"event": "stage_finished", "name": "inventory", "status": "done",
              "loads": loads()})  # fmt: skip
    j.append({"event": "stage_started", "name": "trial"})
    j.append(
        {
            "event": "stage_interrupted",
            "name": "trial",
            "wall_s": 80.0,
            "loads": loads(real=1, cached=1, dummy=1),
        }
    )  # the EAGLE-3 trial, the put-back
    j.append({"event": "stage_finished", "name": "trial", "status": "failed",
              "loads": loads(dummy=2)})  # fmt: skip
    j.append({"event": "stage_finished", "name": "trial", "status": "done",
              "loads": loads(real=1, cached=1, dummy=1)})  # fmt: skip
    j.append({"event": "stage_finished", "name": "confirm", "status": "done",
              "loads": loads(real=1)})  # fmt: skip
    again = Journal(tmp_path)  # as a --resume on another machine reads it
    runs = again.attempts("trial")
    assert [r.get("status") or r["event"] for r in runs] == ["stage_interrupted", "failed", "done"]
    assert again.last_of("trial")["status"] == "done" and set(again.finished()) == {
        "inventory", "trial", "confirm"}  # fmt: skip
    assert total_loads(again) == {"real": 3, "cached": 2, "disk": 1, "dummy": 4}
    # a run an older fastverify journaled without its loads: the total is not made up
    again.append({"event": "stage_finished", "name": "decide", "status": "done"})
    assert total_loads(Journal(tmp_path)) is None


def test_a_stage_plan_is_its_estimate_and_its_loads_by_kind() -> None:
    history = [{"kind": "switch", "result": "ok", "weights": "real", "duration_s": 40.0,
                "weight_load": {"source": "cache"}}]  # fmt: skip
    p = plan.make_plan(_facts(history=history, cached=True, candidates=3, finalists=1))
    trial = plan.stage_plan(p, "trial")
    assert trial["planned_s"] == pytest.approx(_stage(p, "trial")["estimate_s"], abs=0.05)
    assert trial["planned_loads"] == {"real": 3, "cached": 3, "disk": 0, "dummy": 1}
    assert plan.stage_plan(p, "decide")["planned_loads"] == {"real": 1, "cached": 1, "disk": 0,
                                                             "dummy": 0}  # fmt: skip
    assert plan.stage_plan(p, "no-such") == {"planned_s": None, "planned_loads": None}


def test_the_plan_counts_confirms_eagle3_load_once_the_trial_says_it_will_happen() -> None:
    """With a known accept length the plan leaves confirm's real EAGLE-3 load out until the
    trial's break-even is known; from then on it is in, exactly when confirm will load it."""
    from fastverify.experiments.tune.context import StageResult

    def ctx(be: float | None, done: bool = True) -> Any:
        rows = [{"profile": "a", "mode": "baseline", "status": "ok", "tokens_per_second_mean": 90},
                {"profile": "b", "mode": "baseline", "status": "ok", "tokens_per_second_mean": 99},
                {"profile": "b", "mode": "eagle3", "status": "ok",
                 "break_even_accept_length": be},
                {"profile": "a", "mode": "eagle3", "status": "ok",
                 "break_even_accept_length": 1.0}]  # fmt: skip
        results = {"trial": StageResult("done", None, {"rows": rows})} if done else {}
        return SimpleNamespace(
            results=results,
            data=lambda n: results[n].data,
            status_of=lambda n: results[n].status if n in results else None,
        )

    assert confirm.trial_wants_eagle3(ctx(2.0), 2.0) is True  # the leader b: close
    assert confirm.trial_wants_eagle3(ctx(2.68), 2.0) is False  # x0.75: loses clearly
    assert confirm.trial_wants_eagle3(ctx(None), 2.0) is False  # no EAGLE-3 figure
    assert confirm.trial_wants_eagle3(ctx(2.0, done=False), 2.0) is False  # not yet known
    assert confirm.trial_wants_eagle3(ctx(2.0), None) is False  # the plan counts it anyway


def test_recorded_stage_times_keep_the_newest(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    for v in range(7):
        j.record_time("preflight", float(v))
    assert j.times()["preflight"] == [2.0, 3.0, 4.0, 5.0, 6.0]
    p = plan.make_plan(_facts(times=j.times()))
    assert _stage(p, "preflight")["source"].startswith("recorded")
    assert _stage(p, "preflight")["estimate_s"] == pytest.approx(7 * 4.0)


# ------------------------------------------------------------------ decision


def _row(profile: str, tps: list[float]) -> dict[str, Any]:
    mean = sum(tps) / len(tps)
    return {"profile": profile, "mode": "baseline", "status": "ok", "samples": tps,
            "tokens_per_second_mean": mean, "ci95": [mean - 1, mean + 1]}  # fmt: skip


TRIAL = [
    {"profile": "a", "mode": "eagle3", "status": "ok", "break_even_accept_length": 2.5},
    {"profile": "b", "mode": "eagle3", "status": "ok", "break_even_accept_length": 2.0},
]


def test_eagle3_predicted_from_the_trial_break_even() -> None:
    conf = {"rows": [_row("a", [90, 91, 92]), _row("b", [70, 71, 72])], "accept_length": 2.2}
    opts = decide.options(conf, TRIAL)
    by = {(o["profile"], o["mode"]): o for o in opts}
    assert by[("a", "eagle3")]["tokens_per_second"] == pytest.approx(91 * 2.2 / 2.5)
    assert by[("b", "eagle3")]["tokens_per_second"] == pytest.approx(71 * 2.2 / 2.0)
    assert by[("b", "eagle3")]["evidence"] == "predicted"
    win = decide.choose(opts, (None, None))
    assert (win["profile"], win["mode"]) == ("a", "baseline")
    changes = decide.what_would_change(win, opts, 2.2)
    # EAGLE-3 on a wins above its own break-even; on b above 2.0 x 91/71
    assert any("on a would win at an accept length above 2.50" in c for c in changes)
    assert any(f"on b would win at an accept length above {2.0 * 91 / 71:.2f}" in c
               for c in changes)  # fmt: skip


def test_measured_eagle3_replaces_the_prediction_and_can_win() -> None:
    conf = {
        "rows": [_row("a", [60, 61, 62])],
        "accept_length": 3.0,
        "eagle3": dict(_row("a", [80, 81, 82]), mode="eagle3", accept_length_mean=3.0),
    }
    opts = decide.options(conf, TRIAL)
    assert [(o["mode"], o["evidence"]) for o in opts] == [
        ("eagle3", "measured"),
        ("baseline", "measured"),
    ]
    win = decide.choose(opts, ("a", "baseline"))
    assert win["mode"] == "eagle3"
    assert any("baseline of a would win below an accept length of 2.50" in c
               for c in decide.what_would_change(win, opts, 3.0))  # fmt: skip


def test_a_tie_keeps_what_serves_now_but_not_a_clear_loser() -> None:
    tied = [_row("a", [80.0, 81.5, 79.0]), _row("b", [80.5, 79.5, 80.2])]
    opts = decide.options({"rows": tied}, [])
    assert decide.choose(opts, ("b", "baseline"))["profile"] == "b"
    clear = [_row("a", [90.0, 90.5, 90.2]), _row("b", [80.5, 80.4, 80.2])]
    opts = decide.options({"rows": clear}, [])
    assert decide.choose(opts, ("b", "baseline"))["profile"] == "a"


def test_real_eagle3_load_only_when_it_could_change_the_mode() -> None:
    assert confirm.eagle3_needed(None, 2.5)[0] is True
    assert confirm.eagle3_needed(2.0, 2.68)[0] is False  # x0.75: loses clearly
    assert confirm.eagle3_needed(2.4, 2.5)[0] is True  # x0.96: close
    assert confirm.eagle3_needed(3.0, 2.5)[0] is True  # ahead: measure before applying
    assert confirm.eagle3_needed(2.0, None)[0] is False


def test_loads_are_counted_from_the_daemon_history() -> None:
    history = [
        {"kind": "start", "result": "ok", "weights": "real", "started_at": 5.0},  # before
        {"kind": "switch", "result": "ok", "weights": "dummy", "started_at": 11.0},
        {"kind": "switch", "result": "rolled_back", "weights": "dummy", "started_at": 12.0},
        {"kind": "switch", "result": "ok", "weights": "real", "started_at": 13.0,
         "weight_load": {"source": "disk", "seconds": 3.6}},
        {"kind": "switch", "result": "failed", "weights": "real", "started_at": 13.5},
        {"kind": "decision", "result": "applied", "started_at": 14.0},
        {"kind": "switch", "result": "ok", "weights": "real", "started_at": 15.0,
         "weight_load": {"source": "cache", "seconds": 0.05}},
        {"kind": "switch", "result": "rolled_back", "weights": "real", "started_at": 16.0,
         "weight_load": {"source": "cache", "seconds": 0.05}},
    ]  # fmt: skip
    loads = decide.count_loads(history, since=10.0)
    assert loads == {"real": 5, "cached": 3, "disk": 1, "dummy": 3}  # 13.5: no source
    assert plan.loads_text(loads) == "5 real (3 cached), 3 dummy"
    assert plan.loads_text({**loads, "cached": 0}) == "5 real, 3 dummy"


# ------------------------------------------------------------------ backends


def test_candidate_backend_reads_the_pcie_ipc_variable() -> None:
    assert candidate_backend(SimpleNamespace(env={"NCCL_ALGO": "Ring"})) == "nccl"
    on = SimpleNamespace(env={"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"})
    assert candidate_backend(on) == "pcie_ipc"
    off = SimpleNamespace(env={"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "0"})
    assert candidate_backend(off) == "nccl"


def _topo(name: str) -> Any:  # nvidia-smi topo -m outputs kept for the topology tests
    data = Path(__file__).resolve().parents[1] / "profiles" / "data"
    return topology.parse_topo_matrix((data / f"topo-8gpu-{name}.txt").read_text())


def _host(topo: Any, fi: tuple[bool, str]) -> AllreduceHost:
    return AllreduceHost(
        engine="sglang",
        view="test",
        host=topo.summary() if topo is not None else "unknown: nvidia-smi not available",
        has_nvlink=topo.has_nvlink if topo is not None else None,
        flashinfer_pcie_ipc=fi[0],
        flashinfer_why=fi[1],
    )


def test_possible_backends_from_topology() -> None:
    fi = (True, "importable")
    none = {b["backend"]: b for b in possible_backends(_host(None, fi), 8)}
    assert none["nccl"]["possible"] is True and none["pcie_ipc"]["possible"] is None
    pcie = {b["backend"]: b for b in possible_backends(_host(_topo("pcie"), fi), 8)}
    assert pcie["pcie_ipc"]["possible"] is True and pcie["custom"]["possible"] is False
    assert "more than two PCIe-only GPUs" in pcie["custom"]["why"]
    nvl = {b["backend"]: b for b in possible_backends(_host(_topo("nv18"), fi), 8)}
    assert nvl["custom"]["possible"] is True and "after SGLang's custom" in nvl["pcie_ipc"]["why"]
    # no FlashInfer with pcie_ipc_comm in the server's interpreter: not possible, and why
    missing = (False, "`from flashinfer.comm import PcieIpcAllReduceWorkspace` fails")
    gone = {b["backend"]: b for b in possible_backends(_host(_topo("pcie"), missing), 8)}
    assert gone["pcie_ipc"]["possible"] is False and "PcieIpcAllReduceWorkspace" in gone[
        "pcie_ipc"]["why"]  # fmt: skip
    six = {b["backend"]: b for b in possible_backends(_host(_topo("pcie"), fi), 6)}
    assert six["pcie_ipc"]["possible"] is False and "2/4/8 ranks" in six["pcie_ipc"]["why"]


def test_on_the_sim_the_backends_are_the_simulated_hosts() -> None:
    # the sim serves PCIe-IPC with its simulated FlashInfer on a PCIe-only host, whatever
    # this machine's interpreter or GPUs: its engine capabilities say so
    from fastverify.engines.sim_adapter import SimEngine

    argv = ["python", "-m", "fastverify.sim", "--model-path", "m", "--tp-size", "8"]
    host = SimEngine().allreduce_host(argv)
    sim = {b["backend"]: b for b in possible_backends(host, 8)}
    assert sim["pcie_ipc"]["possible"] is True and sim["custom"]["possible"] is False
    assert "simulated FlashInfer" in sim["pcie_ipc"]["why"]
    old = SimEngine().allreduce_host([*argv, "--sim-flashinfer", "no-pcie-ipc-comm"])
    gone = {b["backend"]: b for b in possible_backends(old, 8)}
    assert gone["pcie_ipc"]["possible"] is False and "no pcie_ipc_comm" in gone["pcie_ipc"]["why"]


def test_a_ranked_funnel_trials_only_the_best_few() -> None:
    p = plan.make_plan(_facts(ranked=True, finalists=2))
    assert (p["finalists"], p["trial_candidates"]) == (2, 2 + plan.RANKED_EXTRA)
    assert plan.make_plan(_facts(ranked=False, finalists=2))["trial_candidates"] == 7


def test_adaptive_predicted_from_the_stored_plan_at_the_tunes_concurrency() -> None:
    rows = [_row("a", [90, 91, 92]), _row("b", [70, 71, 72])]
    plan = {
        "profile": "a",
        "adaptive_config": "/state/adaptive-config.json",
        # speculation.plan.Plan.to_dict: decode speedups per planned batch size
        "tiers": {"1": {"steps": 3, "per_batch_size": {"1": {"speedup": 1.2}}},
                  "8": {"steps": 0, "per_batch_size": {"8": {"speedup": 0.98}}}},
    }  # fmt: skip
    (opt,) = decide.adaptive_options(rows, plan, 4)  # 4 running requests -> tier 1
    assert (opt["profile"], opt["mode"], opt["steps"]) == ("a", "adaptive", 3)
    assert opt["tokens_per_second"] == pytest.approx(91 * 1.2)
    assert opt["adaptive_config"] == "/state/adaptive-config.json"
    opts = sorted([*decide.options({"rows": rows}, []), opt],
                  key=lambda o: -o["tokens_per_second"])  # fmt: skip
    win = decide.choose(opts, (None, None))
    # a prediction is shown, never applied: the fastest measured option wins
    assert (win["profile"], win["mode"], win["evidence"]) == ("a", "baseline", "measured")
    (said,) = [c for c in decide.what_would_change(win, opts, None) if "predicted" in c]
    assert said.startswith("a/adaptive is predicted at 109.2 tok/s (predicted (plan)), x1.200")
    assert "not measured, so it is not applied" in said and "--mode adaptive" in said
    assert decide.adaptive_options(rows, plan, 8) == []  # tier 8 does not draft
    assert decide.adaptive_options(rows, {}, 1) == []  # no plan


def test_the_funnel_plot_counts_profiles_in_whole_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The funnel's count axis had ticks at 0.5 (matplotlib's default locator)."""
    pytest.importorskip("matplotlib", reason="matplotlib (the plot extra) is not installed")
    from matplotlib.figure import Figure

    from fastverify.experiments.tune import report

    ticks: dict[str, list[float]] = {}
    save = Figure.savefig

    def spy(self: Figure, fname: Any, *a: Any, **kw: Any) -> Any:
        ticks[Path(fname).name] = [float(t) for ax in self.axes for t in ax.get_xticks()]
        return save(self, fname, *a, **kw)

    monkeypatch.setattr(Figure, "savefig", spy)
    data = {"candidates": {"candidates": [{"name": "a"}, {"name": "b"}]}}
    drawn = report.draw_plots(tmp_path, {"decision": {"profile": "a"}}, data)
    assert drawn == {"files": {"funnel": "funnel.png"}, "skipped": None}
    assert ticks["funnel.png"] and all(t.is_integer() for t in ticks["funnel.png"]), ticks


# ------------------------------------------------------------------ preflight's verdicts


def _real_preflight(name: str) -> dict[str, Any]:
    import gzip

    path = Path(__file__).parents[2] / "fixtures" / "nccl-2.28.9-h200x2-2rank" / name
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def test_preflight_drops_the_profile_slower_at_every_decode_size_on_real_h200_figures() -> None:
    """2 x H200 over NVLink: Ring/Simple took 24-27 us per in-graph all-reduce against
    Ring/LL's 12-19 us at every decode size (the fixture's README), so ring-simple goes."""
    report = _real_preflight("preflight-report-nvlink.json.gz")
    table, survivors = gpu.preflight_verdicts(report)
    verdicts = {r["profile"]: r["verdict"] for r in table}
    assert verdicts.pop("ring-simple").startswith("dropped: >= x1.5")
    assert set(verdicts.values()) == {"kept"}
    assert sorted(survivors) == sorted(verdicts)
    assert survivors[0] == "nccl-default"  # the fastest first (ratio 1.0)


def test_preflight_keeps_every_passing_profile_when_speed_is_not_compared() -> None:
    """The gloo testing backend runs no NCCL: the profiles' timings differ by noise alone."""
    report = _real_preflight("preflight-report-nvlink.json.gz")
    report["profiles"][0] = {**report["profiles"][0], "status": "failed", "error": "boom"}
    failed = report["profiles"][0]["profile"]
    table, survivors = gpu.preflight_verdicts(report, compare_speed=False)
    verdicts = {r["profile"]: r["verdict"] for r in table}
    assert verdicts.pop(failed) == "dropped: failed (boom)"
    assert set(verdicts.values()) == {f"kept ({gpu.NOT_COMPARED})"}
    assert sorted(survivors) == sorted(verdicts)


def test_an_overrun_stage_says_so_instead_of_a_frozen_eta() -> None:
    from fastverify.cli.tune_cmd import Progress
    from fastverify.experiments.tune import plan

    p = {"stages": [{"name": "trial", "estimate_s": 60.0}, {"name": "confirm",
                                                            "estimate_s": 41.0}]}  # fmt: skip
    assert plan.overrun_s(p, "trial", 30.0) == 0.0
    assert plan.overrun_s(p, "trial", 95.0) == 35.0
    assert plan.remaining_s(p, "trial", 95.0) == 41.0  # what is left: the later stages only
    shown: list[str] = []
    progress = Progress()
    progress._note = shown.append  # type: ignore[method-assign]
    progress({"event": "stage", "name": "trial", "index": 6, "total": 8, "status": "started",
              "eta_s": 101.0, "over_s": 0.0})  # fmt: skip
    progress({"event": "stage", "name": "trial", "index": 6, "total": 8, "status": "done",
              "wall_s": 95.0, "eta_s": 41.0, "over_s": 35.0})  # fmt: skip
    assert shown[-1].endswith("ETA 0:41 after this stage (0:35 over its estimate)"), shown


def test_at_tp1_profiles_that_differ_only_in_collectives_are_one_candidate() -> None:
    """One GPU has no all-reduce: NCCL's variables, PCIe-IPC and custom-all-reduce=off leave
    the same server (one row, the serving profile where it is one of them); CUDA graphs off
    does not."""
    from fastverify.experiments.tune.candidates import candidate_row, collapse_tp1, tp1_text
    from fastverify.profiles.store import ProfileStore

    names = ["nccl-default", "ring-ll", "pcie-ipc", "p2p-off", "tree-ll-eager", "ring-simple"]
    profiles = {n: ProfileStore().load(n) for n in names}
    rows = [candidate_row(profiles[n], "shipped") for n in names]
    kept, groups = collapse_tp1(rows, profiles, serving="pcie-ipc")
    assert [r["name"] for r in kept] == ["pcie-ipc", "tree-ll-eager"]
    same = ["nccl-default", "ring-ll", "p2p-off", "ring-simple"]
    assert groups == [{"kept": "pcie-ipc", "same_as": same}]
    kept, _ = collapse_tp1(rows, profiles, serving=None)
    assert [r["name"] for r in kept] == ["nccl-default", "tree-ll-eager"]
    text = tp1_text({"groups": groups})
    assert text is not None and "cannot differ" in text
    assert "pcie-ipc stood for nccl-default, ring-ll, p2p-off, ring-simple" in text
    assert tp1_text(None) is None


def test_reuse_check_calls_slower_only_past_the_tie_of_a_zero_width_interval() -> None:
    from fastverify.experiments.tune.reuse import bench_check

    recorded = {"tokens_per_second": 98.0, "ci95": [98.0, 98.0]}  # two runs that agreed
    assert bench_check(recorded, {"tokens_per_second_mean": 96.0})["ok"]  # a 2% dip
    slow = bench_check(recorded, {"tokens_per_second_mean": 90.0, "ci95": [89.0, 91.0]})
    assert not slow["ok"] and "clearly slower" in slow["why"]
    wide = {"tokens_per_second": 98.0, "ci95": [80.0, 116.0]}
    assert bench_check(wide, {"tokens_per_second_mean": 85.0, "ci95": [84.0, 86.0]})["ok"]


@pytest.mark.parametrize(
    ("measured", "said"),
    [(2.0, "the same as the measurement below"), (2.31, "superseded by the measurement below")],
)
def test_an_accept_length_known_before_is_shown_beside_the_measured_one(
    measured: float, said: str
) -> None:
    """The command line's accept length and the confirmation's measurement each get their
    line, also where the measurement gives the same number (the sim forced at 2.0 measured
    exactly 2.0 and the command line's line was gone)."""
    from fastverify.experiments.tune import report

    conf = {"accept_length_before": 2.0,
            "accept_length_before_source": "command line (--accept-length)",
            "accept_length": measured,
            "accept_length_source": "measured with real weights (pcie-ipc)"}  # fmt: skip
    lines = report._accept_lengths(conf)
    assert (
        lines[0]
        == f"- 2.00: command line (--accept-length) (known before the confirmation; {said})"
    )
    assert (
        lines[1]
        == f"- {measured:.2f}: measured with real weights (pcie-ipc) (the decision uses it)"
    )
    assert report._accept_lengths(
        {**conf, "accept_length_before_source": conf["accept_length_source"], "accept_length": 2.0}
    ) == ["- 2.00: measured with real weights (pcie-ipc) (the decision uses it)"]
