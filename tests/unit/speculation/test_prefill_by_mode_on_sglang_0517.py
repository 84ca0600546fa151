"""Each mode's own first-token time, on real SGLang 0.5.17 output (H100, the 8B shape, dummy
weights, accept length forced to 3.0; benchmarks/gpu/spec_sglang.py, 2026-12-07, in
tests/fixtures/sglang-0.5.17-h100-spec8b-k2/): `spec costs` at 128-token prompts, then fixed
EAGLE-3 and the plan served in mode adaptive at c = 3, 6, 12, 24.

The fixed windows were asked for at 3 steps but served at 2: that call's first start served
the cost run's resumed trial (2 steps) and the next step inherited it (fixed since). SGLang's
server info says so (bench's `accept_steps`), so they are read as what they are. The plan
serves [2] at every one of those batch sizes, so both modes decode at 2 steps and their
decode rates agree (357.8 and 357.5 tok/s per request at c = 3); what differs is the first
token: 32.7 ms (fixed) against 49.5 ms (adaptive) mean at c = 3, as the cost run's batch-1
windows had it (fixed 1..3 steps 20.7-29.0 ms, the adaptive steps-0 server 32.5).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastverify.speculation import costs as spec_costs
from fastverify.speculation import serving
from fastverify.speculation.acceptance import Acceptance

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang-0.5.17-h100-spec8b-k2"
BETWEEN_KEYS = (3, 6, 12, 24)


def bench(mode: str, c: int) -> dict:
    return json.loads((FIX / f"bench-{mode}-c{c}-in128.json").read_text())


@pytest.fixture(scope="module")
def real() -> tuple[Acceptance, spec_costs.Costs, dict]:
    hist = json.loads((FIX / "accept-histogram-forced-3.json").read_text())
    config = json.loads((FIX / "plan.json").read_text())["128"]["adaptive_config_json"]
    acc = Acceptance.from_requests([hist["histogram"]], int(hist["steps"]))
    return acc, spec_costs.from_file(FIX / "spec-costs-8b.json"), config


def served_over_predicted(
    costs: spec_costs.Costs, acc: Acceptance, mode: str, tag: str, config: dict, steps: int
) -> dict[int, float]:
    out = {}
    for c in BETWEEN_KEYS:
        b = bench(tag, c)
        runs = serving.window_runs(mode, c, costs, serving.Workload(128, 128), acc,
                                   config=config, steps=steps, seeds=range(3),
                                   window_s=float(b["config"]["duration"]))  # fmt: skip
        pred = serving.mean_tokens_per_second(runs)
        out[c] = b["output_tokens_per_second"] / pred
    return out


def test_the_fixed_windows_ran_at_the_steps_their_server_reported() -> None:
    for c in BETWEEN_KEYS:
        assert bench("fixed3", c)["accept_steps"] == 2
        assert bench("adaptive3", c)["accept_steps"] == 3  # adaptive launches at its most


def test_the_adaptive_server_takes_longer_to_a_first_token_than_fixed_eagle(real) -> None:
    _acc, costs, _config = real
    # the cost file predates the split: its "eagle" line was the steps-0 (adaptive) server's
    assert costs.prefill("adaptive", 128) == pytest.approx(0.0325041)
    assert costs.prefill("eagle", 128) == pytest.approx(0.0212804)  # the 1..3-step median
    assert costs.prefill_forward("adaptive", 128) > costs.prefill_forward("eagle", 128) + 0.01
    served_fixed = bench("fixed3", 3)["ttft_ms"]["mean"]
    served_adaptive = bench("adaptive3", 3)["ttft_ms"]["mean"]
    assert served_adaptive > served_fixed + 10  # 49.5 ms against 32.7 at c = 3


def test_each_mode_is_predicted_within_5_percent_with_its_own_first_token(
    real, tmp_path: Path
) -> None:
    acc, costs, config = real
    fixed = served_over_predicted(costs, acc, "eagle", "fixed3", config, 2)
    adaptive = served_over_predicted(costs, acc, "adaptive", "adaptive3", config, 3)
    assert all(abs(r - 1) <= 0.05 for r in [*fixed.values(), *adaptive.values()]), (
        fixed,
        adaptive,
    )
    # one speculative first token for both (the steps-0 server's, as before): fixed EAGLE-3
    # at 3 clients is served 1.07x that prediction
    data = json.loads((FIX / "spec-costs-8b.json").read_text())
    data["prefill_ms"] = {"baseline": data["prefill_ms"]["baseline"],
                          "adaptive": data["prefill_ms"]["eagle"]}  # fmt: skip
    one = tmp_path / "one-speculative-prefill.json"
    one.write_text(json.dumps(data))
    before = served_over_predicted(spec_costs.from_file(one), acc, "eagle", "fixed3", config, 2)
    assert before[3] > 1.05, before
