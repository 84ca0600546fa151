"""How much memory a rehearsal needs, how much this host has, and whether it fits.

Estimated before any rank starts, from the job `run.build_job` writes (the per-rank shapes
of `modelconfig.plan`, the batch, context and weight pool) and the element size of the
backend's dtype (bf16 on NCCL, float32 on gloo), following what `worker.Model` allocates:

- layer slots per kind (dense / MoE): as many as the pool's slot budget holds, counted in
  bf16 bytes (so a float32 gloo rank holds twice the pool), at least one, at most one per
  layer; MoE models give 3/4 of the pool to routed experts (at least the widest routing
  window: batch x (K+1) tokens x top_k experts);
- the drafter (no pool: one slot per kind);
- embedding, LM head (and the EAGLE-3 fc), KV caches (GQA: K and V; MLA: one latent);
- per rank: a fixed overhead (the Python + torch process, or the CUDA context and NCCL
  buffers) and `MARGIN` for activations and allocator slack.

Where it must fit: host RAM (`MemAvailable`) for every gloo rank together (they share the
host), and for NCCL each rank's GPU (free memory from NVML via `nvidia-smi`, when it can be
read; otherwise nothing is checked and the report says so).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

GIB = float(1 << 30)
BF16 = 2
FLOAT32 = 4
# The worker's process itself: Python + torch imported (gloo), or the CUDA context, cuBLAS
# workspace and NCCL buffers on the GPU (nccl).
HOST_OVERHEAD_BYTES = int(0.6 * GIB)
GPU_OVERHEAD_BYTES = int(1.5 * GIB)
MARGIN = 0.10  # activations, CUDA-graph pools, allocator slack: on top of the tensors
# One line per GPU: "0, 143156, 143771" (index, free MiB, total MiB) on an H200.
GPU_QUERY = ("--query-gpu=index,memory.free,memory.total", "--format=csv,noheader,nounits")


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def model_bytes(plan: dict[str, Any], pool_bytes: int, job: dict[str, Any], elem: int) -> int:
    """Bytes of the tensors one rank allocates for one model (see the module docstring)."""
    wb = plan["weights"]  # bf16 bytes per part (modelconfig.weight_bytes)
    scale = elem / BF16
    kinds = plan["layer_kinds"]
    moe = plan.get("moe")
    expert_budget = pool_bytes * 3 // 4 if moe else 0
    slot_budget = pool_bytes - expert_budget
    total = 0.0
    for kind in ("dense", "moe"):
        count = kinds.count(kind)
        if not count:
            continue
        per = wb["attention"] + (
            wb["dense_mlp"] if kind == "dense" else wb.get("shared_experts", 0)
        )
        n = max(1, min(count, -(-slot_budget // max(1, per))))
        total += n * per * scale
    if moe:
        widest = min(moe["experts"], job["batch"] * (job["draft_tokens"] + 1) * moe["top_k"])
        fit = expert_budget // max(1, wb["expert"])
        total += min(moe["experts"], max(widest, fit)) * wb["expert"] * scale
    total += (plan["vocab_per_rank"] * plan["hidden"] + _numel(plan["lm_head"])) * elem
    if "eagle3" in plan:
        total += _numel(plan["eagle3"]["fc"]) * elem
    attn = plan["attention"]
    if attn["type"] == "mla":
        cache = job["batch"] * job["context"] * attn["cache_dim"]
        caches = 1
    else:
        cache = job["batch"] * attn["kv_heads_per_rank"] * job["context"] * attn["head_dim"]
        caches = 2
    total += caches * len(kinds) * cache * elem
    return int(total)


@dataclass(frozen=True)
class Estimate:
    backend: str
    world: int
    tensors_per_rank: int  # target + drafter tensors of one rank
    overhead_per_rank: int

    @property
    def per_rank(self) -> int:
        return int(self.tensors_per_rank * (1 + MARGIN)) + self.overhead_per_rank

    @property
    def total(self) -> int:
        return self.per_rank * self.world

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "world": self.world,
            "tensors_per_rank_gb": self.tensors_per_rank / GIB,
            "per_rank_gb": self.per_rank / GIB,
            "total_gb": self.total / GIB,
        }


def estimate(job: dict[str, Any], world: int) -> Estimate:
    """Memory of one rehearsal with `job` (`run.build_job`) on `world` ranks."""
    gloo = job["backend"] != "nccl"
    elem = FLOAT32 if gloo else BF16
    pool = int(job["pool_gb"] * GIB)
    tensors = model_bytes(job["target"], pool, job, elem) + model_bytes(
        job["drafter"], 0, job, elem
    )
    overhead = HOST_OVERHEAD_BYTES if gloo else GPU_OVERHEAD_BYTES
    return Estimate(job["backend"], world, tensors, overhead)


def host_available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable of this host (what can be allocated without swapping), or None."""
    try:
        with open(meminfo, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def gpu_free_bytes(world: int) -> list[int] | None:
    """Free memory of the first `world` GPUs a rank would use (NVML through nvidia-smi,
    honouring CUDA_VISIBLE_DEVICES given as indices), or None when it cannot be read."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, *GPU_QUERY],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    free: dict[str, int] = {}
    for line in out.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        try:
            free[fields[0]] = int(float(fields[1]) * (1 << 20))  # MiB (nounits)
        except (ValueError, IndexError):
            continue
    if out.returncode != 0 or not free:
        return None
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    order = (
        [d.strip() for d in cvd.split(",") if d.strip()]
        if cvd is not None
        else sorted(free, key=int)
    )
    picked = [free[d] for d in order[:world] if d in free]
    return picked if len(picked) == world else None


def fit_problem(est: Estimate, host_bytes: int | None, gpu_bytes: list[int] | None) -> str | None:
    """Why the rehearsal cannot fit (how much it needs and has, what to change), or None."""
    need = est.to_dict()
    hint = "lower --pool-gb (layer weights per rank), --context or --batch" + (
        ", or fewer ranks (--nproc)" if est.world > 1 else ""
    )
    if est.backend != "nccl":
        if host_bytes is None or est.total <= host_bytes:
            return None
        return (
            f"not enough host memory for the gloo ranks: they need about {need['total_gb']:.1f} "
            f"GiB ({est.world} rank(s) x {need['per_rank_gb']:.1f} GiB: float32 weights, KV "
            f"caches, process) and this host has {host_bytes / GIB:.1f} GiB available "
            f"(MemAvailable); {hint}"
        )
    if not gpu_bytes:
        return None
    short = [(i, b) for i, b in enumerate(gpu_bytes) if est.per_rank > b]
    if not short:
        return None
    i, b = short[0]
    return (
        f"not enough GPU memory: each rank needs about {need['per_rank_gb']:.1f} GiB (bf16 "
        f"weights, KV caches, CUDA context) and GPU {i} has {b / GIB:.1f} GiB free; {hint}"
    )


def check_fit(est: Estimate) -> tuple[str | None, int | None, list[int] | None]:
    """(`fit_problem` against what this host has for `est`'s ranks, None when it fits; the
    host's MemAvailable, read for CPU ranks; each GPU's free memory, read for nccl ranks)."""
    host = host_available_bytes() if est.backend != "nccl" else None
    gpus = gpu_free_bytes(est.world) if est.backend == "nccl" else None
    return fit_problem(est, host, gpus), host, gpus
