"""config.json reader, per-rank shape arithmetic and break-even maths of `rehearse` (no torch).

Every expected number is derived by hand from the config fields in the comment beside it
(SGLang's TP sharding, modelconfig's docstring), never produced by the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastverify.experiments.rehearse import modelconfig
from fastverify.experiments.rehearse import run as rehearse

REPO = Path(__file__).resolve().parents[3]
CONFIGS = REPO / "examples" / "model-configs"


def kimi(tp: int) -> dict:
    return modelconfig.plan(modelconfig.load_spec(CONFIGS / "kimi-k2.5.json"), tp)


def test_kimi_text_config_is_read_through_the_multimodal_wrapper() -> None:
    spec = modelconfig.load_spec(CONFIGS / "kimi-k2.5.json")
    assert (spec.model_type, spec.hidden_size, spec.num_layers) == ("kimi_k2", 7168, 61)
    assert (spec.n_routed_experts, spec.num_experts_per_tok, spec.moe_intermediate_size) == (
        384,
        8,
        2048,
    )
    assert spec.mla and spec.moe and not spec.eagle3


def test_kimi_shapes_at_tp2() -> None:
    p = kimi(2)
    a = p["attention"]
    assert a["type"] == "mla"
    assert a["qkv_a"] == [7168, 1536 + 512 + 64]  # q_lora + kv_lora + rope, replicated
    assert a["q_b"] == [1536, (64 // 2) * (128 + 64)]  # heads/tp x (nope + rope) = 6144
    assert a["w_kc"] == [32, 128, 512] and a["w_vc"] == [32, 512, 128]
    assert a["o_proj"] == [32 * 128, 7168]
    assert p["dense_mlp"] == {"gate_up": [7168, 2 * 9216], "down": [9216, 7168]}  # 18432 / 2
    m = p["moe"]
    assert (m["experts"], m["top_k"]) == (384, 8)
    assert m["gate_up"] == [7168, 2 * 1024] and m["down"] == [1024, 7168]  # 2048 / 2
    assert m["shared_gate_up"] == [7168, 2 * 1024] and m["shared_down"] == [1024, 7168]
    assert p["lm_head"] == [7168, 81920] and p["vocab_per_rank"] == 81920  # 163840 / 2
    assert p["layer_kinds"] == ["dense"] + ["moe"] * 60  # first_k_dense_replace = 1
    assert p["allreduce_per_forward"] == 2 * 61 + 1  # attention + MoE per layer, embedding
    # per-rank bytes (bf16) of one layer's attention: the five matrices above
    attn = 7168 * 2112 + 1536 * 6144 + 2 * 32 * 128 * 512 + 4096 * 7168
    assert p["weights"]["attention"] == attn * 2
    assert p["weights"]["expert"] == (7168 * 2048 + 1024 * 7168) * 2  # 44 MB: ~ one L2


def test_kimi_shapes_at_tp8_the_field_box() -> None:
    p = kimi(8)
    assert p["attention"]["q_b"] == [1536, 8 * 192]
    assert p["attention"]["o_proj"] == [8 * 128, 7168]
    assert p["moe"]["gate_up"] == [7168, 2 * 256] and p["moe"]["down"] == [256, 7168]
    assert p["dense_mlp"]["down"] == [2304, 7168]
    assert p["allreduce_per_forward"] == 123  # the field counted 122 (see docs/guides/rehearse.md)


def test_one_rank_has_no_collectives() -> None:
    assert kimi(1)["allreduce_per_forward"] == 0
    assert kimi(1)["allgather_per_forward"] == 0


def test_dense_llama_gqa_shapes(tmp_path: Path) -> None:
    # Llama-3-8B-like: hidden 4096, 32 heads of 128, 8 KV heads, intermediate 14336
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
           "num_hidden_layers": 32, "vocab_size": 128256}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    p = modelconfig.plan(modelconfig.load_spec(tmp_path), 8)
    assert p["attention"] == {
        "type": "gqa",
        "head_dim": 128,  # hidden / heads, no head_dim field
        "kv_heads_per_rank": 1,
        "qkv": [4096, (4 + 2 * 1) * 128],
        "o_proj": [4 * 128, 4096],
    }
    assert p["dense_mlp"] == {"gate_up": [4096, 2 * 1792], "down": [1792, 4096]}
    assert p["lm_head"] == [4096, 16032]
    assert p["layer_kinds"] == ["dense"] * 32
    assert p["allreduce_per_forward"] == 65
    assert "moe" not in p


def test_kv_heads_fewer_than_ranks_are_replicated() -> None:
    spec = modelconfig.load_spec(CONFIGS / "tiny-dense.json")  # 4 heads, 2 KV heads of 16
    at2 = modelconfig.plan(spec, 2)["attention"]
    at4 = modelconfig.plan(spec, 4)["attention"]
    assert at2["qkv"] == [64, (2 + 2 * 1) * 16]
    assert at4["qkv"] == [64, (1 + 2 * 1) * 16]  # 2 KV heads on 4 ranks: one each, replicated


def test_eagle3_drafter_shapes() -> None:
    spec = modelconfig.load_spec(CONFIGS / "kimi-k2.5-eagle3.json")
    assert spec.eagle3 and spec.num_layers == 1
    p = modelconfig.plan(spec, 2)
    assert p["attention"]["qkv"] == [2 * 7168, (32 + 2 * 32) * 128]  # embeds ++ hidden in
    assert p["eagle3"]["fc"] == [3 * 7168, 7168]
    assert p["dense_mlp"]["down"] == [6144, 7168]  # 12288 / 2
    assert p["allreduce_per_forward"] == 3


def test_estimated_drafter_is_one_layer_at_the_target_width() -> None:
    est = modelconfig.estimated_drafter(modelconfig.load_spec(CONFIGS / "kimi-k2.5.json"))
    assert (est.num_layers, est.hidden_size, est.num_heads, est.head_dim) == (1, 7168, 56, 128)
    assert est.eagle3 and est.intermediate_size == 18432 and est.vocab_size == 163840


def test_distinct_experts_for_one_token_is_top_k() -> None:
    assert modelconfig.expected_distinct_experts(384, 8, 1) == pytest.approx(8.0)
    assert modelconfig.expected_distinct_experts(384, 8, 10_000) == pytest.approx(384.0)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"hidden_size": 64, "num_attention_heads": 4}', "'num_hidden_layers'"),
        ('{"text_config": {"hidden_size": "big"}}', "text_config: field 'hidden_size'"),
        ('{\n  "hidden_size": 64,\n  oops\n}', ":3: not JSON"),
    ],
)
def test_bad_configs_name_the_file_and_field(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(modelconfig.ModelConfigError) as exc:
        modelconfig.load_spec(path)
    assert str(path) in str(exc.value) and needle in str(exc.value)


def test_heads_not_divisible_by_tp_is_refused() -> None:
    spec = modelconfig.load_spec(CONFIGS / "tiny-dense.json")
    with pytest.raises(modelconfig.ModelConfigError, match=r"heads \(4\) is not divis"):
        modelconfig.plan(spec, 3)


def test_drafter_config_given_as_the_target_is_refused() -> None:
    with pytest.raises(modelconfig.ModelConfigError, match="--draft-config"):
        rehearse.load_models(str(CONFIGS / "kimi-k2.5-eagle3.json"), None)


# ------------------------------------------------------------------ break-even maths


def test_breakeven_reproduces_the_field_figure() -> None:
    # field, 8 PCIe GPUs: baseline 82 tok/s (a 12.2 ms step), verify cycle ~30 ms
    decode_ms = 1000.0 / 82.0
    assert rehearse.breakeven_accept_length(0.0, 30.0, decode_ms) == pytest.approx(2.46)
    t = rehearse.throughputs(decode_ms, 30.0, batch=1, accept_length=2.0)
    assert t["baseline_tokens_per_s"] == pytest.approx(82.0)
    assert t["eagle3_tokens_per_s"] == pytest.approx(2.0 * 1000.0 / 30.0)  # 66.7 tok/s
    assert t["speculation_pays"] is False


def test_breakeven_counts_the_drafter() -> None:
    # 4 ms of drafting on top of a 12 ms verify against an 8 ms step: (4 + 12) / 8
    assert rehearse.breakeven_accept_length(4.0, 12.0, 8.0) == pytest.approx(2.0)
    assert rehearse.throughputs(8.0, 16.0, batch=4, accept_length=2.5)["speculation_pays"]
    with pytest.raises(ValueError):
        rehearse.breakeven_accept_length(1.0, 1.0, 0.0)


def test_ranking_by_tokens_per_second_then_failures_last() -> None:
    rows = [
        {"profile": "a", "status": "ok", "cycle_ms": 20.0, "baseline_tokens_per_s": 80.0,
         "eagle3_tokens_per_s": 100.0},
        {"profile": "b", "status": "failed"},
        {"profile": "c", "status": "ok", "cycle_ms": 30.0, "baseline_tokens_per_s": 120.0,
         "eagle3_tokens_per_s": 66.0},
    ]  # fmt: skip
    ranked = rehearse.rank_results([dict(r) for r in rows], accept_length=2.0)
    assert [r["profile"] for r in ranked] == ["c", "a", "b"]
    assert [r.get("rank") for r in ranked] == [1, 2, None]
    by_cycle = rehearse.rank_results([dict(r) for r in rows], accept_length=None)
    assert [r["profile"] for r in by_cycle] == ["a", "c", "b"]


def test_accept_length_from_a_live_exporter() -> None:
    import http.server
    import threading

    bodies = {
        "/metrics": b"# TYPE fastverify_spec_accept_length gauge\n"
        b'fastverify_spec_accept_length{profile="ring-ll"} 2.31\n',
        "/empty/metrics": b"fastverify_up 1\n",
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = bodies.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # keep test output clean
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert rehearse.accept_length_from_metrics(base) == pytest.approx(2.31)
        assert rehearse.accept_length_from_metrics(f"{base}/empty") is None
    finally:
        server.shutdown()
        server.server_close()
