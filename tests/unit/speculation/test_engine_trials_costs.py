"""Cost files of `spec costs` (kind "engine-trials"): read by `from_file` beside rehearse
grids, every cost with its source; bad files refused saying which field and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastverify.config import ServerConfig
from fastverify.engines.sglang import launch_args
from fastverify.speculation import costs as spec_costs


def _trials(tmp_path: Path, **over: object) -> Path:
    data = {
        "kind": "engine-trials",
        "source": "engine trials on dummy weights: model m, profile ring-ll, all-reduce nccl",
        "baseline_ms": {"1": 19.6, "8": 49.0},
        "cycle_ms": {"1": {"0": 20.0, "1": 30.0, "2": 40.0}, "8": {"0": 50.0, "1": 90.0}},
        "verify_ms": {"1": {"1": 25.0}},
        "prefill_ms": {"baseline": {"128": 700.0}, "eagle": {"128": 712.0}},
        "command": "fastverifyctl spec costs --max-steps 2",
        **over,
    }
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(data))
    return path


def test_engine_trials_read_with_their_source(tmp_path: Path) -> None:
    c = spec_costs.from_file(_trials(tmp_path))
    assert c.source == "costs.json: engine trials on dummy weights: model m, profile ring-ll, " \
        "all-reduce nccl"  # fmt: skip
    assert c.cycle(1, 2) == pytest.approx(0.040) and c.steps(8) == [0, 1]
    assert c.decode(1) == pytest.approx(0.0196) and c.zero_step_measured
    assert c.notes["verify_ms"] == {"1": {"1": 25.0}}
    assert c.to_dict()["cycle_ms"]["8"] == {"0": 50.0, "1": 90.0}
    # one measured prompt length per mode, scaled with the prompt elsewhere
    assert c.prefill("eagle", 128) == pytest.approx(0.712)
    assert c.prefill("baseline", 256) == pytest.approx(1.4)
    assert c.spread == spec_costs.GPU_SPREAD


def test_a_file_from_before_the_steps_0_trial_says_its_steps_0_is_a_decode(
    tmp_path: Path,
) -> None:
    c = spec_costs.from_file(_trials(tmp_path, baseline_ms=None))
    assert not c.zero_step_measured and c.decode(1) == c.cycle(1, 0)
    assert "leaves out" not in c.source and "draft extend" in c.notes["zero_step"]


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"kind": "other"}, "\"kind\" is 'other'"),
        ({"source": ""}, 'field "source" must say where'),
        ({"cycle_ms": {}}, 'field "cycle_ms"'),
        ({"cycle_ms": {"1": {"0": "x"}}}, 'field "cycle_ms"'),
        ({"cycle_ms": {"1": {"1": 30.0}}}, "has no steps-0 pass (steps 0)"),
        ({"cycle_ms": {"1": {"0": 0.0}}}, "non-positive cost"),
        ({"prefill_batch_ms": {"baseline": {"1024": 90.0}}}, '"prefill_batch_prompt"'),
        (
            {"prefill_batch_ms": {"baseline": {"x": 90.0}}, "prefill_batch_prompt": 128},
            "prefill_batch_ms[baseline]",
        ),
    ],
)
def test_bad_engine_trials_are_refused(tmp_path: Path, over: dict, said: str) -> None:
    with pytest.raises(spec_costs.CostsError) as err:
        spec_costs.from_file(_trials(tmp_path, **over))
    assert said in str(err.value) and "costs.json" in str(err.value)


def test_a_backend_table_is_a_grid_s_only(tmp_path: Path) -> None:
    with pytest.raises(spec_costs.CostsError, match="measured one backend"):
        spec_costs.from_file(_trials(tmp_path, allreduce_backend="nccl"), "pcie_ipc")


def test_not_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{\n"kind":\n')
    with pytest.raises(spec_costs.CostsError, match=r"c.json: line 3: not JSON"):
        spec_costs.from_file(path)


def test_steps_override_shapes_the_trial_as_adaptive_runs_k_steps() -> None:
    server = ServerConfig(draft_model_path="d", steps_override=2)
    spec = launch_args(server, "eagle3", {}, "m").speculative
    assert spec is not None
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (2, 1, 3)
    assert launch_args(server, "baseline", {}, "m").speculative is None
    plain = launch_args(ServerConfig(draft_model_path="d"), "eagle3", {}, "m").speculative
    assert plain is not None and plain.num_steps == 3


def test_the_steps_0_trial_launches_adaptive_at_0_steps(tmp_path: Path) -> None:
    """spec costs' steps-0 trial: adaptive with candidates [0], launched at 0 steps (SGLang
    takes a launch step among the candidates and sets num_draft_tokens = 1); any other
    all-[0] config is still refused as one that never drafts."""
    from fastverify.engines.base import EngineArgError

    cfg = tmp_path / "zero.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [0]}}))
    trial = ServerConfig(draft_model_path="d", steps_override=0, adaptive_config=str(cfg))
    spec = launch_args(trial, "adaptive", {}, "m").speculative
    assert spec is not None and (spec.num_steps, spec.num_draft_tokens) == (0, 1)
    with pytest.raises(EngineArgError, match="drafts at no batch size"):
        launch_args(ServerConfig(draft_model_path="d", adaptive_config=str(cfg)), "adaptive",
                    {}, "m")  # fmt: skip


def test_the_costs_table_shows_the_baseline_decode_beside_the_steps_0_pass(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`spec costs` prints a baseline server's decode step beside SGLang's steps-0 pass (they
    differ: the pass is a verify at one draft token plus the draft extend); a file from
    before the steps-0 trial (no baseline_ms) prints its 0 column as the decode."""
    from fastverify.cli.spec_costs_cmd import _print_costs

    report = {"steps": [0, 1], "baseline_ms": {"1": 12.44, "2": 19.11},
              "cycle_ms": {"1": {"0": 12.48, "1": 18.09}, "2": {"0": 18.35, "1": 32.24}},
              "verify_ms": {"1": {"1": 17.82}}, "source": "s", "restored": {}}  # fmt: skip
    _print_costs(report, None)
    lines = capsys.readouterr().out.splitlines()
    head = next(x for x in lines if x.startswith("batch"))
    assert head.split("\t") == ["batch", "baseline", "0 steps", "1 step"]
    assert "1\t12.44\t12.48\t18.09 (17.82)" in lines
    assert not any(x.startswith("front end") for x in lines)
    old = {k: v for k, v in report.items() if k != "baseline_ms"}
    _print_costs({**old, "front_end_ms": {"share_ms": 1.748, "serial_ms": 0.372}}, None)
    lines = capsys.readouterr().out.splitlines()
    head = next(x for x in lines if x.startswith("batch"))
    assert head.split("\t") == ["batch", "decode", "1 step"]
    assert any(x.startswith("front end: 1.75 ms a request shared, then 0.37 ms apart")
               for x in lines), lines  # fmt: skip


