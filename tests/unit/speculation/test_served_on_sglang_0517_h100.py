"""The serving model against what a real SGLang 0.5.17 served on an H100: the 8B shape with an
EAGLE-3 head of its shape, dummy weights, accept length forced by SGLang
(SGLANG_SIMULATE_ACC_LEN, match-expected); benchmarks/gpu/spec_sglang.py, 2026-12-07, in
tests/fixtures/sglang-0.5.17-h100-spec8b-served/.

The windows: the plan served in mode adaptive at c = 1..32 (128- and 1024-token prompts), the
same config with the engine forced to 2.0, and fixed EAGLE-3 at 1, 2 and 3 steps between the
plan's tier keys (c = 3, 6, 12, 24). The 128-token baseline is `spec costs`' own baseline
windows (its journal). The cost files were measured before `spec costs` took a batch prefill
point; the points were measured apart, in the call that served the windows.

With one prompt's prefill line alone the model over-predicts at many clients: SGLang's
prompts sent together reach the scheduler spread out and take several forwards (the
timelines: 256 first tokens in 28 forwards at c = 32). The measured batch point prices that,
and every window at the plan's keys is then within 5%.

The cost files predate the front end (speculation.front_end): it is read from SGLang's own
stamps of a later run on an H100 (tests/fixtures/sglang-0.5.17-h100-first-token/: 32 prompts
sent at once, and one alone). With it the totals stay within 5% and the first token at 32
clients comes to SGLang's: every prompt of a round no longer waits for one forward over all.

The same windows served again on a second H100 (another card, the same plan and costs:
tests/fixtures/sglang-0.5.17-h100-spec8b-replicate/, with its own baseline windows at every c
and both prompt lengths): one card's 6-s window is off the prediction by up to 9%, and the same
steps served 18% apart on the two cards; the mean of the two cards is within the goals.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from itertools import pairwise
from pathlib import Path

import pytest

from fastverify.experiments.engine_costs.run import handed_on_ms, server_view
from fastverify.speculation import costs as spec_costs
from fastverify.speculation import front_end, serving
from fastverify.speculation.acceptance import Acceptance

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang-0.5.17-h100-spec8b-served"
REP = FIX.parent / "sglang-0.5.17-h100-spec8b-replicate"
FIRST = FIX.parent / "sglang-0.5.17-h100-first-token"
KEYS = (1, 2, 4, 8, 16, 32)
BETWEEN_KEYS = (3, 6, 12, 24)
OUTPUT_LEN = 128
SEEDS = 3


def read(name: str, run: Path = FIX) -> dict:
    return json.loads((run / name).read_text())


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIRST / name).read_text().splitlines()]


def round_view() -> dict:
    """What SGLang's scheduler did with 32 prompts sent at once (`spec costs`' view)."""
    view = server_view(rows("timeline-baseline-c32-in128-round1.jsonl"))
    assert view is not None
    return view


def measured_front_end() -> front_end.FrontEnd:
    """The front end from SGLang's stamps: the round, and the prompts sent alone."""
    alone = handed_on_ms(rows("timeline-baseline-c1-in128.jsonl"))
    assert alone is not None
    fe = front_end.from_rounds([round_view()], alone, "first-token fixture")
    assert fe is not None
    return fe


def costs_at(n: int, tmp_path: Path, points: bool, front: bool = True) -> spec_costs.Costs:
    """The cost file of n-token prompts, with the prefill points of that length or alone,
    and the front end measured apart (or none)."""
    name = "spec-costs-8b.json" if n == 128 else f"spec-costs-8b-in{n}.json"
    data = read(name)
    if points:
        data = spec_costs.with_prefill_points(data, read(f"prefill-points-in{n}.json"))
    path = tmp_path / f"{n}-{points}-{name}"
    path.write_text(json.dumps(data))
    costs = spec_costs.from_file(path)
    return dataclasses.replace(costs, front_end=measured_front_end()) if front else costs


@pytest.fixture(scope="module")
def acceptance() -> Acceptance:
    hist = read("accept-histogram-forced-3.json")
    return Acceptance.from_requests([hist["histogram"]], int(hist["steps"]))


