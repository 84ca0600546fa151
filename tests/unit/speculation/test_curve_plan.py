"""The accept curve, the plan's acceptance and costs, and the configs it writes: what SGLang's
controller does with them (fastverify.speculation)."""

from __future__ import annotations

import json
import random

import pytest

from fastverify.sglang import adaptive
from fastverify.speculation import costs as spec_costs
from fastverify.speculation import design, replay
from fastverify.speculation import plan as spec_plan
from fastverify.speculation.acceptance import Acceptance, Draws
from fastverify.speculation.curve import AcceptCurve, add_histograms
from tests.support import field
from tests.unit.speculation.synth import acceptance, sim_costs


def test_histograms_of_different_lengths_add_entry_by_entry() -> None:
    assert add_histograms([[3, 1], [0, 2, 5], []]) == [3, 3, 5]


def test_curve_is_the_chain_formula() -> None:
    # 10 passes at 3 steps: 4 accepted 0, 3 accepted 1, 2 accepted 2, 1 accepted 3
    c = AcceptCurve.from_histogram([4, 3, 2, 1])
    assert c.length(0) == 1.0
    assert c.length(1) == pytest.approx(1 + (3 + 2 + 1) / 10)
    assert c.length(2) == pytest.approx(1 + (3 + 2 * 2 + 2 * 1) / 10)
    assert c.length(3) == pytest.approx(1 + (3 + 4 + 3) / 10)
    assert c.curve() == {"1": 1.6, "2": 1.9, "3": 2.0}
    with pytest.raises(ValueError, match=r"covers steps 0\.\.3"):
        c.length(4)
    with pytest.raises(ValueError, match="at least one verify pass"):
        AcceptCurve.from_histogram([0, 0])
    with pytest.raises(ValueError, match="above its step count 2"):
        AcceptCurve.from_histogram([1, 1, 1, 1], steps=2)


def test_a_lower_acceptance_keeps_each_draft_position_with_probability_f() -> None:
    acc = Acceptance.from_requests([[4, 3, 2, 1], [1, 1, 1, 7]], 3)
    f = 0.6
    # the closed form against draws: min(j, G), P(G >= i) = f^i
    rng = random.Random(3)
    draws = [Draws(h, f) for h in acc.requests]
    got = [min(draws[i % 2].next(rng), 3) for i in range(200_000)]
    assert 1 + sum(got) / len(got) == pytest.approx(acc.length(3, f), rel=0.01)
    assert acc.length(3, 1.0) == acc.pooled.length(3)
    target = acc.length(3, 0.5)
    assert acc.factor_for(target) == pytest.approx(0.5, abs=1e-6)
    assert acc.factor_for(9.0) == 1.0


def test_the_cluster_bootstrap_covers_where_passes_as_independent_draws_do_not() -> None:
    """Per-request acceptance varies (the sim's drafter with a spread): the true pooled
    accept length is inside the cluster bootstrap's 95% interval in ~95% of 100 recordings
    of 40 requests of 256 tokens; an interval that treats their ~4,000 passes as independent
    is several times too narrow and covers far fewer."""
    from fastverify.sim.drafter import Drafter

    truth = Drafter.solve(2.5, 3, 0.2).pooled_length(3)
    cover = naive = 0
    for seed in range(100):
        acc = acceptance(2.5, requests=40, spread=0.2, seed=seed)
        lo, hi = acc.interval(3, draws=200, seed=seed)
        cover += lo <= truth <= hi
        h = acc.pooled.histogram
        n = sum(h)
        mu = acc.length(3) - 1
        sd = (sum(c * (j - mu) ** 2 for j, c in enumerate(h)) / n / n) ** 0.5
        naive += abs(acc.length(3) - truth) <= 1.96 * sd
    assert cover >= 88, cover
    assert naive < 60, naive


