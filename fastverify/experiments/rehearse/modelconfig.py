"""Hugging Face `config.json` -> the per-rank GEMM shapes of a tensor-parallel forward pass.

Reads the fields that decide the shapes of a decode step (nothing is downloaded, no weight is
read): dense Llama/Qwen layouts (`hidden_size`, `intermediate_size`, `num_attention_heads`,
`num_key_value_heads`, `head_dim`, `num_hidden_layers`, `vocab_size`) and DeepSeek-V3 /
Kimi-K2.5 MoE layouts (`n_routed_experts`, `n_shared_experts`, `num_experts_per_tok`,
`moe_intermediate_size`, `first_k_dense_replace`, `moe_layer_freq`, MLA `q_lora_rank`,
`kv_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim`). Multimodal wrappers
(Kimi-K2.5: `model_type: kimi_k25`) nest the text model under `text_config`; it is used.

Sharding follows SGLang's tensor-parallel layers (a per-rank view, `tp` ranks):
- embedding: vocab-parallel (vocab / tp rows) + one all-reduce per forward (tp > 1);
- GQA attention: fused QKV column-parallel, hidden -> (heads/tp + 2 kv_heads/tp) x head_dim
  (kv heads replicated when fewer than tp), o_proj row-parallel + all-reduce;
- MLA attention: q_a+kv_a fused and replicated, hidden -> q_lora + kv_lora + rope;
  q_b column-parallel q_lora -> heads/tp x (nope + rope); absorbed decode per head:
  w_kc [nope, kv_lora] and w_vc [kv_lora, v_head]; o_proj row-parallel + all-reduce;
- dense MLP: gate_up column-parallel hidden -> 2 x intermediate/tp, down row-parallel
  + all-reduce;
- MoE (TP, no expert parallelism): every expert sharded like a dense MLP with
  moe_intermediate/tp; shared experts fused (n_shared x moe_intermediate / tp); one
  all-reduce after routed + shared experts; the router GEMM is listed but not run;
- LM head: vocab-parallel (vocab / tp columns) + an all-gather (not an all-reduce).
So one forward issues 2 x layers + 1 (embedding) all-reduces when tp > 1.

An EAGLE-3 drafter config (`LlamaForCausalLMEagle3`, one Llama layer) is read as dense, with
its layer-0 QKV input widened to 2 x hidden (token embedding ++ hidden state), an `fc`
projection 3 x target_hidden -> hidden (replicated, run when the target's hidden states
enter: the draft-extend pass) and an LM head of `draft_vocab_size` rows when set.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_BF16 = 2


class ModelConfigError(ValueError):
    """A config.json that cannot describe a model (message names the file and the field)."""


@dataclass(frozen=True)
class ModelSpec:
    """The shape-relevant fields of one config.json (text model)."""

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    # MLA (0: plain GQA attention)
    kv_lora_rank: int = 0
    q_lora_rank: int = 0  # 0: no q compression (q_proj straight from hidden)
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # MoE (0 routed experts: dense)
    n_routed_experts: int = 0
    n_shared_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    # EAGLE-3 drafter
    eagle3: bool = False
    target_hidden_size: int = 0
    draft_vocab_size: int = 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe(self) -> bool:
        return self.n_routed_experts > 0

    def is_moe_layer(self, i: int) -> bool:
        return self.moe and i >= self.first_k_dense_replace and i % max(1, self.moe_layer_freq) == 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(cfg: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ModelConfigError(f"{where}: missing field {key!r} (an integer)")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelConfigError(f"{where}: field {key!r} is {value!r}; expected an integer >= 0")
    return value


def _positive(cfg: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = _int(cfg, key, where, default)
    if value < 1:
        raise ModelConfigError(f"{where}: field {key!r} is {value}; expected an integer >= 1")
    return value


def spec_from_dict(cfg: dict[str, Any], where: str = "config.json", name: str = "") -> ModelSpec:
    """Build a ModelSpec from a parsed config.json (uses `text_config` when present)."""
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{where}: expected a JSON object at the top level")
    outer_type = str(cfg.get("model_type") or "")
    archs = cfg.get("architectures") or []
    if isinstance(cfg.get("text_config"), dict):
        text = cfg["text_config"]
        where = f"{where}: text_config"
    else:
        text = cfg
    hidden = _positive(text, "hidden_size", where)
    heads = _positive(text, "num_attention_heads", where)
    eagle3 = any("Eagle3" in str(a) for a in archs) or bool(text.get("draft_vocab_size"))
    default_head_dim = hidden // heads if hidden % heads == 0 else None
    spec: dict[str, Any] = dict(
        name=name,
        model_type=str(text.get("model_type") or outer_type or "unknown"),
        hidden_size=hidden,
        num_layers=_positive(text, "num_hidden_layers", where),
        num_heads=heads,
        num_kv_heads=_positive(text, "num_key_value_heads", where, heads),
        head_dim=_positive(text, "head_dim", where, default_head_dim),
        intermediate_size=_positive(text, "intermediate_size", where),
        vocab_size=_positive(text, "vocab_size", where),
    )
    if text.get("kv_lora_rank"):
        spec.update(
            kv_lora_rank=_positive(text, "kv_lora_rank", where),
            q_lora_rank=_int(text, "q_lora_rank", where, 0) if text.get("q_lora_rank") else 0,
            qk_nope_head_dim=_positive(text, "qk_nope_head_dim", where),
            qk_rope_head_dim=_positive(text, "qk_rope_head_dim", where),
            v_head_dim=_positive(text, "v_head_dim", where),
        )
    if text.get("n_routed_experts"):
        spec.update(
            n_routed_experts=_positive(text, "n_routed_experts", where),
            n_shared_experts=_int(text, "n_shared_experts", where, 0) or 0,
            num_experts_per_tok=_positive(text, "num_experts_per_tok", where),
            moe_intermediate_size=_positive(text, "moe_intermediate_size", where),
            first_k_dense_replace=_int(text, "first_k_dense_replace", where, 0),
            moe_layer_freq=_positive(text, "moe_layer_freq", where, 1),
        )
        if spec["num_experts_per_tok"] > spec["n_routed_experts"]:
            raise ModelConfigError(
                f"{where}: num_experts_per_tok ({spec['num_experts_per_tok']}) is larger than "
                f"n_routed_experts ({spec['n_routed_experts']})"
            )
    if eagle3:
        spec.update(
            eagle3=True,
            target_hidden_size=_int(text, "target_hidden_size", where, hidden) or hidden,
            draft_vocab_size=_int(text, "draft_vocab_size", where, 0) or 0,
        )
    return ModelSpec(**spec)


def load_spec(path: str | Path) -> ModelSpec:
    """Read a config.json (or a directory holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelConfigError(f"{p}: cannot read ({exc.strerror or exc})") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{p}:{exc.lineno}: not JSON ({exc.msg})") from None
    name = p.parent.name if p.name == "config.json" else p.stem
    return spec_from_dict(cfg, str(p), name=name)


def estimated_drafter(target: ModelSpec) -> ModelSpec:
    """The stated estimate used without --draft-config: an EAGLE-3 drafter of one Llama layer
    with the target's hidden size and vocabulary, its attention heads as KV heads (MHA), head
    dim 128 and an MLP of the target's intermediate_size (the published Kimi-K2.5 EAGLE-3
    drafter has 64 heads of 128 and intermediate 12288 against the target's 18432)."""
    head_dim = 128 if target.hidden_size % 128 == 0 else target.head_dim
    heads = max(1, target.hidden_size // head_dim)
    return ModelSpec(
        name=f"{target.name or 'target'}-eagle3-estimate",
        model_type="llama",
        hidden_size=target.hidden_size,
        num_layers=1,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=head_dim,
        intermediate_size=target.intermediate_size,
        vocab_size=target.vocab_size,
        eagle3=True,
        target_hidden_size=target.hidden_size,
    )


# ------------------------------------------------------------------ per-rank shapes


def _split(value: int, tp: int, what: str, where: str) -> int:
    if value % tp:
        raise ModelConfigError(f"{where}: {what} ({value}) is not divisible by tp={tp}")
    return value // tp


def plan(spec: ModelSpec, tp: int) -> dict[str, Any]:
    """The per-rank GEMM shapes ([in, out] per matrix; bmm as [batch, in, out]) of one forward
    and its collectives; JSON-safe, what the rehearsal worker builds its weights from."""
    if tp < 1:
        raise ModelConfigError(f"tp must be >= 1, got {tp}")
    where = spec.name or spec.model_type
    h = spec.hidden_size
    heads = _split(spec.num_heads, tp, "num_attention_heads", where)
    out: dict[str, Any] = {
        "name": spec.name,
        "tp": tp,
        "hidden": h,
        "num_layers": spec.num_layers,
        "vocab_per_rank": -(-spec.vocab_size // tp),  # SGLang pads the vocab to a multiple
        "heads_per_rank": heads,
    }
    if spec.mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        attn: dict[str, Any] = {
            "type": "mla",
            "kv_lora_rank": spec.kv_lora_rank,
            "rope_dim": spec.qk_rope_head_dim,
            "nope_dim": spec.qk_nope_head_dim,
            "v_head_dim": spec.v_head_dim,
            "q_lora_rank": spec.q_lora_rank,
        }
        if spec.q_lora_rank:
            attn["qkv_a"] = [h, spec.q_lora_rank + spec.kv_lora_rank + spec.qk_rope_head_dim]
            attn["q_b"] = [spec.q_lora_rank, heads * qk]
        else:
            attn["qkv_a"] = [h, spec.kv_lora_rank + spec.qk_rope_head_dim]
            attn["q_b"] = [h, heads * qk]  # q_proj straight from the hidden state
        attn["w_kc"] = [heads, spec.qk_nope_head_dim, spec.kv_lora_rank]
        attn["w_vc"] = [heads, spec.kv_lora_rank, spec.v_head_dim]
        attn["o_proj"] = [heads * spec.v_head_dim, h]
        attn["cache_dim"] = spec.kv_lora_rank + spec.qk_rope_head_dim
    else:
        if spec.num_kv_heads >= tp:
            kv = _split(spec.num_kv_heads, tp, "num_key_value_heads", where)
        else:
            kv = 1  # SGLang replicates KV heads when there are fewer than ranks
        in_dim = 2 * h if spec.eagle3 else h
        attn = {
            "type": "gqa",
            "head_dim": spec.head_dim,
            "kv_heads_per_rank": kv,
            "qkv": [in_dim, (heads + 2 * kv) * spec.head_dim],
            "o_proj": [heads * spec.head_dim, h],
        }
    out["attention"] = attn
    dense_i = _split(spec.intermediate_size, tp, "intermediate_size", where)
    out["dense_mlp"] = {"gate_up": [h, 2 * dense_i], "down": [dense_i, h]}
    kinds = ["moe" if spec.is_moe_layer(i) else "dense" for i in range(spec.num_layers)]
    out["layer_kinds"] = kinds
    if spec.moe:
        mi = _split(spec.moe_intermediate_size, tp, "moe_intermediate_size", where)
        moe: dict[str, Any] = {
            "experts": spec.n_routed_experts,
            "top_k": spec.num_experts_per_tok,
            "gate_up": [h, 2 * mi],
            "down": [mi, h],
            "router": [h, spec.n_routed_experts],  # listed, not run (routing is drawn)
        }
        if spec.n_shared_experts:
            si = spec.n_shared_experts * mi
            moe["shared_gate_up"] = [h, 2 * si]
            moe["shared_down"] = [si, h]
        out["moe"] = moe
    if spec.eagle3:
        out["eagle3"] = {"fc": [3 * (spec.target_hidden_size or h), h]}
        lm_rows = spec.draft_vocab_size or spec.vocab_size
    else:
        lm_rows = spec.vocab_size
    out["lm_head"] = [h, -(-lm_rows // tp)]
    out["allreduce_per_forward"] = allreduces_per_forward(spec, tp)
    out["allgather_per_forward"] = 1 if tp > 1 else 0
    out["weights"] = weight_bytes(out)
    return out


def allreduces_per_forward(spec: ModelSpec, tp: int) -> int:
    """TP all-reduces in one forward: after attention and after the MLP/MoE of every layer,
    plus the vocab-parallel embedding's; none on one rank."""
    return 2 * spec.num_layers + 1 if tp > 1 else 0


def _numel(shape: list[int]) -> int:
    return math.prod(shape)


def weight_bytes(p: dict[str, Any], elem: int = _BF16) -> dict[str, int]:
    """Per-rank bytes of one layer's weights by part (attention, dense MLP, one routed expert,
    shared experts) and of the embedding and LM head; bf16 unless `elem` says otherwise."""
    a = p["attention"]
    keys = ("qkv_a", "q_b", "w_kc", "w_vc", "o_proj") if a["type"] == "mla" else ("qkv", "o_proj")
    out = {
        "attention": sum(_numel(a[k]) for k in keys) * elem,
        "dense_mlp": sum(_numel(s) for s in p["dense_mlp"].values()) * elem,
        "embedding": p["vocab_per_rank"] * p["hidden"] * elem,
        "lm_head": _numel(p["lm_head"]) * elem,
    }
    if "moe" in p:
        m = p["moe"]
        out["expert"] = (_numel(m["gate_up"]) + _numel(m["down"])) * elem
        out["shared_experts"] = (
            (_numel(m["shared_gate_up"]) + _numel(m["shared_down"])) * elem
            if "shared_gate_up" in m
            else 0
        )
    return out


def expected_distinct_experts(experts: int, top_k: int, tokens: int) -> float:
    """Mean number of distinct experts hit by `tokens` tokens each routed to `top_k` of
    `experts` drawn uniformly (without replacement within a token)."""
    miss = 1.0 - top_k / experts
    return experts * (1.0 - miss**tokens)
