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


def _two_point_costs(tmp_path: Path) -> spec_costs.Costs:
    """The run's cost file with the second prefill point spec costs now measures itself
    (this run's came from a bench at one client and 1024-token prompts)."""
    data = json.loads((FIX / "spec-costs-8b.json").read_text())
    short = json.loads((FIX / "bench-baseline-c1-in128.json").read_text())["ttft_ms"]["p50"]
    long = json.loads((FIX / "bench-baseline-c1-in1024.json").read_text())["ttft_ms"]["p50"]
    data["prefill_ms"]["baseline"] = {"128": short, "1024": long}
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(data))
    return spec_costs.from_file(path)


def test_a_prefill_forward_holds_the_engine_less_than_a_first_token_takes(tmp_path: Path) -> None:
    costs = _two_point_costs(tmp_path)
    latency = costs.prefill_latency("baseline")
    assert 0.004 < latency < 0.012  # 8.6 ms of the 17 ms first token hold no forward
    assert costs.prefill_forward("baseline", 8192) < 0.2  # not 8192/128 x a first token
    assert costs.prefill_latency("eagle") == 0.0  # one point: nothing to tell apart


def test_the_serving_model_predicts_what_sglang_served_at_every_concurrency(
    real, tmp_path: Path
) -> None:
    acc, one_point = real
    two_point = _two_point_costs(tmp_path)
    off = {}
    for name, costs in (("one point", one_point), ("two points", two_point)):
        served = {}
        for c in (1, 2, 4, 8, 16, 32):
            pred = serving.serve("baseline", c, costs, serving.Workload(128, 128), acc)
            got = json.loads((FIX / f"bench-baseline-c{c}-in128.json").read_text())
            served[c] = got["output_tokens_per_second"] / pred.tokens_per_second
        off[name] = max(abs(r - 1) for r in served.values())
    # every prompt charged as a 17 ms forward of its own: 1.67x off at 32 clients
    assert off["one point"] > 0.3
    assert off["two points"] < 0.08, off
