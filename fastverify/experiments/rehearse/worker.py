"""One rank of `fastverifyctl rehearse`: a model's decode step and verify pass, random weights.

Run by `fastverify.experiments.rehearse.run` as a plain script, one process per GPU, with exactly
the profile's environment plus RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. It
imports only torch and the standard library (never fastverify). Input: a JSON job (--job)
holding the per-rank shapes computed by `fastverify.experiments.rehearse.modelconfig.plan` for the
target and the drafter; output: one JSON document (--out) and, when asked, one
torch.profiler chrome trace (--trace).

What runs (bf16 on NCCL, float32 on the gloo testing backend):
- weights: random, with the real per-rank GEMM shapes, drawn from pools whose total is far
  beyond the GPU's L2 (default 8 GB): layer slots (attention + MLP or shared experts) used
  round-robin over the layers, and a pool of routed experts; consecutive layers never share
  a slot unless the pool holds a single one;
- MoE: every token picks `top_k` experts drawn uniformly (seeded; fixed per layer and pass,
  as one batch's routing), tokens are gathered per distinct expert, two batched GEMMs per
  layer over exactly the experts hit (each expert's weights read once, as a fused MoE
  kernel does), results scattered back; the router GEMM and routing weights are skipped;
- attention: over a KV cache of `context` random tokens per sequence (MLA: absorbed,
  on the 576-wide latent; GQA: grouped heads), plain matmul/softmax kernels; new tokens are
  not written to the cache, no causal mask between draft tokens, no RoPE;
- collectives: all-reduce after the vocab-parallel embedding, after attention and after
  the MLP/MoE of every layer; an all-gather of the LM head's logits; a `pcie_ipc` job
  (the profile sets SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1) hands the all-reduces within its
  bound to FlashInfer's PCIe-IPC workspace, as SGLang 0.5.23 does (`PcieIpc`);
- phases: DECODE (target, 1 token per sequence), VERIFY (target, K+1 tokens per sequence),
  DRAFT (drafter, 1 token per sequence, run K times per cycle) and DRAFT_EXTEND (drafter
  over the K+1 verified tokens, with the EAGLE-3 fc projection); a compute-only VERIFY
  (no collectives) gives the verify pass's compute time.
A grid job (`job["grid"]`, `rehearse --batch-sizes/--tokens/--shard-of-tp`, grid.py) runs
instead only the target's forward, compute only, at every batch size x tokens per sequence,
one CUDA graph per cell (`Rank.run_grid`). Ranks sharing one GPU (`job["nccl"]` false) make
no NCCL communicator (NCCL refuses them): every all-reduce then goes to FlashInfer's
PCIe-IPC workspace and the LM head's all-gather places each rank's own logits.
On NCCL each phase is captured in one CUDA graph and replays are timed with CUDA events;
on gloo (CPU) the forwards run eagerly and are timed with perf_counter. Replays inside the
profiler window are annotated with SGLang 0.5.23's span names (`step[DECODE bs=N]`,
`step[VERIFY bs=N]`, `step[DRAFT bs=N]`).

Exit status 0 when every phase ran, 1 when one failed (JSON still written), 2 when the
process group could not be set up. The JSON is written before teardown; on NCCL the rank then
exits without destroying the process group (see the end of `main`).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import random
import resource
import shutil
import sys
import time
import traceback
from typing import Any

# this script runs without fastverify on its import path: its one helper module, by path
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import rank_support

PHASES = ("decode", "verify", "verify_compute", "draft", "draft_extend")
# profiler span per phase (SGLang 0.5.23 names; the drafter's extend pass is a draft forward)
SPAN = {"decode": "DECODE", "verify": "VERIFY", "draft": "DRAFT", "draft_extend": "DRAFT"}


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
        self.moe = plan.get("moe")
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
        self.v_cache = (
            [self._w(*cache_shape, scale=1.0) for _ in range(n_layers)]
            if self.attn["type"] == "gqa"
            else None
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


class Rank(rank_support.RankContext):
    def __init__(self, job: dict[str, Any]):
        super().__init__(job["backend"], cpu_threads=1)
        self.job = job

    def init(self) -> float:
        """The process group (with a tiny all-reduce inside when there are peers)."""
        return self.open_group(
            self.job.get("call", "pynccl"), nccl=self.job.get("nccl", True), warm=self.world > 1
        )

    def build(self) -> dict[str, Any]:
        job, torch = self.job, self.torch
        k, b = job["draft_tokens"], job["batch"]
        pool = int(job["pool_gb"] * (1 << 30))
        base = {"batch": b, "context": job["context"], "seed": job["seed"] + 1000 * self.rank}
        t0 = time.perf_counter()
        self.target = Model(
            torch,
            job["target"],
            self.device,
            self.dtype,
            {**base, "pool_bytes": pool, "tokens_per_seq": [1, k + 1]},
        )
        self.drafter = Model(
            torch,
            job["drafter"],
            self.device,
            self.dtype,
            {**base, "pool_bytes": 0, "tokens_per_seq": [1, k + 1]},
        )
        self.sync()
        info = {
            "build_s": time.perf_counter() - t0,
            "target_weight_bytes": self.target.allocated,
            "drafter_weight_bytes": self.drafter.allocated,
            "slot_counts": self.target.slot_counts,
            "expert_pool": self.target.expert_pool,
            "distinct_experts": {
                str(t): [r["n"] for r in rs if r] for t, rs in self.target.routes.items()
            },
        }
        self.pcie = None
        ar = job.get("allreduce") or {}
        if ar.get("backend") == "pcie_ipc" and self.cuda:
            self.pcie = rank_support.load_pcie_ipc().PcieIpc(
                torch, self.dist, self.world, int(ar["max_numel"]), job["target"]["hidden"]
            )
            info["allreduce"] = self.pcie.info()
        # static inputs per phase
        self.inputs: dict[str, tuple[Any, Any, int, Any, bool, Any]] = {}
        vt = job["target"]["vocab_per_rank"]
        vd = job["drafter"]["vocab_per_rank"]
        fc_in = job["drafter"].get("eagle3", {}).get("fc", [job["target"]["hidden"]])[0]
        for phase in PHASES:
            t = k + 1 if phase in ("verify", "verify_compute", "draft_extend") else 1
            n = b * t
            model = self.drafter if phase.startswith("draft") else self.target
            ids = torch.randint(0, vt if model is self.target else vd, (n,), device=self.device)
            hidden = (
                torch.randn(n, fc_in, device=self.device, dtype=self.dtype)
                if model is self.drafter
                else None
            )
            comm = Comm(self.group, self.world, enabled=phase != "verify_compute", pcie=self.pcie)
            self.inputs[phase] = (model, ids, t, hidden, phase == "draft_extend", comm)
        return info

    def _run(self, phase: str) -> Any:
        model, ids, t, hidden, extend, comm = self.inputs[phase]
        return model.forward(ids, hidden, t, comm, extend)

    # ------------------------------------------------------------ graphs (NCCL)
    def capture(self) -> dict[str, Any]:
        torch = self.torch
        self.graphs: dict[str, Any] = {}
        out: dict[str, Any] = {}
        for phase in PHASES:
            _, _, _, _, _, comm = self.inputs[phase]
            try:
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    self._run(phase)  # warm-up: lazy inits outside the capture
                torch.cuda.current_stream().wait_stream(stream)
                self.sync()
                comm.allreduce_calls = comm.allgather_calls = 0
                g = torch.cuda.CUDAGraph()
                t0 = time.perf_counter()
                with torch.cuda.graph(g):
                    self._run(phase)
                self.sync()
                self.graphs[phase] = g
                out[phase] = {
                    "capture": "ok",
                    "capture_ms": (time.perf_counter() - t0) * 1e3,
                    "allreduce_captured": comm.allreduce_calls,
                    "allgather_captured": comm.allgather_calls,
                }
            except Exception as exc:
                out[phase] = {"capture": "failed", "error": rank_support.err(exc)}
                break  # the CUDA context may be unusable after a failed capture
        return out

    def replay(self, phase: str) -> None:
        if self.cuda:
            self.graphs[phase].replay()
        else:
            self._run(phase)

    def time_phase(self, phase: str, steps: int, warmup: int) -> list[float]:
        torch = self.torch
        for _ in range(warmup):
            self.replay(phase)
        self.sync()
        self.dist.barrier()
        if not self.cuda:
            samples = []
            for _ in range(steps):
                t0 = time.perf_counter()
                self.replay(phase)
                samples.append((time.perf_counter() - t0) * 1e3)
            return samples
        pairs = []
        for _ in range(steps):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            self.replay(phase)
            e.record()
            pairs.append((s, e))
        self.sync()
        return [s.elapsed_time(e) for s, e in pairs]

    # ------------------------------------------------------------ grid (compute only)
    def run_grid(self) -> dict[str, Any]:
        """The target's forward, compute only (no collectives), at every batch size x tokens
        per sequence of `job["grid"]`: on NCCL each cell is captured in its own CUDA graph,
        timed over `steps` replays with CUDA events, then released; on gloo, eager forwards
        timed with perf_counter. One weight pool serves every cell; KV caches hold the
        largest batch and a cell reads its first `bs` sequences."""
        job, torch = self.job, self.torch
        bss = [int(b) for b in job["grid"]["batch_sizes"]]
        toks = [int(t) for t in job["grid"]["tokens_per_seq"]]
        t0 = time.perf_counter()
        model = Model(
            torch, job["target"], self.device, self.dtype,
            {"batch": max(bss), "batches": bss, "context": job["context"],
             "seed": job["seed"] + 1000 * self.rank, "tokens_per_seq": toks,
             "pool_bytes": int(job["pool_gb"] * (1 << 30))},
        )  # fmt: skip
        self.sync()
        build = {
            "build_s": time.perf_counter() - t0,
            "target_weight_bytes": model.allocated,
            "slot_counts": model.slot_counts,
            "expert_pool": model.expert_pool,
        }
        comm = Comm(self.group, self.world, enabled=False)
        vocab = job["target"]["vocab_per_rank"]
        cells: dict[str, dict[str, Any]] = {}
        for b in bss:
            row = cells.setdefault(str(b), {})
            for t in toks:
                ids = torch.randint(0, vocab, (b * t,), device=self.device)
                route = model.routes.get(b * t, [])
                samples, capture_ms = self._time_forward(
                    lambda ids=ids, t=t: model.forward(ids, None, t, comm, False),
                    job["steps"], job["warmup"],
                )  # fmt: skip
                row[str(t)] = {
                    "p50_ms": rank_support.percentile(samples, 50),
                    "p90_ms": rank_support.percentile(samples, 90),
                    "min_ms": min(samples),
                    "samples": len(samples),
                    "capture_ms": capture_ms,
                    "distinct_experts_mean": (
                        sum(r["n"] for r in route if r) / max(1, sum(1 for r in route if r))
                        if route else None
                    ),
                }  # fmt: skip
            print(json.dumps({"grid_batch": b, "p50_ms": {t: row[str(t)]["p50_ms"] for t in toks}}),
                  flush=True)  # fmt: skip
        drafter = self._grid_drafter(bss, toks, comm) if job.get("drafter") else None
        return {"build": build, "cells": cells, "drafter": drafter,
                "wall_s": time.perf_counter() - t0}  # fmt: skip

    def _grid_drafter(self, bss: list[int], toks: list[int], comm: Any) -> dict[str, Any]:
        """The EAGLE-3 drafter of `job["drafter"]` per batch size, compute only: its draft
        step (1 token per sequence) and its draft extend over t tokens per sequence (the
        target's hidden states in through its fc), timed as the target's cells are."""
        job, torch = self.job, self.torch
        plan = job["drafter"]
        model = Model(
            torch, plan, self.device, self.dtype,
            {"batch": max(bss), "batches": bss, "context": job["context"],
             "seed": job["seed"] + 1000 * self.rank + 1, "tokens_per_seq": toks,
             "pool_bytes": 0},
        )  # fmt: skip
        fc_in = plan.get("eagle3", {}).get("fc", [plan["hidden"]])[0]
        out: dict[str, Any] = {"weight_bytes": model.allocated, "step_ms": {}, "extend_ms": {}}
        for b in bss:
            row = out["extend_ms"].setdefault(str(b), {})
            for t in toks:
                n = b * t
                ids = torch.randint(0, plan["vocab_per_rank"], (n,), device=self.device)
                hidden = torch.randn(n, fc_in, device=self.device, dtype=self.dtype)
                runs = [(True, t)] + ([(False, 1)] if t == 1 else [])
                for extend, tt in runs:
                    samples, _ = self._time_forward(
                        lambda ids=ids, hidden=hidden, tt=tt, extend=extend: model.forward(
                            ids, hidden, tt, comm, extend
                        ),
                        job["steps"], job["warmup"],
                    )  # fmt: skip
                    p50 = rank_support.percentile(samples, 50)
                    if extend:
                        row[str(t)] = p50
                    else:
                        out["step_ms"][str(b)] = p50
        return out

    def _time_forward(self, fwd: Any, steps: int, warmup: int) -> tuple[list[float], Any]:
        """(ms per forward for `steps` runs, capture ms or None): CUDA-graph replays between
        CUDA events on NCCL, eager forwards on gloo."""
        torch = self.torch
        if not self.cuda:
            for _ in range(warmup):
                fwd()
            samples = []
            for _ in range(steps):
                t0 = time.perf_counter()
                fwd()
                samples.append((time.perf_counter() - t0) * 1e3)
            return samples, None
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fwd()  # warm-up: lazy inits outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        self.sync()
        graph = torch.cuda.CUDAGraph()
        t0 = time.perf_counter()
        with torch.cuda.graph(graph):
            fwd()
        self.sync()
        capture_ms = (time.perf_counter() - t0) * 1e3
        for _ in range(warmup):
            graph.replay()
        samples = rank_support.replay_ms(torch, graph, steps)
        del graph
        return samples, capture_ms

    def profile_window(self, path: str, cycles: int) -> dict[str, Any]:
        """One torch.profiler window: `cycles` x (K - 1 drafts, verify, draft extend: the job's
        `draft_forwards`, as SGLang's draft_forward) and a decode, each replay inside its SGLang
        span name."""
        from torch.profiler import ProfilerActivity, profile, record_function

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        b = self.job["batch"]
        order = ["draft"] * self.job["draft_forwards"] + ["verify", "draft_extend", "decode"]
        self.sync()
        self.dist.barrier()
        t0 = time.perf_counter()
        with profile(activities=acts) as prof:
            for _ in range(cycles):
                for phase in order:
                    with record_function(f"step[{SPAN[phase]} bs={b}]"):
                        self.replay(phase)
            self.sync()
        tmp = path.removesuffix(".gz") + ".tmp.json"
        prof.export_chrome_trace(tmp)
        with open(tmp, "rb") as src, gzip.open(path + ".part", "wb", compresslevel=3) as dst:
            shutil.copyfileobj(src, dst)
        os.replace(path + ".part", path)
        os.unlink(tmp)
        return {"cycles": cycles, "spans_per_cycle": order, "window_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", required=True, help="JSON job written by fastverify's rehearse")
    p.add_argument("--out", required=True)
    p.add_argument("--trace", default="", help="write the profiler window's trace here")
    args = p.parse_args(argv)
    with open(args.job, encoding="utf-8") as fh:
        job = json.load(fh)
    doc: dict[str, Any] = {
        **rank_support.report_head(job["backend"], job.get("call", "pynccl")),
        "status": "failed",
        "nccl_env": rank_support.nccl_env(),
    }
    t_start = time.perf_counter()
    try:
        rank = Rank(job)
        doc.update(rank.describe())
        doc["import_s"] = time.perf_counter() - t_start
        doc["init_s"] = rank.init()
    except Exception as exc:
        rank_support.init_failed(doc, exc, t_start)
        rank_support.write_report(args.out, doc)
        return 2

    failed = False
    if job.get("grid"):
        try:
            doc["grid"] = rank.run_grid()
        except Exception as exc:
            failed = True
            doc["error"] = rank_support.err(exc)
            doc["traceback"] = traceback.format_exc()[-3000:]
        return _finish(doc, rank, args.out, failed, t_start)
    try:
        doc["build"] = rank.build()
        calls = {}
        for phase in PHASES:  # one eager forward per phase: collective calls per forward
            comm = rank.inputs[phase][5]
            comm.allreduce_calls = comm.allgather_calls = 0
            rank._run(phase)
            calls[phase] = {"allreduce": comm.allreduce_calls, "allgather": comm.allgather_calls}
        rank.sync()
        doc["collectives_per_forward"] = calls
        if rank.pcie is not None:
            doc["allreduce"] = rank.pcie.info()  # calls so far: the eager forwards
        if rank.cuda:
            doc["graphs"] = rank.capture()
            failed = any(g.get("capture") != "ok" for g in doc["graphs"].values())
            failed = failed or len(doc["graphs"]) < len(PHASES)
        if not failed:
            timings = {}
            for phase in PHASES:
                samples = rank.time_phase(phase, job["steps"], job["warmup"])
                timings[phase] = {
                    "p50_ms": rank_support.percentile(samples, 50),
                    "p90_ms": rank_support.percentile(samples, 90),
                    "min_ms": min(samples),
                    "samples": len(samples),
                }
            doc["timings"] = timings
            if args.trace:
                doc["profile"] = rank.profile_window(args.trace, job["profile_cycles"])
    except Exception as exc:
        failed = True
        doc["error"] = rank_support.err(exc)
        doc["traceback"] = traceback.format_exc()[-3000:]
    return _finish(doc, rank, args.out, failed, t_start)


def _finish(doc: dict[str, Any], rank: Rank, out: str, failed: bool, t_start: float) -> int:
    """Write the report, then leave (see below); the exit status says whether it failed."""
    torch = rank.torch
    doc["status"] = "failed" if failed else "ok"
    if rank.cuda:
        with contextlib.suppress(Exception):
            doc["max_memory_gb"] = torch.cuda.max_memory_allocated(rank.device) / 2**30
    with contextlib.suppress(Exception):  # peak resident memory of this process (Linux: KiB)
        doc["max_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    doc["wall_s"] = time.perf_counter() - t_start
    # The report goes out before teardown: on 2 x H200 (torch 2.11, NCCL 2.28.9) a rank that
    # had replayed graphs holding NCCL kernels did not return from teardown within a minute.
    rank_support.write_report(out, doc)
    code = 1 if failed else 0
    if rank.cuda:
        # Drop the graphs, then leave without destroy_process_group and without atexit
        # handlers: the process exit releases the communicators and the CUDA context. The
        # parent also stops a rank that has reported and lingers (rehearse.REPORT_GRACE_S).
        with contextlib.suppress(Exception):
            getattr(rank, "graphs", {}).clear()
            torch.cuda.synchronize()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    try:
        rank.group.destroy()
    except Exception as exc:
        doc["teardown_error"] = rank_support.err(exc)
        rank_support.write_report(out, doc)
    return code


if __name__ == "__main__":
    sys.exit(main())
