"""The model one rehearse rank runs (worker.py beside it imports this file by path; torch only,
never fastverify): random weights with the real per-rank shapes, pooled as the worker's
docstring says (`Model`: layer slots, the routed-expert pool, embedding, LM head, KV caches),
its forward (attention MLA/GQA, MLP, MoE over exactly the experts hit) and the TP collectives
of one forward (`Comm`, counting its calls; PCIe-IPC all-reduces where the job asks)."""

from __future__ import annotations

import random
from typing import Any


class Comm:
    """The TP collectives of one forward; counts calls so CPU runs can check the arithmetic.
    With `pcie` (a PcieIpc), all-reduces it takes run on FlashInfer's kernels, the rest on
    NCCL, as SGLang 0.5.23 dispatches them."""

    def __init__(self, group: Any, world: int, enabled: bool = True, pcie: Any = None):
        self.group = group  # a pynccl.RankGroup: NCCL on the call path measured, or gloo
        self.world = world
        self.enabled = enabled and world > 1
        self.pcie = pcie
        self.allreduce_calls = 0
        self.allgather_calls = 0

    def all_reduce(self, t: Any) -> Any:
        if self.enabled:
            self.allreduce_calls += 1
            if self.pcie is not None and self.pcie.wants(t):
                return self.pcie.all_reduce(t)
            self.group.all_reduce(t)
        return t

    def all_gather(self, t: Any, out: Any) -> Any:
        if not self.enabled:
            return t
        self.allgather_calls += 1
        if not getattr(self.group, "has_nccl", True) and getattr(self.group, "cuda", False):
            # ranks sharing a GPU have no NCCL (it refuses them): the LM head's logits are
            # placed locally, and the report says the all-gather did not run
            out[: t.shape[0]].copy_(t)
            return out
        self.group.all_gather(out, t)
        return out