def test_a_forward_over_many_prompts_is_priced_from_the_batch_point(tmp_path: Path) -> None:
    """Prompts of at most the batch point's length, two or more in one forward: the line from
    one such prompt to the batch point (affine beyond); one prompt, or longer prompts: the
    one-prompt line. Each less the part that holds no forward."""
    c = spec_costs.from_file(_trials(
        tmp_path,
        prefill_ms={"baseline": {"8": 17.0, "128": 19.0, "1024": 34.0}},
        prefill_batch_ms={"baseline": {"4096": 60.0}}, prefill_batch_prompt=128,
    ))  # fmt: skip
    way = c.prefill_latency("baseline")  # 8 tokens' 17.0 ms less a 19.6 ms decode: none
    assert way == 0.0
    # 32 prompts of 128: the batch point itself; 16: halfway along the line from one prompt
    assert c.prefill_forward("baseline", 4096, 32) == pytest.approx(0.060 - way)
    assert c.prefill_forward("baseline", 2048, 16) == pytest.approx(
        0.019 + (0.060 - 0.019) * (2048 - 128) / (4096 - 128) - way
    )
    # one prompt of 2048 tokens, or two of 1024: priced as one prompt that long
    for prompts in (1, 2):
        assert c.prefill_forward("baseline", 2048, prompts) == pytest.approx(
            c.prefill("baseline", 2048) - way
        )
    # no batch point for a spec mode without one: its own line
    assert c.batch_prefill("eagle", 4096, 32) is None
    again = spec_costs.Costs.from_dict(c.to_dict())
    assert again.prefill_batch == c.prefill_batch and again.prefill_batch_prompt == 128
