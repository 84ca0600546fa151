"""Write a random-valued safetensors checkpoint of a realistic shape (Llama-3.1-8B's layout:
32 layers, hidden 4096, 8 KV heads, vocab 128256, bf16, ~16 GB), for real disk loads,
CUDA-graph capture of a real-sized model and weight-cache timings on a GPU machine that
reaches no model hub.

    python benchmarks/gpu/write_checkpoint.py OUTDIR [--layers 32]

Values are N(0, 0.02) (norms 1): the server loads and runs them like any checkpoint; what
it generates is meaningless, so use it for timings and mechanics, never for acceptance.
Tensors are drawn on the GPU when there is one. Writes config.json, 4 GB shards
(model-0000i.safetensors), model.safetensors.index.json, then OUTDIR/.ok.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

CONFIG_FILE = Path(__file__).resolve().parent / "sglang_pack" / "llama8b-shape" / "config.json"
# the shape, declared once: the same config.json serves dummy-weight runs with no checkpoint
CONFIG = json.loads(CONFIG_FILE.read_text())
SHARD_BYTES = 4 << 30


def shapes(cfg: dict) -> list[tuple[str, tuple[int, ...]]]:
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (v, h))]
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out += [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (h, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, h)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (i, h)),
            (p + "mlp.up_proj.weight", (i, h)),
            (p + "mlp.down_proj.weight", (h, i)),
        ]
    return [*out, ("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=CONFIG["num_hidden_layers"])
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {**CONFIG, "num_hidden_layers": a.layers}
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.monotonic()
    plan = shapes(cfg)
    total = sum(2 * torch.Size(s).numel() for _, s in plan)
    weight_map: dict[str, str] = {}
    shard: dict[str, torch.Tensor] = {}
    size, idx, written = 0, 1, 0

    def flush() -> None:
        nonlocal shard, size, idx, written
        name = f"model-{idx:05d}.safetensors"
        save_file(shard, str(out / name), metadata={"format": "pt"})
        for k in shard:
            weight_map[k] = name
        written += size
        print(f"{name}: {size / 2**30:.2f} GiB ({written / 2**30:.1f} of {total / 2**30:.1f} GiB, "
              f"{time.monotonic() - t0:.0f} s)", flush=True)  # fmt: skip
        shard, size, idx = {}, 0, idx + 1

    for name, shape in plan:
        t = torch.empty(shape, dtype=torch.bfloat16, device=dev)
        if name.endswith("norm.weight"):
            t.fill_(1.0)
        else:
            t.normal_(0.0, 0.02)
        shard[name] = t.cpu()
        size += 2 * t.numel()
        if size >= SHARD_BYTES:
            flush()
    if shard:
        flush()
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    (out / ".ok").write_text(f"{total} bytes in {time.monotonic() - t0:.1f} s\n")
    print(f"wrote {total / 2**30:.2f} GiB in {time.monotonic() - t0:.1f} s to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