def test_costs_never_invent_a_row() -> None:
    rows = {"1": {"0": 0.011, "1": 0.02}, "8": {"0": 0.05, "1": 0.1}}
    costs = spec_costs.from_table(rows, {"1": 0.01, "8": 0.048}, "t", cuda_graph_bs=(1, 2, 4, 8))
    assert costs.batch_sizes == [1, 8]
    assert costs.priced(3) == 8  # padded to 4, run at the smallest measured row above it
    assert costs.priced(9) is None  # beyond every row: no price, never the row below
    assert spec_plan.unpriced_sizes(costs, 8) == [2, 4]
    with pytest.raises(spec_costs.CostsError, match="has no steps-0 pass"):
        spec_costs.from_table({"1": {"1": 0.02}}, {"1": 0.01}, "t")


def test_the_sims_costs_price_steps_0_as_sglang_runs_it() -> None:
    from fastverify.sim import costmodel

    costs = sim_costs(dict(field.RING_LL))
    # the steps-0 pass verifies at one draft token and extends the drafter: over a baseline
    # server's decode, the drafter's extend (+1.5-2.5%, the H200 grid: +1.4-2.6%) and what
    # SGLang's verify path adds over a decode (0.45 ms + 0.13 ms per request, SGLang
    # 0.5.17): +4.0-6.9% on the field's 12.2 ms decode
    for bs in (1, 2, 8, 32):
        assert 1.04 < costs.cycle(bs, 0) / costs.decode(bs) < 1.07, bs
        overhead = costs.zero_skip[bs] - costs.decode(bs)
        assert overhead == pytest.approx(costmodel.verify_overhead_seconds(bs), rel=1e-3), bs
        assert 0.01 < 1 - costs.zero_skip[bs] / costs.cycle(bs, 0) < 0.03, bs  # the extend
    # between capture sizes a batch pads up: 9 runs 10's graph (EAGLE) or 12's (baseline)
    assert costs.priced(9) == 10 and 9 not in costs.batch_sizes
    assert costs.decode(10) > costs.cycle(10, 0)  # the baseline pads 10 to 12
    assert max(costs.batch_sizes) == 256 and costs.cuda_graph_bs[-1] == 32


def test_a_0_k_tier_below_its_threshold_alternates_and_never_rests_at_0() -> None:
    """SGLang's controller at 0 steps freezes its EMA and probes k: with acceptance below
    the plan's, a [0, 3] tier runs about half its passes at 3 steps."""
    costs = sim_costs(dict(field.RING_LL))
    acc = acceptance(2.0)
    cfg = {"1": {"candidate_steps": [0, 3], "down_hysteresis": 1.0}}  # drop below 1.5 drafts
    r = replay.replay(cfg, 1, costs, acc, passes=600)
    assert 0.4 < r.passes[0] / sum(r.passes.values()) < 0.6
    assert r.switches > 100
    never = replay.replay({"1": {"candidate_steps": [0]}}, 1, costs, acc, passes=200)
    assert never.passes == {0: 200} and never.switches == 0


def test_a_stepping_down_tier_holds_k_and_rests_lower_when_acceptance_falls() -> None:
    costs = sim_costs(dict(field.RING_LL))
    acc = acceptance(3.0)
    f_low = acc.factor_for(2.0)
    cands = design.candidates(acc, f_low)
    ch = design.choose(1, cands, acc, costs, f_low)
    steps = ch.candidate.entry["candidate_steps"]
    assert ch.candidate.drafts and 0 not in steps, ch.candidate.entry
    assert max(ch.shares, key=ch.shares.get) == max(steps)  # holds k at the recorded one
    assert max(ch.shares_low, key=ch.shares_low.get) == min(steps)  # rests at c when lower
    assert ch.speedup > 1.15 and ch.speedup_low >= design.DEFAULT_FLOOR