class Model:
    """Weights (pooled) and the forward of one model plan on one rank."""

    def __init__(self, torch: Any, plan: dict[str, Any], device: Any, dtype: Any, opts: dict):
        self.torch = torch
        self.plan = plan
        self.device = device
        self.dtype = dtype
        self.batch = opts["batch"]  # KV caches hold this many sequences (the largest batch)
        batches = opts.get("batches") or [self.batch]
        self.context = opts["context"]
        self.seed = opts["seed"]
        self.tokens_per_seq = opts["tokens_per_seq"]  # every token count this model runs with
        self.h = plan["hidden"]
        self.elem = torch.tensor([], dtype=dtype).element_size()
        pool_bytes = int(opts["pool_bytes"])
        self.kinds = plan["layer_kinds"]
        self.attn = plan["attention"]
        self.moe: dict[str, Any] = plan.get("moe") or {}  # empty: a dense model
        gen = torch.Generator(device="cpu")
        gen.manual_seed(self.seed)
        self._gen = gen
        self.allocated = 0
        n_layers = len(self.kinds)
        wb = plan["weights"]
        # slot pools per layer kind; experts get most of the budget in MoE models
        expert_budget = pool_bytes * 3 // 4 if self.moe else 0
        slot_budget = pool_bytes - expert_budget
        self.slots: dict[str, list[dict[str, Any]]] = {}
        self.slot_counts: dict[str, int] = {}
        for kind in ("dense", "moe"):
            count = self.kinds.count(kind)
            if not count:
                continue
            per = wb["attention"] + (
                wb["dense_mlp"] if kind == "dense" else wb.get("shared_experts", 0)
            )
            n = max(1, min(count, -(-slot_budget // max(1, per))))
            self.slot_counts[kind] = n
            self.slots[kind] = [self._slot(kind) for _ in range(n)]
        # routing per layer and token count; the expert pool must hold the largest window
        self.routes: dict[int, list[Any]] = {}
        self.expert_pool = 0
        if self.moe:  # keyed by the forward's token count, batch x tokens per sequence
            for n in sorted({t * b for t in self.tokens_per_seq for b in batches}):
                self.routes[n] = [
                    self._route(n, i) if k == "moe" else None for i, k in enumerate(self.kinds)
                ]
            widest = max(r["n"] for rs in self.routes.values() for r in rs if r)
            fit = expert_budget // max(1, wb["expert"])
            self.expert_pool = int(min(self.moe["experts"], max(widest, fit)))
            e = self.expert_pool
            gu, dn = self.moe["gate_up"], self.moe["down"]
            self.w1 = self._w(e, gu[0], gu[1])
            self.w2 = self._w(e, dn[0], dn[1])
            for rs in self.routes.values():
                self._place(rs)
        # embedding + LM head (one each)
        self.embed = self._w(plan["vocab_per_rank"], self.h, scale=1.0)
        self.lm_head = self._w(*plan["lm_head"])
        self.fc = self._w(*plan["eagle3"]["fc"]) if "eagle3" in plan else None
        # KV caches per layer
        if self.attn["type"] == "mla":
            cache_shape = (self.batch, 1, self.context, self.attn["cache_dim"])
        else:
            cache_shape = (
                self.batch,
                self.attn["kv_heads_per_rank"],
                self.context,
                self.attn["head_dim"],
            )
        self.k_cache = [self._w(*cache_shape, scale=1.0) for _ in range(n_layers)]
        # MLA keeps one latent cache (k_cache); GQA a V cache beside it
        self.v_cache: list[Any] = (
            [self._w(*cache_shape, scale=1.0) for _ in range(n_layers)]
            if self.attn["type"] == "gqa"
            else []
        )
        self.n_layers = n_layers

    # ------------------------------------------------------------ weights
    def _w(self, *shape: int, scale: float | None = None) -> Any:
        torch = self.torch
        t = torch.empty(*shape, device=self.device, dtype=self.dtype)
        std = scale if scale is not None else 1.0 / max(1.0, float(shape[-2])) ** 0.5
        t.normal_(0.0, std)
        self.allocated += t.numel() * t.element_size()
        return t

    def _slot(self, kind: str) -> dict[str, Any]:
        a = self.attn
        s: dict[str, Any] = {}
        if a["type"] == "mla":
            for k in ("qkv_a", "q_b", "w_kc", "w_vc", "o_proj"):
                s[k] = self._w(*a[k])
        else:
            s["qkv"] = self._w(*a["qkv"])
            s["o_proj"] = self._w(*a["o_proj"])
        if kind == "dense":
            s["gate_up"] = self._w(*self.plan["dense_mlp"]["gate_up"])
            s["down"] = self._w(*self.plan["dense_mlp"]["down"])
        elif self.moe and "shared_gate_up" in self.moe:
            s["gate_up"] = self._w(*self.moe["shared_gate_up"])
            s["down"] = self._w(*self.moe["shared_down"])
        return s

    def _route(self, tokens: int, layer: int) -> dict[str, Any]:
        """top_k distinct experts per token, uniform; grouped by expert."""
        rng = random.Random(self.seed * 1_000_003 + layer * 7919 + tokens)
        experts, k = self.moe["experts"], self.moe["top_k"]
        per_expert: dict[int, list[int]] = {}
        for tok in range(tokens):
            for e in rng.sample(range(experts), k):
                per_expert.setdefault(e, []).append(tok)
        rows = list(per_expert.values())
        width = max(len(r) for r in rows)
        pad = tokens  # index of an all-zero row appended to the activations
        idx = [r + [pad] * (width - len(r)) for r in rows]
        return {"n": len(rows), "width": width, "idx_list": idx}

    def _place(self, routes: list[Any]) -> None:
        """Give each MoE layer a window of the expert pool (views, no copies); windows of
        consecutive layers start apart so the same expert weights are not re-read at once."""
        torch = self.torch
        offset = 0
        for r in routes:
            if r is None:
                continue
            n = r["n"]
            if offset + n > self.expert_pool:
                offset = 0
            r["w1"] = self.w1[offset : offset + n]
            r["w2"] = self.w2[offset : offset + n]
            r["idx"] = torch.tensor(r.pop("idx_list"), device=self.device, dtype=torch.long)
            offset += n

    # ------------------------------------------------------------ forward
    def _rms(self, x: Any) -> Any:
        torch = self.torch
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + 1e-6)).to(x.dtype)

    def _attention(self, s: dict[str, Any], x: Any, layer: int, t: int) -> Any:
        torch = self.torch
        T = x.shape[0]
        a, b = self.attn, T // t
        if a["type"] == "mla":
            hn = self.plan["heads_per_rank"]
            qkv = x @ s["qkv_a"]
            q_in = self._rms(qkv[:, : a["q_lora_rank"]]) if a["q_lora_rank"] else x
            q = (q_in @ s["q_b"]).view(T, hn, a["nope_dim"] + a["rope_dim"])
            q_nope = q[:, :, : a["nope_dim"]].transpose(0, 1)  # [H, T, nope]
            q_lat = torch.bmm(q_nope, s["w_kc"])  # [H, T, kv_lora]
            q_full = torch.cat([q_lat, q[:, :, a["nope_dim"] :].transpose(0, 1)], dim=-1)
            q_full = q_full.view(hn, b, t, -1).transpose(0, 1)  # [B, H, t, 576]
            cache = self.k_cache[layer][:b]  # [B, 1, C, 576]
            scores = torch.matmul(q_full, cache.transpose(-1, -2)) * (q_full.shape[-1] ** -0.5)
            p = torch.softmax(scores.float(), dim=-1).to(x.dtype)
            o = torch.matmul(p, cache[..., : a["kv_lora_rank"]])  # [B, H, t, kv_lora]
            o = o.transpose(0, 1).reshape(hn, T, a["kv_lora_rank"])
            o = torch.bmm(o, s["w_vc"])  # [H, T, v]
            o = o.transpose(0, 1).reshape(T, hn * a["v_head_dim"])
            return o @ s["o_proj"]
        hn, kv, d = self.plan["heads_per_rank"], a["kv_heads_per_rank"], a["head_dim"]
        qkv = x @ s["qkv"]
        q = qkv[:, : hn * d].view(b, t, kv, hn // kv if hn >= kv else 1, d)
        q = q.permute(0, 2, 3, 1, 4).reshape(b, kv, -1, d)  # [B, kv, g*t, d]
        scores = torch.matmul(q, self.k_cache[layer][:b].transpose(-1, -2)) * (d**-0.5)
        p = torch.softmax(scores.float(), dim=-1).to(x.dtype)
        o = torch.matmul(p, self.v_cache[layer][:b])  # [B, kv, g*t, d]
        o = o.view(b, kv, -1, t, d).permute(0, 3, 1, 2, 4).reshape(T, -1)[:, : hn * d]
        return o @ s["o_proj"]

    def _mlp(self, w_gate_up: Any, w_down: Any, x: Any) -> Any:
        torch = self.torch
        g = x @ w_gate_up
        half = g.shape[-1] // 2
        return (torch.nn.functional.silu(g[..., :half]) * g[..., half:]) @ w_down

    def _moe(self, s: dict[str, Any], x: Any, route: dict[str, Any]) -> Any:
        torch = self.torch
        T = x.shape[0]
        xp = torch.cat([x, x.new_zeros(1, x.shape[1])])  # row T: padding
        xe = xp[route["idx"]]  # [n, width, h]
        g = torch.bmm(xe, route["w1"])
        half = g.shape[-1] // 2
        y = torch.bmm(torch.nn.functional.silu(g[..., :half]) * g[..., half:], route["w2"])
        out = x.new_zeros(T + 1, x.shape[1])
        out.index_add_(0, route["idx"].reshape(-1), y.reshape(-1, x.shape[1]))
        out = out[:T]
        if "gate_up" in s:
            out = out + self._mlp(s["gate_up"], s["down"], x)
        return out

    def forward(self, ids: Any, hidden_in: Any, t: int, comm: Comm, extend: bool) -> Any:
        """One forward over batch x t tokens: ids [T] (local vocab rows), hidden_in [T, w]
        (the target's hidden states for an EAGLE-3 drafter; None for a target)."""
        torch = self.torch
        x = comm.all_reduce(self.embed[ids])  # vocab-parallel embedding
        if self.fc is not None:  # EAGLE-3: [embedding ++ hidden state] into layer 0
            hid = hidden_in @ self.fc if extend else hidden_in[:, : self.h]
        counters = {k: 0 for k in self.slots}
        for i, kind in enumerate(self.kinds):
            pool = self.slots[kind]
            s = pool[counters[kind] % len(pool)]
            counters[kind] += 1
            h_in = self._rms(x)
            if self.fc is not None and i == 0:
                h_in = torch.cat([h_in, self._rms(hid)], dim=-1)
            x = x + comm.all_reduce(self._attention(s, h_in, i, t))
            h2 = self._rms(x)
            if kind == "moe":
                m = self._moe(s, h2, self.routes[ids.shape[0]][i])
            else:
                m = self._mlp(s["gate_up"], s["down"], h2)
            x = x + comm.all_reduce(m)
        logits = self._rms(x) @ self.lm_head
        gathered = logits.new_empty(comm.world * logits.shape[0], logits.shape[1])
        return comm.all_gather(logits.contiguous(), gathered)
