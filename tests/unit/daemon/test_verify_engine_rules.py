"""Verification with SGLang's environment rules: engine-added variables are accepted and
shown, an engine override of a profile variable fails as `engine_override`."""

from __future__ import annotations

from fastverify.daemon.verify import check_nccl_debug, compare_env
from fastverify.sglang.envrules import engine_env
from fastverify.sglang.launch import LaunchArgs

TP2 = LaunchArgs(model_path="/m", tp_size=2)


def test_graph_register_added_by_sglang_is_accepted_and_reported() -> None:
    profile = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
    rules = engine_env(TP2, profile)
    assert rules.added == {
        "NCCL_GRAPH_REGISTER": "0", "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0",
    }  # fmt: skip
    assert "will add NCCL_CUMEM_ENABLE=0, NCCL_GRAPH_REGISTER=0" in rules.summary()
    worker = {**profile, **rules.added}
    chk = compare_env(worker, profile, engine_env=rules)
    assert chk.ok and chk.engine_set == rules.added
    # without the rules the same worker is a mismatch
    assert not compare_env(worker, profile).ok


def test_cuda_graphs_off_means_no_graph_register() -> None:
    rules = engine_env(TP2.with_(cuda_graph=False), {})
    assert "NCCL_GRAPH_REGISTER" not in rules.added


def test_deterministic_inference_override_is_engine_override() -> None:
    args = TP2.with_(extra_args=("--enable-deterministic-inference",))
    profile = {"NCCL_ALGO": "Ring"}
    rules = engine_env(args, profile)
    worker = rules.final(profile)
    chk = compare_env(worker, profile, engine_env=rules)
    assert not chk.ok and chk.overridden == {"NCCL_ALGO": ["Ring", "allreduce:tree"]}
    assert not chk.different


def test_nccl_debug_confirmations_know_the_rules(tmp_path) -> None:
    profile = {"NCCL_ALGO": "Ring"}
    log = tmp_path / "h.1.log"
    log.write_text(
        "h:1:1 [0] NCCL INFO NCCL_ALGO set by environment to allreduce:tree\n"
        "h:1:1 [0] NCCL INFO NCCL_GRAPH_REGISTER set by environment to 0.\n"
    )
    args = TP2.with_(extra_args=("--enable-deterministic-inference",))
    out = check_nccl_debug([log], profile, engine_env(args, profile))
    assert out["ok"] is False and out["reason"] == "engine_override"
    assert out["engine_added"] == {"NCCL_GRAPH_REGISTER": "0"}
    plain = check_nccl_debug([log], profile, engine_env(TP2, profile))
    assert plain["reason"] == "env_mismatch"