def test_the_plan_puts_tier_keys_where_the_config_changes_and_writes_sglangs_file(
    tmp_path,
) -> None:
    costs = sim_costs(dict(field.RING_LL))
    acc = acceptance(3.0)
    p = spec_plan.make_plan(acc, costs, max_batch=16, concurrencies=(1, 3),
                            f_low=acc.factor_for(2.0))  # fmt: skip
    keys = [t.key for t in p.tiers]
    assert keys[0] == 1 and keys == sorted(keys)
    for a, b in zip(p.tiers, p.tiers[1:], strict=False):
        assert a.entry != b.entry  # a key only where the config changes
    assert sum(len(t.sizes) for t in p.tiers) == len([b for b in costs.batch_sizes if b <= 16])
    path = spec_plan.write_adaptive_config(p, tmp_path / "cfg.json")
    cfg = json.loads(path.read_text())
    assert adaptive.load_config(path) == cfg == p.adaptive_config()
    out = p.to_dict()
    assert out["drafts"] and out["launch_steps"] == max(adaptive.candidate_steps(cfg))
    pred = out["predictions"]["1"]
    lo, hi = pred["adaptive_ci"]
    assert lo <= pred["adaptive"]["tokens_per_second"] <= hi
    assert pred["gain"]["ratio"] > 1.0 and pred["gain"]["decode_saves"] > 0
    assert pred["if_lower"]["accept_length"] == pytest.approx(2.0, abs=0.01)
    speed = spec_plan.predicted_speedup(out, 3)
    assert speed is not None and speed["from"] == "end-to-end prediction"


def test_at_the_fields_acceptance_the_plan_drafts_nowhere_and_says_serve_baseline() -> None:
    costs = sim_costs(dict(field.RING_LL))
    p = spec_plan.make_plan(acceptance(1.6), costs, max_batch=8, concurrencies=(1,))
    assert not p.drafts and all(t.entry == {"candidate_steps": [0]} for t in p.tiers)
    assert "serve mode baseline" in p.why


def test_the_plan_reports_memory_and_a_config_that_does_not_fit_says_so() -> None:
    from fastverify.speculation.memory import Memory

    costs = sim_costs(dict(field.RING_LL))
    p = spec_plan.make_plan(acceptance(3.0), costs, max_batch=8, concurrencies=())
    m = p.memory
    assert m is not None and m["fits"] and m["draft_weights_gb"] == 1.1
    assert m["max_running_requests"] == 256  # the pool holds more; max running caps it
    # graphs only for the captured sizes whose tier can reach each step count
    cfg = p.adaptive_config()
    assert set(m["graphs_gb_by_steps"]) == {str(k) for k in adaptive.candidate_steps(cfg)}
    tight = Memory(
        64.2,
        1.1,
        4.5,
        2048,
        graph_gb=0.3,
        free_gb=0.1,
        steps=3,
        max_running=256,
        graph_by_steps={0: 0.2, 1: 0.3, 2: 0.4, 3: 0.5},
        estimated=False,
    )
    out = tight.check({"1": {"candidate_steps": [1, 2]}, "8": {"candidate_steps": [0]}},
                      [1, 2, 4, 8], 384)  # fmt: skip
    assert not out["fits"] and out["room_for_graphs_gb"] == pytest.approx(0.4)
    assert out["max_running_requests"] == 5  # 2048 KV tokens / 384 per request
    # step 0 is reached only from batch 8's tier: 8 of the 15 captured rows
    assert out["graphs_gb_by_steps"]["0"] == pytest.approx(0.2 * 8 / 15, abs=1e-4)


def test_skipping_the_steps_0_extend_is_priced_where_the_config_never_drafts() -> None:
    costs = sim_costs(dict(field.RING_LL))
    p = spec_plan.make_plan(acceptance(3.0), costs, max_batch=16, concurrencies=())
    skip = p.skip_extend()
    assert skip is not None and skip["variable"] == "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"
    zero = {str(c.batch) for t in p.tiers if t.steps == 0 for c in t.choices}
    assert set(skip["saves"]) == zero and all(0.01 < v < 0.03 for v in skip["saves"].values())
    assert skip["recommended"] and "cold recovery" in skip["why"]
    # a plan that drafts nowhere says serve baseline instead
    assert spec_plan.make_plan(acceptance(1.4), costs, max_batch=4,
                               concurrencies=()).skip_extend() is None  # fmt: skip