def baseline_windows() -> dict[int, tuple[float, float]]:
    """`spec costs`' baseline windows at 128 tokens: {clients: (tok/s, window s)}."""
    out = {}
    for line in (FIX / "spec-costs-8b.journal.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("record") == "window" and r["steps"] == "baseline" and r["status"] == "ok":
            out[int(r["batch_size"])] = (r["tokens_per_second"], r["window_s"])
    return out


def predicted(
    mode: str, c: int, n: int, costs: spec_costs.Costs, acc: Acceptance | None, window_s: float,
    config: dict | None = None, steps: int | None = None,
) -> float:  # fmt: skip
    """What a bench window of `window_s` measures by the serving model, over the seeds."""
    return serving.mean_tokens_per_second(serving.window_runs(
        mode, c, costs, serving.Workload(n, OUTPUT_LEN), acc, config=config, steps=steps,
        window_s=window_s, seeds=range(SEEDS)))  # fmt: skip


def served_over_predicted(
    tag: str, c: int, n: int, costs: spec_costs.Costs, acc: Acceptance | None, run: Path = FIX
) -> float:
    b = read(f"bench-{tag}-c{c}-in{n}.json", run)
    config = b["served_by"]["server"].get("adaptive_config")
    mode, steps = ("adaptive", None) if tag.startswith("adaptive") else ("eagle", b["accept_steps"])
    if tag == "baseline":
        mode, acc = "baseline", None
    pred = predicted(mode, c, n, costs, acc, float(b["config"]["duration"]), config, steps)
    return b["output_tokens_per_second"] / pred


def test_the_windows_ran_what_they_are_read_as() -> None:
    for c in KEYS:
        b = read(f"bench-adaptive3-c{c}-in128.json")
        assert b["accept_length"] == 3.0 and b["served_by"]["mode"] == "adaptive"
        assert b["served_by"]["env"]["SGLANG_SIMULATE_ACC_LEN"] == "3"
        assert read(f"bench-adaptive2-c{c}-in128.json")["accept_length"] == 2.0
    for k in (1, 2, 3):
        for c in BETWEEN_KEYS:
            assert read(f"bench-fixed{k}-c{c}-in128.json")["accept_steps"] == k


@pytest.mark.parametrize("n", [128, 1024])
def test_with_the_batch_point_every_key_window_is_predicted_within_5_percent(
    n: int, acceptance: Acceptance, tmp_path: Path
) -> None:
    costs = costs_at(n, tmp_path, points=True)
    ratios = {c: served_over_predicted("adaptive3", c, n, costs, acceptance) for c in KEYS}
    if n == 128:
        for c, (tok_s, window_s) in baseline_windows().items():
            ratios[("baseline", c)] = tok_s / predicted("baseline", c, n, costs, None, window_s)
    off = {c: round(r, 3) for c, r in ratios.items() if abs(r - 1) > 0.05}
    assert not off, off


def test_sglang_takes_a_round_in_from_an_even_hand_off_into_a_few_forwards() -> None:
    """Why the front end is read from the tokenizer manager's hand-offs: they come evenly
    spaced, where the scheduler's queue entries come in groups, one per forward (it reads
    its socket between forwards)."""
    view = round_view()
    handed, queued = view["dispatched_ms"], view["arrivals_ms"]
    assert len(handed) == len(queued) == 32
    assert max(b - a for a, b in pairwise(handed)) < 2.0
    assert max(b - a for a, b in pairwise(queued)) > 10.0
    assert 2 <= len(view["forwards"]) <= 4
    fe = measured_front_end()
    # the first hand-off came after most of the round's shared work: share > serial
    assert fe.share_s > 2 * fe.serial_s > 0


def test_with_the_front_end_the_first_token_at_32_clients_is_sglangs(
    acceptance: Acceptance, tmp_path: Path
) -> None:
    """Without it every prompt of a round waits for one forward over all of them (26% over
    SGLang's mean first token at 32 clients); with it they reach the scheduler and leave it
    over a few forwards, as SGLang's did."""
    b = read("bench-adaptive3-c32-in128.json")
    config = b["served_by"]["server"]["adaptive_config"]

    def first_token_ms(costs: spec_costs.Costs) -> float:
        window_s = float(b["config"]["duration"])
        runs = serving.window_runs("adaptive", 32, costs, serving.Workload(128, OUTPUT_LEN),
                                   acceptance, config=config, window_s=window_s,
                                   seeds=range(SEEDS))  # fmt: skip
        return statistics.mean(r.ttft_mean_s for r in runs) * 1e3

    served = b["ttft_ms"]["mean"]
    assert first_token_ms(costs_at(128, tmp_path, True, front=False)) / served > 1.2
    assert first_token_ms(costs_at(128, tmp_path, True)) / served == pytest.approx(1.0, abs=0.1)


def test_the_one_prompt_line_alone_over_predicts_many_clients(
    acceptance: Acceptance, tmp_path: Path
) -> None:
    alone = costs_at(128, tmp_path, points=False, front=False)
    base_tok_s, window_s = baseline_windows()[32]
    assert base_tok_s / predicted("baseline", 32, 128, alone, None, window_s) < 0.93
    assert served_over_predicted("adaptive3", 32, 128, alone, acceptance) < 0.9


def test_between_the_keys_the_prediction_does_not_over_promise(
    acceptance: Acceptance, tmp_path: Path
) -> None:
    """A batch between the measured sizes is priced at the row above it: a bound from below
    (what SGLang served is at most 6% under it, and up to 13% over). At most 4% under before
    the front end: its first tokens come earlier, and fixed 2 at 24 clients, whose first
    token the model now puts at SGLang's (121 ms against 120, 134 before), is 5.7% under
    (3.9% before); the same window served 4,044 tok/s on this card, 4,756 on the second."""
    costs = costs_at(128, tmp_path, points=True)
    for tag in ("adaptive3", "fixed1", "fixed2", "fixed3"):
        for c in BETWEEN_KEYS:
            r = served_over_predicted(tag, c, 128, costs, acceptance)
            assert 0.94 <= r <= 1.15, (tag, c, r)


def test_adaptive_holds_the_better_fixed_mode_between_the_keys() -> None:
    for c in BETWEEN_KEYS:
        best = max(read(f"bench-fixed{k}-c{c}-in128.json")["output_tokens_per_second"]
                   for k in (1, 2, 3))  # fmt: skip
        assert read(f"bench-adaptive3-c{c}-in128.json")["output_tokens_per_second"] >= 0.97 * best


def test_at_the_lower_acceptance_adaptive_stays_above_the_baseline() -> None:
    for c, (tok_s, _window_s) in baseline_windows().items():
        assert read(f"bench-adaptive2-c{c}-in128.json")["output_tokens_per_second"] >= 0.97 * tok_s


def test_prefill_points_of_another_prompt_length_are_refused() -> None:
    with pytest.raises(spec_costs.CostsError, match="at 1024-token prompts cannot price costs "
                       "measured at 128: measure them at 128"):  # fmt: skip
        spec_costs.with_prefill_points(
            read("spec-costs-8b.json"), read("prefill-points-in1024.json")
        )


def tok_s(tag: str, c: int, run: Path, n: int = 128) -> float:
    return read(f"bench-{tag}-c{c}-in{n}.json", run)["output_tokens_per_second"]


@pytest.mark.parametrize("n", [128, 1024])
def test_one_card_is_off_by_up_to_9_percent_and_the_two_cards_mean_within_5(
    n: int, acceptance: Acceptance, tmp_path: Path
) -> None:
    """Both cards were planned from the costs of a third (the morning's): a card's own speed
    and one window's luck (how the prompts fell into prefill forwards) move a window by more
    than the goal; the mean of the two cards' windows is within it."""
    costs = costs_at(n, tmp_path, points=True)
    runs: dict[object, list[float]] = {}
    for c in KEYS:
        runs[c] = [served_over_predicted("adaptive3", c, n, costs, acceptance, run)
                   for run in (FIX, REP)]  # fmt: skip
        base = [served_over_predicted("baseline", c, n, costs, acceptance, REP)]
        if n == 128:  # the first card served no baseline of its own: spec costs' windows
            tok, window_s = baseline_windows()[c]
            base.append(tok / predicted("baseline", c, n, costs, None, window_s))
        runs[("baseline", c)] = base
    alone = [r for rs in runs.values() for r in rs]
    assert max(abs(r - 1) for r in alone) <= 0.09
    if n == 128:
        assert max(abs(r - 1) for r in alone) > 0.05
    off = {c: rs for c, rs in runs.items() if abs(sum(rs) / len(rs) - 1) > 0.05}
    assert not off, off


def test_between_the_keys_adaptive_and_fixed_two_run_the_same_steps_and_pool_above_97() -> None:
    """Between the keys (c = 3..24) the plan's config drafts 2 steps, as fixed2 does: what
    one window tells apart there is noise (fixed2 at c = 24 served 18% apart on the two
    cards). Pooled over both cards, adaptive holds the better fixed mode."""
    config = read("bench-adaptive3-c3-in128.json", REP)["served_by"]["server"]["adaptive_config"]
    keys = sorted(int(k) for k in config)
    for c in BETWEEN_KEYS:
        tier = max(k for k in keys if k <= c)
        assert config[str(tier)]["candidate_steps"] == [2]
    assert tok_s("fixed2", 24, REP) / tok_s("fixed2", 24, FIX) > 1.15
    for c in BETWEEN_KEYS:
        ada = (tok_s("adaptive3", c, FIX) + tok_s("adaptive3", c, REP)) / 2
        fixed = [(tok_s(f"fixed{k}", c, FIX) + tok_s(f"fixed{k}", c, REP)) / 2 for k in (1, 2)]
        best = max(*fixed, tok_s("fixed3", c, FIX))  # fixed 3 was served on the first card
        assert ada >= 0.97 * best, (c, ada, best)


def test_at_the_lower_acceptance_adaptive_stays_above_the_same_cards_baseline() -> None:
    for c in KEYS:
        assert tok_s("adaptive2", c, REP) >= 0.97 * tok_s("baseline", c, REP)


@pytest.mark.parametrize("run", [FIX, REP], ids=["first-card", "second-card"])
def test_at_1024_tokens_the_first_token_and_inter_token_times_are_sglangs(
    run: Path, acceptance: Acceptance, tmp_path: Path
) -> None:
    """Where the prefill is a large part of the time (1024-token prompts), the model's mean
    first-token and inter-token times are SGLang's within 7% and 5% at c = 4-32, on both
    cards. (At 128 tokens only the totals are: at c = 32 SGLang gives the first token ~21%
    sooner than the model, which releases a round's first tokens at the end of one forward
    priced at the batch point, where SGLang releases them over 3-4 forwards.)"""
    costs = costs_at(1024, tmp_path, points=True)
    for tag in ("adaptive3", "baseline"):
        for c in (4, 8, 16, 32):
            path = run / f"bench-{tag}-c{c}-in1024.json"
            if not path.exists():  # the first card served no 1024-token baseline
                continue
            b = json.loads(path.read_text())
            mode = "baseline" if tag == "baseline" else "adaptive"
            runs = serving.window_runs(
                mode, c, costs, serving.Workload(1024, OUTPUT_LEN),
                None if mode == "baseline" else acceptance,
                config=b["served_by"]["server"].get("adaptive_config"),
                window_s=float(b["config"]["duration"]), seeds=range(SEEDS))  # fmt: skip
            ttft = sum(r.ttft_mean_s for r in runs) / len(runs) * 1e3
            itl = sum(r.itl_mean_s for r in runs) / len(runs) * 1e3
            assert ttft == pytest.approx(b["ttft_ms"]["mean"], rel=0.07), (tag, c)
            assert itl == pytest.approx(b["itl_ms"]["mean"], rel=0.05), (tag, c)
