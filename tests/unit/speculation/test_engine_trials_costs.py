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
        "cycle_ms": {"1": {"0": 20.0, "1": 30.0, "2": 40.0}, "8": {"0": 50.0, "1": 90.0}},
        "verify_ms": {"1": {"1": 25.0}},
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
    assert c.notes["verify_ms"] == {"1": {"1": 25.0}}
    assert c.to_dict()["cycle_ms"]["8"] == {"0": 50.0, "1": 90.0}


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"kind": "other"}, "\"kind\" is 'other'"),
        ({"source": ""}, 'field "source" must say where'),
        ({"cycle_ms": {}}, 'field "cycle_ms"'),
        ({"cycle_ms": {"1": {"0": "x"}}}, 'field "cycle_ms"'),
        ({"cycle_ms": {"1": {"1": 30.0}}}, "has no decode step (steps 0)"),
        ({"cycle_ms": {"1": {"0": 0.0}}}, "non-positive cost"),
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
