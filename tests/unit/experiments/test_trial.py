"""Trial mode pieces on hand-built data: the reference accept length, trial rows, timing,
the config key, the argv flag, the sim's reading of it, and what a sweep posts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastverify import config as configmod
from fastverify.client import Calls
from fastverify.config import ServerConfig
from fastverify.engines.sglang import load_format_of, server_args
from fastverify.experiments.sweep import config, results, trial
from fastverify.experiments.sweep import run as sweep
from fastverify.sim import cli_args


def _m(profile: str, mode: str, tps: float, per_req: float, accept: float | None = None,
       weights: str = "dummy") -> dict[str, Any]:  # fmt: skip
    return {"type": "measurement", "profile": profile, "mode": mode, "tokens_per_second": tps,
            "per_request_tokens_per_second": per_req, "accept_length": accept,
            "weights": weights}  # fmt: skip


def test_reference_accept_length_sources() -> None:
    recorded = {
        "a": {"per_request_tokens_per_second": 80.0, "measured_at": 10.0},
        "b": {"accept_length": 2.3, "measured_at": 5.0},
        "c": {"accept_length": 1.9, "measured_at": 20.0},
    }
    assert trial.reference_accept_length(2.0, recorded, "b") == (
        2.0, "command line (--accept-length)")  # fmt: skip
    value, source = trial.reference_accept_length(None, recorded, "b")
    assert value == 2.3 and "(b)" in source
    value, source = trial.reference_accept_length(None, recorded, "a")  # a has none: newest
    assert value == 1.9 and "c, newest" in source
    assert trial.reference_accept_length(None, {"a": recorded["a"]}, "a") == (None, "none")


def test_trial_rows_judge_break_even_by_the_real_accept_length_only() -> None:
    # baseline 82 tok/s per request; EAGLE-3 on dummy weights: accept 1.0 at 33.3 tok/s per
    # request = a 30 ms cycle; break-even 0.030 x 82 = 2.46 (the field's figure)
    records = [
        {"type": "sweep"},
        _m("p", "baseline", 81.0, 82.0), _m("p", "baseline", 83.0, 82.0),
        _m("p", "eagle3", 33.0, 1000.0 / 30.0, 1.0), _m("p", "eagle3", 34.0, 1000.0 / 30.0, 1.0),
    ]  # fmt: skip
    rows = results.summarize(records)
    traces = {("p", "eagle3"): {"span": "TARGET_VERIFY", "allreduce_per_step": 122}}
    out = trial.annotate(rows, traces, lambda p: (2.0, "command line"), {})
    base, eagle = out
    assert base["weights"] == eagle["weights"] == "dummy" and base["trial"] is True
    assert base["decode_step_ms"] == pytest.approx(1000.0 / 82.0)
    assert "accept_length_mean" not in eagle and "real_speedup" not in eagle
    assert eagle["dummy_accept_length"] == 1.0
    assert eagle["spec_cycle_ms"] == pytest.approx(30.0)
    assert eagle["break_even_accept_length"] == pytest.approx(2.46)
    assert eagle["predicted_per_request_tokens_per_second"] == pytest.approx(2.0 / 0.030)
    assert eagle["eagle3_verdict"] == "loses x0.81"
    assert eagle["trace"]["allreduce_per_step"] == 122
    # a better drafter would win: the verdict follows the reference, not the dummy run
    rows = results.summarize(records)
    eagle = trial.annotate(rows, {}, lambda p: (3.0, "recorded"), {})[1]
    assert eagle["eagle3_verdict"] == "wins x1.22"


def test_trial_break_even_falls_back_to_a_recorded_baseline() -> None:
    records = [_m("p", "eagle3", 33.0, 1000.0 / 30.0, 1.0)]
    eagle = trial.annotate(results.summarize(records), {}, lambda p: (None, "none"),
                           {"p": {"per_request_tokens_per_second": 90.0}})[0]  # fmt: skip
    assert eagle["break_even_accept_length"] == pytest.approx(2.7)
    assert eagle["baseline_source"] == "recorded baseline"
    assert "eagle3_verdict" not in eagle  # no real accept length: no verdict


def test_timing_sums_loads_and_measurements_per_weights() -> None:
    records = [
        {"type": "switch", "weights": "dummy", "seconds": 1.0},
        {"type": "switch", "weights": "dummy", "seconds": 2.0},
        {"type": "switch", "weights": "real", "seconds": 10.0},
        {"type": "switch", "seconds": 12.0},  # no label: written before trials, real
        dict(_m("p", "baseline", 80.0, 80.0), wall_s=3.0),
        dict(_m("p", "baseline", 80.0, 80.0, weights="real"), wall_s=4.0),
        {"type": "trace", "weights": "dummy", "wall_s": 0.5},
    ]
    t = trial.timing(records)
    assert t["trial"]["loads"] == 2 and t["trial"]["load_s"] == 3.0
    assert t["trial"]["total_s"] == 3.0 + 3.0 + 0.5
    assert t["real"]["load_s_mean"] == 11.0 and t["real"]["total_s"] == 26.0
    assert t["trial"]["same_loads_with_real_weights_s"] == 22.0
    assert t["trial"]["load_s_saved"] == 19.0


def test_config_load_format(tmp_path: Path) -> None:
    f = tmp_path / "fastverifyd.toml"
    f.write_text('[server]\nload_format = "dummy"\n')
    assert configmod.load(f).server.load_format == "dummy"
    f.write_text('[server]\nload_format = "random"\n')
    with pytest.raises(configmod.ConfigError) as exc:
        configmod.load(f)
    assert f'{f}:2: server.load_format: "random" is not allowed' in str(exc.value)
    assert "dummy" in str(exc.value) and "safetensors" in str(exc.value)
    assert configmod.weights_label("dummy") == "dummy"
    assert configmod.weights_label("safetensors") == configmod.weights_label(None) == "real"


def test_argv_flag_only_when_not_auto() -> None:
    s = ServerConfig(model_path="/m", draft_model_path="/d", extra_args=("--x", "1"))
    assert "--load-format" not in server_args(s, "baseline", {}, "new", "/m")
    argv = server_args(
        ServerConfig(model_path="/m", load_format="dummy", extra_args=("--x", "1")),
        "baseline", {}, "new", "/m",
    )  # fmt: skip
    assert argv[-4:] == ["--load-format", "dummy", "--x", "1"]  # extra_args still last
    assert load_format_of(["python", "-m", "sglang.launch_server", *argv]) == "dummy"
    assert load_format_of(["x", "--load-format=pt"]) == "pt"
    assert load_format_of(["x", "--model-path", "/m"]) == "auto"


def test_sim_reads_load_format_like_sglang() -> None:
    base = ["--model-path", "m", "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", "d"]  # fmt: skip
    assert cli_args.parse(base).accept_length is None  # the model's default (2.0)
    dummy = cli_args.parse([*base, "--load-format", "dummy"])
    assert dummy.load_format == "dummy" and dummy.accept_length == 1.0  # random drafter
    assert cli_args.parse([*base, "--load-format", "dummy", "--sim-accept-length", "1.5"]
                          ).accept_length == 1.5  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        cli_args.parse([*base, "--load-format", "random"])
    assert exc.value.code == 2


def test_sweep_config_trial_validation(tmp_path: Path) -> None:
    ok = config.SweepConfig(profiles=("a",), output_dir=tmp_path, load_format="dummy",
                           then_confirm=2, accept_length=2.0)  # fmt: skip
    ok.validate()
    assert ok.trial
    bad = [
        ({"then_confirm": 1}, "--then-confirm follows a trial"),
        ({"load_format": "dummy", "accept_length": 0.5}, "bonus token"),
        ({"load_format": "random"}, "--load-format 'random'"),
    ]
    for kw, msg in bad:
        with pytest.raises(ValueError, match=msg):
            config.SweepConfig(profiles=("a",), output_dir=tmp_path, **kw).validate()


class _Client(Calls):
    """The daemon's side of the typed calls: what was POSTed, by path (the field checks of
    fastverify.api_models run before it)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        assert method == "POST", (method, path)
        self.posts.append((path, body))
        return {}


