"""SGLang's forced acceptance as fastverify reads it (fastverify.sglang.forced): the variable
and its methods from each release's facts, the label, and the draws (SGLang's
`_sample_simulated_acc_len`, whose behaviour the contract suite checks against the wheel)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from fastverify.sglang import forced
from fastverify.sglang.facts import resolve


def test_the_variable_and_its_default_method_are_the_releases() -> None:
    got = forced.of({"SGLANG_SIMULATE_ACC_LEN": "3"}, resolve("0.5.17"))
    assert got is not None and got.label == "forced (SGLANG_SIMULATE_ACC_LEN=3)"
    assert (got.length, got.method, got.token_mode) == (3.0, "match-expected", "fixed")
    # 0.5.3 sampled around L by default; 0.5.1 read the name without SGLANG_
    assert forced.of({"SGLANG_SIMULATE_ACC_LEN": "2.5"}, resolve("0.5.3.post3")).method == (  # type: ignore[union-attr]
        "multinomial"
    )
    assert forced.of({"SGLANG_SIMULATE_ACC_LEN": "2.5"}, resolve("0.5.1.post3")) is None
    old = forced.of({"SIMULATE_ACC_LEN": "2.5"}, resolve("0.5.1.post3"))
    assert old is not None and old.label == "forced (SIMULATE_ACC_LEN=2.5)"


def test_off_unless_above_zero_and_bad_values_named_with_what_sglang_accepts() -> None:
    facts = resolve("0.5.17")
    assert forced.of({}, facts) is None
    assert forced.of({"SGLANG_SIMULATE_ACC_LEN": "-1"}, facts) is None  # SGLang's default
    assert forced.of({"SGLANG_SIMULATE_ACC_LEN": "0"}, facts) is None
    with pytest.raises(forced.ForcedError, match="not a number") as exc:
        forced.of({"SGLANG_SIMULATE_ACC_LEN": "three"}, facts)
    assert exc.value.field == "length"
    env = {"SGLANG_SIMULATE_ACC_LEN": "3", "SGLANG_SIMULATE_ACC_METHOD": "exact"}
    with pytest.raises(forced.ForcedError, match="'match-expected' or 'multinomial'") as exc:
        forced.of(env, facts)
    assert exc.value.field == "method"
    assert forced.label_of(env, facts) == forced.MEASURED
    assert forced.label(None) == "measured" and forced.label_of_record(None) == "measured"


def _draws(method: str, length: float, max_len: int, n: int = 20000) -> list[int]:
    f = forced.Forced("SGLANG_SIMULATE_ACC_LEN", length, method)
    rng = random.Random(7)
    return [forced.sample(f, max_len, rng) for _ in range(n)]


def test_match_expected_draws_floor_or_ceiling_with_the_mean_asked() -> None:
    got = _draws("match-expected", 2.3, 4)
    assert set(got) == {2, 3}
    assert sum(got) / len(got) == pytest.approx(2.3, abs=0.02)
    assert set(_draws("match-expected", 5.0, 3, 50)) == {3}  # clamped to steps + 1
    assert set(_draws("match-expected", 0.5, 4, 50)) == {1}  # at least the bonus token
    assert set(_draws("match-expected", 2.7, 1, 50)) == {1}  # the steps-0 pass


def test_multinomial_draws_round_a_normal_and_its_mean_is_expected_length() -> None:
    f = forced.Forced("SGLANG_SIMULATE_ACC_LEN", 2.0, "multinomial")
    got = _draws("multinomial", 2.0, 4)
    assert set(got) <= {1, 2, 3, 4} and {1, 3} <= set(got)
    assert sum(got) / len(got) == pytest.approx(forced.expected_length(f, 4), abs=0.03)
    with pytest.raises(ValueError, match="Invalid simulate_acc_method: exact"):
        forced.sample(forced.Forced("X", 2.0, "exact"), 4, random.Random(0))


def test_an_acceptance_record_under_forced_acceptance_is_labelled_and_kept_for_allow_forced(
    tmp_path: object,
) -> None:
    from fastverify.daemon import acceptance
    from fastverify.daemon.statestore import StateStore

    store = StateStore(tmp_path)  # type: ignore[arg-type]
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "m",
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d",
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--load-format", "dummy"]  # fmt: skip
    f = forced.Forced("SGLANG_SIMULATE_ACC_LEN", 2.0, "match-expected").to_dict()
    body = {"histogram": [0, 10, 0, 0], "requests": [[0, 5], [0, 5]]}
    for handle_forced in (f, None):
        h = SimpleNamespace(serving=True, profile="ring-ll", mode="eagle3", argv=argv)
        rec = acceptance.record(store, h, body, handle_forced)
        assert rec["usable"] is False
        if handle_forced:  # dummy weights do not matter: SGLang set the length
            assert rec["usable_forced"] is True and rec["forced"] == f
            assert rec["acceptance_source"] == "forced (SGLANG_SIMULATE_ACC_LEN=2)"
            assert "--allow-forced" in rec["why_not_usable"]
        else:
            assert rec["usable_forced"] is False and rec["acceptance_source"] == "measured"
            assert rec["why_not_usable"].startswith("dummy weights")


def test_the_exporter_says_where_acceptance_comes_from_and_not_as_a_profile_setting() -> None:
    from fastverify.exporters.hub import MetricsHub
    from tests.support.hub import Clock, scrape, value

    hub = MetricsHub(clock=Clock())
    label = "forced (SGLANG_SIMULATE_ACC_LEN=2)"
    hub.set_engine(True, "ring-ll", "eagle3", {"NCCL_ALGO": "Ring", "weights": "dummy",
                   forced.SETTINGS_KEY: label}, "sglang", "http://x")  # fmt: skip
    s = scrape(hub)
    src = "fastverify_spec_acceptance_source_info"
    assert value(s, src, profile="ring-ll", mode="eagle3", source=label) == 1.0
    info = [k for k in s if k[0] == "fastverify_profile_info"]
    assert info and all(forced.SETTINGS_KEY not in dict(k[1]) for k in info)
    hub.set_engine(True, "ring-ll", "baseline", {"weights": "real"}, "sglang", "http://x")
    assert not [k for k in scrape(hub) if k[0] == src]
