"""The accept curve from histograms, the sim's chain, the plan and the adaptive config it
writes (fastverify.speculation)."""

from __future__ import annotations

import json
import random

import pytest

from fastverify.engines.sim.costtable import engine_costs as sim_costs
from fastverify.sglang import adaptive
from fastverify.sglang.adaptive_slot import AdaptiveController
from fastverify.speculation import costs as spec_costs
from fastverify.speculation import plan as spec_plan
from fastverify.speculation.curve import (
    AcceptCurve,
    add_histograms,
    chain_draws,
    chain_histogram,
    chain_length,
    chain_probability,
)


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


def test_bad_histograms_are_refused_with_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="at least one verify pass"):
        AcceptCurve.from_histogram([0, 0])
    with pytest.raises(ValueError, match="above its step count 2"):
        AcceptCurve.from_histogram([1, 1, 1, 1], steps=2)


@pytest.mark.parametrize("length,steps", [(2.0, 3), (1.3, 3), (3.5, 3), (2.46, 4), (5.0, 7)])
def test_chain_keeps_the_accept_length_at_its_steps(length: float, steps: int) -> None:
    p = chain_probability(length, steps)
    assert chain_length(p, steps) == pytest.approx(length, abs=1e-9)
    # the expected histogram's curve is the chain's L(k) at every k
    c = AcceptCurve.from_histogram(chain_histogram(length, steps, 1_000_000), steps)
    for k in range(1, steps + 1):
        assert c.length(k) == pytest.approx(chain_length(p, k), rel=1e-4)


def test_draws_follow_the_chain() -> None:
    p = chain_probability(2.0, 3)
    rng = random.Random(1)
    hist = [0] * 4
    for _ in range(200_000):
        hist[chain_draws(p, 3, rng.random())] += 1
    c = AcceptCurve.from_histogram(hist)
    assert c.length(3) == pytest.approx(2.0, rel=0.01)
    assert c.length(1) == pytest.approx(1 + p, rel=0.01)
    assert chain_draws(0.0, 3, 0.1) == 0 and chain_draws(1.0, 3, 0.99) == 3


def _costs(rows: dict[int, dict[int, float]]) -> spec_costs.Costs:
    return spec_costs.Costs(rows, "test table")


def test_plan_picks_the_fastest_step_count_per_tier_and_says_what_would_change() -> None:
    # bs 1: a cycle at 3 steps costs 2x a decode step; bs 32: 3x
    costs = _costs({1: {0: 10e-3, 1: 15e-3, 3: 20e-3}, 32: {0: 40e-3, 1: 80e-3, 3: 120e-3}})
    curve = AcceptCurve.from_histogram(chain_histogram(2.8, 3, 10_000))
    p = spec_plan.make_plan(curve, costs, [1, 32])
    t1, t32 = p.tiers[1], p.tiers[32]
    assert t1.steps == 3 and t1.speedup == pytest.approx(curve.length(3) / 2.0)
    assert t1.ci[0] < t1.speedup < t1.ci[1]
    assert t1.break_even[3] == pytest.approx(2.0)
    assert "falls below 2.10 (break-even 2.00 + 5% margin" in t1.change
    assert t32.steps == 0 and t32.speedup == 1.0 and t32.ci == (1.0, 1.0)
    assert "pays at batch 32 once the accept length" in t32.change
    assert "batch size 1" in p.why
    out = p.to_dict()
    assert out["tiers"]["1"]["steps"] == 3 and out["tiers"]["32"]["steps"] == 0
    assert out["launch_steps"] == 3