def test_only_real_weights_become_recorded_baselines(tmp_path: Path) -> None:
    client = _Client()
    sw = sweep.Sweep(client, config.SweepConfig(profiles=("a",), output_dir=tmp_path))
    rows = [
        {"profile": "a", "mode": "baseline", "status": "ok", "weights": "dummy",
         "tokens_per_second_mean": 80.0, "per_request_tokens_per_second_mean": 81.0},
        {"profile": "b", "mode": "baseline", "status": "ok", "weights": "real",
         "tokens_per_second_mean": 70.0, "per_request_tokens_per_second_mean": 71.0},
        {"profile": "b", "mode": "eagle3", "status": "ok", "weights": "real",
         "tokens_per_second_mean": 60.0, "accept_length_mean": 2.1},
        {"profile": "a", "mode": "eagle3", "status": "ok", "weights": "dummy",
         "tokens_per_second_mean": 30.0, "accept_length_mean": 1.0},
    ]  # fmt: skip
    assert sw._post_baselines(rows) == ["b"]
    ((path, body),) = client.posts
    assert path == "/v1/baselines" and body["profile"] == "b"
    assert body["accept_length"] == 2.1  # the real EAGLE-3 accept length goes with it


def test_step_time_from_inter_token_latency_when_no_request_completed() -> None:
    # a slow trial server finished no request in a short window: ITL still times each step
    rows = [
        {"profile": "p", "mode": "baseline", "status": "ok", "tokens_per_second_mean": 46.0,
         "per_request_tokens_per_second_mean": None, "itl_p50_ms_mean": 20.0},
        {"profile": "p", "mode": "eagle3", "status": "ok", "tokens_per_second_mean": 32.0,
         "per_request_tokens_per_second_mean": None, "itl_p50_ms_mean": 30.0,
         "accept_length_mean": 1.0},
    ]  # fmt: skip
    base, eagle = trial.annotate(rows, {}, lambda p: (2.0, "command line"), {})
    assert base["decode_step_ms"] == pytest.approx(20.0)
    assert eagle["spec_cycle_ms"] == pytest.approx(30.0)
    assert eagle["break_even_accept_length"] == pytest.approx(0.030 * 50.0)


def test_a_speculative_row_without_a_finished_request_reads_the_mean_itl() -> None:
    # 1 step, a 30 ms cycle, 46% of cycles stream 1 token and 54% stream 2: the token median
    # ITL is 15 ms, the mean 30 / 1.54 ms; the cycle is the accept length x the mean
    rows = [{"profile": "p", "mode": "eagle3", "status": "ok", "tokens_per_second_mean": 50.0,
             "per_request_tokens_per_second_mean": None, "itl_p50_ms_mean": 15.0,
             "itl_mean_ms_mean": 30.0 / 1.54, "accept_length_mean": 1.54}]  # fmt: skip
    (eagle,) = trial.annotate(rows, {}, lambda p: (2.0, "command line"), {})
    assert eagle["spec_cycle_ms"] == pytest.approx(30.0)
