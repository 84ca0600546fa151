"""One rank of `fastverifyctl rehearse`: a model's decode step and verify pass, random weights.

Run by `fastverify.experiments.rehearse.run` as a plain script, one process per GPU, with exactly
the profile's environment plus RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. It
imports only torch and the standard library (never fastverify; its model is rank_model.py
beside it, the ranks' setup common/rank_support.py). Input: a JSON job (--job)
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
import resource
import shutil
import sys
import time
import traceback
from typing import Any

# this script runs without fastverify on its import path: the ranks' shared helpers by path,
# its model from beside it
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import rank_support
from rank_model import Comm, Model

PHASES = ("decode", "verify", "verify_compute", "draft", "draft_extend")
# profiler span per phase (SGLang 0.5.23 names; the drafter's extend pass is a draft forward)
SPAN = {"decode": "DECODE", "verify": "VERIFY", "draft": "DRAFT", "draft_extend": "DRAFT"}


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
        self.graphs: dict[str, Any] = {}
        out: dict[str, Any] = {}
        for phase in PHASES:
            comm = self.inputs[phase][5]

            def captured(phase: str = phase, comm: Comm = comm) -> None:
                comm.allreduce_calls = comm.allgather_calls = 0  # the warm-up's aside
                self._run(phase)

            try:
                g, capture_ms = self.capture_graph(captured, lambda p=phase: self._run(p))
                self.graphs[phase] = g
                out[phase] = {
                    "capture": "ok",
                    "capture_ms": capture_ms,
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
        for _ in range(warmup):
            self.replay(phase)
        self.sync()
        self.dist.barrier()
        return self.time_ms(lambda: self.replay(phase), steps)

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
        if not self.cuda:
            for _ in range(warmup):
                fwd()
            return self.time_ms(fwd, steps), None
        graph, capture_ms = self.capture_graph(fwd)
        for _ in range(warmup):
            graph.replay()
        samples = rank_support.replay_ms(self.torch, graph, steps)
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
        # parent also stops a rank that has reported and lingers (rehearse.job.REPORT_GRACE_S).
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