def test_config_drops_to_zero_at_this_hosts_break_even(tmp_path) -> None:
    costs = _costs({1: {0: 10e-3, 3: 25e-3}, 8: {0: 20e-3, 3: 70e-3}})
    curve = AcceptCurve.from_histogram(chain_histogram(3.0, 3, 10_000))
    p = spec_plan.make_plan(curve, costs, [1, 8])
    path = spec_plan.write_adaptive_config(p, tmp_path / "cfg.json")
    cfg = json.loads(path.read_text())
    assert cfg == {
        "1": {"candidate_steps": [0, 3], "up_hysteresis": 0.0, "down_hysteresis": 1.0},
        "8": {"candidate_steps": [0]},
    }
    assert adaptive.load_config(path) == cfg
    # SGLang's controller on it: stays at 3 while 2 drafts are accepted (> 1.5 = break-even
    # 2.5 - 1), leaves 3 once 1 is (it then probes 3 again every update_interval passes)
    for drafts, at_three in ((2, 1.0), (1, 0.5)):
        ctl = AdaptiveController(3, cfg)
        seq = []
        for _ in range(400):
            ctl.observe([drafts], 1)
            seq.append(ctl.steps_for(1))
        share = seq[100:].count(3) / 300
        assert share == at_three if at_three == 1.0 else share <= at_three
        assert ctl.steps_for(8) == 0


def test_sim_costs_come_from_the_engines_cost_model() -> None:
    from fastverify.engines.sim import costmodel

    env = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
    c = sim_costs(env, tp_size=8, batch_sizes=[1, 4], max_steps=3)
    assert c.cycle(1, 0) == costmodel.predict(env, "baseline", 8, 1, True).cycle_seconds
    assert (
        c.cycle(4, 3)
        == costmodel.predict(
            env, "eagle3", 8, 4, True, 2.0, num_steps=3, num_draft_tokens=4
        ).cycle_seconds
    )
    assert "SIMULATION" in c.source


def test_rehearse_grid_is_a_cost_source(tmp_path) -> None:
    grid = {
        "kind": "rehearse-grid", "model": "kimi-k2.5", "shard_of_tp": 8, "ranks_run": 1,
        "gpu": "NVIDIA H200", "batch_sizes": [1], "tokens_per_seq": [1, 2, 4],
        "forward_ms": {"1": {"1": 10.0, "2": 11.0, "4": 14.0}},
        "verify_decode_ratio": {"1": {"1": 1.0, "2": 1.1, "4": 1.4}},
        "allreduce": {"source": "preflight", "per_forward_ms": {"1": {"1": 2.0, "4": 3.0}}},
        "sources": {}, "command": "fastverifyctl rehearse --grid",
    }  # fmt: skip
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid))
    c = spec_costs.from_rehearse_grid(path)
    assert c.cycle(1, 0) == pytest.approx(12e-3) and c.cycle(1, 3) == pytest.approx(17e-3)
    assert c.cycle(1, 1) == pytest.approx(11e-3)
    assert "preflight" in c.source and "drafter not measured" in c.source
    grid["allreduce"]["by_backend"] = {
        "pcie_ipc": {"source": "published pcie_ipc", "per_forward_ms": {"1": {"1": 0.5, "4": 1.0}}}
    }
    path.write_text(json.dumps(grid))
    ipc = spec_costs.from_rehearse_grid(path, "pcie_ipc")
    assert ipc.cycle(1, 0) == pytest.approx(10.5e-3) and "published pcie_ipc" in ipc.source
    with pytest.raises(spec_costs.CostsError, match="the grid has: pcie_ipc"):
        spec_costs.from_rehearse_grid(path, "custom")
    path.write_text(json.dumps({**grid, "kind": "other"}))
    with pytest.raises(spec_costs.CostsError, match="not a rehearse grid"):
        spec_costs.from_rehearse_grid(path)
    path.write_text("{")
    with pytest.raises(spec_costs.CostsError, match="line 1: not JSON"):
        spec_costs.from_rehearse_grid(path)


SIZES = [1, 2, 4, 8, 16, 32, 64]


def _sim_plan(
    env: dict[str, str], length: float, min_gain: float = spec_plan.DEFAULT_MIN_GAIN
) -> dict[int, spec_plan.Tier]:
    """The plan `spec plan` makes on a TP 8 sim of `env` from the chain's histogram at
    3 steps (100,000 verify passes: the sampling error is negligible)."""
    costs = sim_costs(env, tp_size=8, batch_sizes=SIZES, max_steps=3)
    curve = AcceptCurve.from_histogram(chain_histogram(length, 3, 100_000), 3)
    return spec_plan.make_plan(curve, costs, SIZES, min_gain).tiers


