"""The plan on real SGLang 0.5.17 output: `spec costs` measured on an H100 (a Llama-3.1-8B-shaped
model with an EAGLE-3 head of its shape, dummy weights) and the accepted-drafts histogram SGLang
reported while forced to an accept length of 3.0 (SGLANG_SIMULATE_ACC_LEN=3,
SGLANG_SIMULATE_ACC_METHOD=match-expected), from tests/fixtures/sglang-0.5.17-h100-spec8b/
(benchmarks/gpu/spec_sglang.py made them).

On that engine the steps-0 pass costs 1.17x (batch 1) to 1.70x (batch 32) a baseline decode
step, so a tier held at [0] is no safe harbour: each tier must take the drafting config that
pays whenever one stays above the floor at the lower acceptance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastverify.speculation import costs as spec_costs
from fastverify.speculation import design, serving
from fastverify.speculation import plan as spec_plan
from fastverify.speculation.acceptance import Acceptance

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang-0.5.17-h100-spec8b"


@pytest.fixture(scope="module")
def real() -> tuple[Acceptance, spec_costs.Costs]:
    bench = json.loads((FIX / "bench-fixed3-c6-in128.json").read_text())
    hist = bench["accept_histogram"]
    assert bench["accept_length"] == 3.0 and sum(hist) > 1000  # SGLang held the forced length
    return Acceptance.from_requests([hist], 3), spec_costs.from_file(FIX / "spec-costs-8b.json")


def test_the_real_costs_make_the_steps0_pass_dearer_than_a_decode_step(real) -> None:
    _acc, costs = real
    for b in costs.batch_sizes:
        row = costs.priced(b)
        assert costs.cycle(row, 0) > costs.decode(row)


def test_every_tier_drafts_what_pays_on_the_real_engine(real) -> None:
    acc, costs = real
    p = spec_plan.make_plan(acc, costs, workload=serving.Workload(128, 128), concurrencies=[1])
    d = p.to_dict()
    f_low = d["lower_acceptance"]["factor"]
    cands = design.candidates(acc, f_low)
    for tier in d["tiers"].values():
        for b, row in tier["per_batch_size"].items():
            best = row["best_fixed_steps"]
            # a fixed step count exists that stays above the floor at the lower acceptance
            # (1.09x at batch 32): the plan must draft, and near the best fixed speedup
            assert tier["config"]["candidate_steps"] != [0], (b, tier)
            assert row["speedup"] >= 0.97 * best["speedup"], (b, row)
            assert row["speedup_if_lower"] >= p.floor, (b, row)
    ch = design.choose(32, cands, acc, costs, f_low, floor=p.floor, min_gain=p.min_gain,
                       output_len=128)  # fmt: skip
    assert ch.candidate.drafts and not any("[3]}" in r and "flaps" in r for r in ch.rejected)
