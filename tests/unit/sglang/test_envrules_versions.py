"""The NCCL variables SGLang adds, per release: each rule applies where that release's wheel
has it, in that release's form (facts `env.nccl_added`, `features.graph_register_triggers`)."""

from __future__ import annotations

import pytest

from fastverify.sglang.envrules import engine_env
from fastverify.sglang.launch import LaunchArgs

TP2 = LaunchArgs("m", tp_size=2)


@pytest.mark.parametrize(
    ("version", "register"),
    [("0.5.19", False), ("0.5.20", False), ("0.5.22", False), ("0.5.23", True)],
)
def test_graph_register_for_any_multi_rank_capture_only_from_0_5_23(
    version: str, register: bool
) -> None:
    # 0.5.23 parallel_hook._graph_may_capture_collectives; 0.5.20 .. 0.5.22 guard only the
    # TP LM-head all-to-all (and, 0.5.22, a pausable graph pool); 0.5.19 never sets it
    assert ("NCCL_GRAPH_REGISTER" in engine_env(TP2, {}, version).added) is register


@pytest.mark.parametrize("version", ["0.5.20", "0.5.21", "0.5.22"])
def test_graph_register_with_the_tp_lm_head_all_to_all_from_0_5_20(version: str) -> None:
    explicit = TP2.with_(extra_args=("--enable-tp-lm-head-all-to-all",))
    assert engine_env(explicit, {}, version).added["NCCL_GRAPH_REGISTER"] == "0"
    pd_decode = LaunchArgs("m", tp_size=4, extra_args=(
        "--disaggregation-mode", "decode", "--enable-dp-attention", "--dp-size", "4"))  # fmt: skip
    assert "NCCL_GRAPH_REGISTER" in engine_env(pd_decode, {}, version).added
    assert "NCCL_GRAPH_REGISTER" not in engine_env(explicit, {}, "0.5.19").added


def test_pausable_graph_pool_sets_graph_register_in_0_5_22_only() -> None:
    saver = TP2.with_(extra_args=("--enable-memory-saver",))
    env = {"SGLANG_MEMORY_SAVER_CUDA_GRAPH": "1"}
    assert "NCCL_GRAPH_REGISTER" in engine_env(saver, env, "0.5.22").added
    assert "NCCL_GRAPH_REGISTER" not in engine_env(saver, env, "0.5.21").added


def test_before_0_5_4_cumem_is_assigned_over_a_profiles_value() -> None:
    # 0.5.1 .. 0.5.3 engine.py: os.environ["NCCL_CUMEM_ENABLE"] = str(int(enable_symm_mem))
    profile = {"NCCL_CUMEM_ENABLE": "1", "NCCL_NVLS_ENABLE": "1"}
    old = engine_env(TP2, profile, "0.5.1.post3")
    assert old.overrides == {"NCCL_CUMEM_ENABLE": ["1", "0"], "NCCL_NVLS_ENABLE": ["1", "0"]}
    new = engine_env(TP2, profile, "0.5.4.post3")  # `if "NCCL_CUMEM_ENABLE" not in os.environ`
    assert new.overrides == {} and new.added == {}


def test_rules_the_release_lacks_do_not_apply() -> None:
    det = TP2.with_(extra_args=("--enable-deterministic-inference",))
    assert engine_env(det, {}, "0.5.23").overrides == {} and (
        engine_env(det, {}, "0.5.23").added["NCCL_MAX_NCHANNELS"] == "8"
    )
    assert "NCCL_MAX_NCHANNELS" not in engine_env(det, {}, "0.5.17").added  # came in 0.5.18
    multi = LaunchArgs("m", tp_size=16, nnodes=2, dist_init_addr="h:1")
    assert "NCCL_MNNVL_ENABLE" in engine_env(multi, {}, "0.5.17").possible
    assert "NCCL_MNNVL_ENABLE" not in engine_env(multi, {}, "0.5.16").possible