def test_field_acceptance_on_ring_ll_drafts_at_no_tier() -> None:
    """Issue #29: at the field's acceptance (2.0 at 3 steps) on ring-ll, speculation does not
    pay at any batch size: 0 steps at every tier (the verify pass of 32-64 requests moves
    1.8-3.5 MiB per all-reduce, priced on SGLang's published NCCL curve). Closest is 1 step
    at batch 1 (L(1) 1.54 against its break-even 1.50), a gain under the 5% margin."""
    from tests import field

    tiers = _sim_plan(dict(field.RING_LL), 2.0)
    assert {bs: t.steps for bs, t in tiers.items()} == {bs: 0 for bs in SIZES}
    closest = tiers[1].closest
    assert closest is not None and closest["steps"] == 1
    assert 1.0 < closest["speedup"] < 1.0 + spec_plan.DEFAULT_MIN_GAIN
    assert "not clear of the 5% margin (--min-gain)" in tiers[1].change
    # 3 steps, what the field ran, loses at every batch size
    for bs, t in tiers.items():
        if 3 in t.break_even:
            assert t.break_even[3] > 2.0, bs


def test_the_margin_decides_a_near_tie_and_only_a_near_tie() -> None:
    """Without a margin the field's batch 1 drafts 1 step for its ~3%; a gain well above the
    margin (accept length 3.0) drafts with or without it."""
    from tests import field

    bare = _sim_plan(dict(field.RING_LL), 2.0, min_gain=0.0)
    assert bare[1].steps == 1 and 1.0 < bare[1].ci[0] < bare[1].speedup < 1.05
    assert all(bare[bs].steps == 0 for bs in SIZES[1:])
    for margin in (0.0, 0.05):
        better = _sim_plan(dict(field.RING_LL), 3.0, min_gain=margin)
        assert better[1].steps > 0 and better[1].ci[0] > 1.0 + margin


def test_a_better_drafter_pays_at_batch_1_and_never_at_the_largest_tier() -> None:
    """Issue #29's other outcome (benchmarks/results/spec-search-tp8.json lists every such
    profile and acceptance): on ring-ll at accept length 3.0, drafting pays at batch 1 and 0
    steps win from 4 requests up, 32 and 64 included."""
    from tests import field

    tiers = _sim_plan(dict(field.RING_LL), 3.0)
    assert tiers[1].steps > 0 and tiers[1].speedup > 1.1
    assert all(tiers[bs].steps == 0 for bs in (4, 8, 16, 32, 64))


def test_a_gain_inside_the_measurements_interval_is_no_reason_to_draft() -> None:
    """The field's acceptance on ring-ll at batch 1, no margin: 1 step is ahead by ~3% (L(1)
    1.54 against its break-even 1.50). Measured from 100,000 verify passes the interval
    excludes 1 and the plan drafts; from 200 passes the same curve's interval spans 1, and
    the plan says 0 steps with what would change it."""
    from tests import field

    costs = sim_costs(dict(field.RING_LL), tp_size=8, batch_sizes=[1], max_steps=3)
    many = AcceptCurve.from_histogram(chain_histogram(2.0, 3, 100_000), 3)
    few = AcceptCurve.from_histogram(chain_histogram(2.0, 3, 200), 3)
    sure = spec_plan.plan_tier(many, costs, 1, min_gain=0.0)
    assert sure.steps == 1 and sure.ci[0] > 1.0
    unsure = spec_plan.plan_tier(few, costs, 1, min_gain=0.0)
    assert abs(few.length(1) - many.length(1)) < 0.02  # the same acceptance, fewer passes
    assert unsure.steps == 0 and unsure.ci == (1.0, 1.0)
    assert "1 step pays at batch 1 once" in unsure.change