def test_a_plan_that_drafts_nowhere_never_offers_mode_adaptive(capsys) -> None:
    from fastverify.cli import spec_cmd

    p = spec_plan.make_plan(acceptance(1.4), sim_costs(dict(field.RING_LL)), max_batch=4,
                            concurrencies=(1,))  # fmt: skip
    p.adaptive_config_path = "/state/adaptive-config.json"
    data = p.to_dict()
    data["for"] = {"profile": "ring-ll", "costs_from": "engine sim serving ring-ll/eagle3"}
    data["acceptance"] = {"model": "m", "drafter": "d", "topk": 1, "steps": 3, "verifies": 9,
                          "dataset": {"name": "fastverify-docs"}, "synthetic": False,
                          "sampling": {"temperature": 0.0}}  # fmt: skip
    spec_cmd._print(data)
    out = capsys.readouterr().out
    assert "plan for profile ring-ll" in out and "never drafts" in out
    assert "mode set baseline" in out and "mode set adaptive)" not in out


def test_the_plan_takes_the_newest_record_of_the_serving_model_drafter_and_topk() -> None:
    from fastverify.cli.spec_cmd import pick_record

    def rec(t: float, **kw: object) -> dict:
        base = {"model": "m", "drafter": "d", "topk": 1, "steps": 3, "usable": True,
                "synthetic": False, "measured_at": t}  # fmt: skip
        return {**base, **kw}

    serving = {"model": "m", "drafter": "d", "topk": 1, "steps": 3}
    records = {"a": rec(1.0), "b": rec(3.0, drafter="other"), "c": rec(2.0),
               "d": rec(4.0, synthetic=True), "e": rec(5.0, usable=False)}  # fmt: skip
    got, *_ = pick_record(records, serving, allow_synthetic=False)
    assert got is records["c"]  # the newest of this drafter; not the synthetic one
    got, *_ = pick_record(records, serving, allow_synthetic=True)
    assert got is records["c"]  # prompts beat random ids even when older
    got, why, _ = pick_record({"b": records["b"]}, serving, allow_synthetic=False)
    assert got is None and "drafter other" in why and "serving model m, drafter d" in why
    got, why, _ = pick_record({"d": records["d"]}, serving, allow_synthetic=False)
    assert got is None and "--allow-synthetic" in why
    assert pick_record({"d": records["d"]}, serving, allow_synthetic=True)[0] is records["d"]


def test_forced_acceptance_is_planned_with_only_when_allowed() -> None:
    """A record SGLang forced (SGLANG_SIMULATE_ACC_LEN) is never picked silently: without
    --allow-forced it is refused with the flag to pass, even beside a usable synthetic one;
    with it the newest record, forced or measured, wins (forced prompts are random ids)."""
    from fastverify.cli.spec_cmd import pick_record

    forced = {"label": "forced (SGLANG_SIMULATE_ACC_LEN=3)", "accept_length": 3.0,
              "method": "match-expected"}  # fmt: skip
    base = {"model": "m", "drafter": "d", "topk": 1, "steps": 3}
    f = {**base, "usable": False, "usable_forced": True, "forced": forced, "synthetic": True,
         "acceptance_source": forced["label"], "measured_at": 5.0}  # fmt: skip
    real = {**base, "usable": True, "synthetic": False, "measured_at": 1.0}
    got, why, reason = pick_record({"f": f}, base, allow_synthetic=True)
    assert got is None and reason == "forced_not_allowed"
    assert "--allow-forced" in why and "SGLANG_SIMULATE_ACC_LEN=3" in why
    assert pick_record({"f": f, "r": real}, base, allow_synthetic=False)[0] is real
    assert pick_record({"f": f, "r": real}, base, False, allow_forced=True)[0] is f
    assert pick_record({"f": f}, base, False, allow_forced=True)[0] is f
    dummy = {**f, "usable_forced": False}  # forced, but adaptive: no chain to plan with
    assert pick_record({"x": dummy}, base, False, allow_forced=True)[0] is None
